// WikiExtractor output: --json lines {"id","url","title","text"} or the
// <doc id=".." url=".." title="..">…</doc> format, plain or bz2 (the stream
// decompresses). Left-over entities (&amp; &lt; …) are decoded.
#pragma once
#include <string>

#include "corpus/input.h"

namespace ctrl {

// JSON lines: bad lines are warnings (file:offset), the others kept; missing/empty text -> dropped["empty"].
void read_wikiextractor_json(ByteStream& stream, const std::string& file, ReadContext& context);

// <doc …> blocks: the first line after <doc> repeats the title and is removed. An unclosed <doc> at the end
// is a warning and its text is kept.
void read_wikiextractor_doc(ByteStream& stream, const std::string& file, ReadContext& context);

}  // namespace ctrl
