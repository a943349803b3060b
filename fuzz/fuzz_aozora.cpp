// libFuzzer: Aozora decoding (UTF-8 / Shift_JIS X 0213 / CP932) and notation removal on arbitrary bytes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "corpus/aozora.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view raw(reinterpret_cast<const char*>(data), size);
  uint64_t bad = 0;
  const std::string utf8 = ctrl::decode_japanese_bytes(raw, &bad);
  (void)ctrl::aozora_to_text(utf8);
  if (size >= 3) (void)ctrl::jisx0213_to_utf8(data[0] % 4, data[1] % 100, data[2] % 100);
  return 0;
}
