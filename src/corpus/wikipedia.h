// MediaWiki XML export (pages-articles) reader: expat streams the XML, one
// parser thread hands pages to worker threads that convert wikitext to text,
// and documents leave in page order.
#pragma once
#include <string>

#include "corpus/input.h"

namespace ctrl {

// Reads every <page> of the stream; keeps namespace 0, drops redirects
// (stats.dropped["redirect"]), disambiguation pages ("disambiguation"), other
// namespaces ("namespace"), and pages empty after cleaning ("empty").
// XML errors (e.g. a cut-off file) are a warning with the byte offset; pages
// completed before it are kept. Document.title is the page title, origin "file#title".
void read_wikipedia_xml(ByteStream& stream, const std::string& file, ReadContext& context);

}  // namespace ctrl
