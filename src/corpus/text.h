// Plain text (one document per file) and JSON lines ({"text": …, optional
// "title", and "control_code" or "control" overriding the source's code).
#pragma once
#include <string>
#include <string_view>

#include "corpus/input.h"

namespace ctrl {

// One UTF-8 document; invalid bytes are dropped and warned about (first offset), CRLF -> LF.
// Empty or whitespace-only -> dropped["empty"]. A text longer than options.max_document_bytes is split
// into several, at blank lines where it has them (else at line ends, else between characters), with a
// warning that says so.
void read_plain_text(std::string_view bytes, const std::string& file, ReadContext& context);

// One document per line; bad JSON or a missing/non-string "text" is a warning naming file:offset and
// the line is skipped. Invalid UTF-8 bytes are dropped with a warning at the first one's offset, and
// the rest of the line is read.
void read_json_lines(ByteStream& stream, const std::string& file, ReadContext& context);

}  // namespace ctrl
