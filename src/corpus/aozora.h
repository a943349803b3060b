// Aozora Bunko texts: encoding detection (UTF-8 with/without BOM, else
// Shift_JIS X 0213 via iconv with a CP932 fallback per line), header/footer
// removal, ruby, ［＃…］ annotations, gaiji and 〔…〕 accent notation.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "corpus/input.h"

namespace ctrl {

// Raw file bytes -> UTF-8 with '\n' line ends. Undecodable bytes (and DEL, 0x7F, with a lead byte
// before it) are dropped and counted in *bad_bytes; the file offset of the first one goes to
// *first_bad_offset when given (unchanged when there is none).
std::string aozora_decode_bytes(std::string_view raw, uint64_t* bad_bytes, uint64_t* first_bad_offset = nullptr);

struct AozoraText {
  std::string title, author;  // the first two header lines (author may be empty)
  std::string text;           // body, markup removed
  uint64_t gaiji_resolved = 0;
  uint64_t gaiji_unresolved = 0;  // each written as 〓
};

// Decoded UTF-8 Aozora text -> clean body (header and footer removed, notation resolved).
AozoraText aozora_to_text(std::string_view utf8);

// The character of JIS X 0213 plane/row/cell (e.g. 1,84,77), via iconv SHIFT_JISX0213; empty if none.
std::string jisx0213_to_utf8(int plane, int row, int cell);

// One Aozora text file's bytes -> one document (warnings for bad bytes, unresolved gaiji counted in
// stats.dropped["gaiji_unresolved"]).
void read_aozora_bytes(std::string_view raw, const std::string& file, ReadContext& context);

// A .zip as distributed: every .txt member is read as an Aozora text (images are ignored).
void read_aozora_zip(const std::string& path, ReadContext& context);

}  // namespace ctrl
