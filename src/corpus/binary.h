// Binary files among text inputs: a directory of text may hold an executable
// or an image named *.txt, which a reader decodes into a long document of
// mojibake. prepare asks this of every document before cleaning and skips the
// ones it flags (counted as "binary", with a warning naming the file).
#pragma once
#include <string>
#include <string_view>

namespace ctrl {

// Why `text` (a reader's document, before cleaning) looks like a binary file's
// bytes, or "" if it looks like text. Looks at the first 64 KB: binary when it
// holds a NUL, or when more than 1 in 20 of its characters are control
// characters other than tab, newline, CR and form feed (C0 and C1), U+FFFD
// replacement characters or invalid UTF-8 bytes. Text in any language, in any
// encoding a reader decodes, has none of these in such numbers.
std::string binary_reason(std::string_view text);

}  // namespace ctrl
