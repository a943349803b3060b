// Aozora Bunko texts: encoding detection (UTF-8 with/without BOM, else
// Shift_JIS X 0213 or CP932 via iconv, per line), header/footer removal, ruby,
// ［＃…］ annotations, くの字点, gaiji and 〔…〕 accent notation.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "corpus/input.h"

namespace ctrl {

// Whether bytes are UTF-8 text, perhaps damaged (a few invalid bytes among
// many valid multi-byte characters, or a last character cut off), rather than
// Shift_JIS.
bool looks_utf8(std::string_view bytes);

// The encodings Japanese text is read in.
enum class TextEncoding { kUtf8, kShiftJis, kEucJp };

// Whether bytes that are not UTF-8 are EUC-JP: every byte above 0x7F in
// EUC-JP's pairs (0xA1-0xFE twice, 0x8E before a half-width kana, 0x8F
// before two), none in 0x80-0xA0 otherwise. Shift_JIS text has such bytes in
// nearly every line (0x82 and 0x83 lead its kana, 0x88-0x9F most kanji).
bool looks_euc_jp(std::string_view bytes);

// Raw Japanese text bytes -> UTF-8 with '\n' line ends. UTF-8 when looks_utf8
// (a BOM dropped); else EUC-JP (JIS X 0213 for lines plain EUC-JP cannot
// decode) when looks_euc_jp; else Shift_JIS X 0213 line by line, CP932 for
// lines with CP932's extension characters or that X 0213 cannot decode.
// Undecodable bytes (and DEL, 0x7F, with a lead byte before it) are dropped
// and counted in *bad_bytes; the file offset of the first one goes to
// *first_bad_offset when given (unchanged when there is none), and the
// encoding taken to *encoding.
std::string decode_japanese_bytes(std::string_view raw, uint64_t* bad_bytes, uint64_t* first_bad_offset = nullptr,
                                  TextEncoding* encoding = nullptr);

// The warning for decode_japanese_bytes's dropped bytes.
std::string undecodable_bytes_text(uint64_t bad, TextEncoding encoding);

// Whether decoded text carries Aozora Bunko's notation (［＃…］, a 底本： footer,
// the 【テキスト中に現れる記号について】 block, or kana ruby 《…》), so that its
// header, footer and notation are to be removed. Other Japanese text, in
// either encoding, is plain text.
bool looks_like_aozora(std::string_view utf8);

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
// stats.notes).
void read_aozora_bytes(std::string_view raw, const std::string& file, ReadContext& context);

// A .zip as distributed: every .txt member is read as an Aozora text (images are ignored).
void read_aozora_zip(const std::string& path, ReadContext& context);

}  // namespace ctrl
