// libFuzzer: wikitext_to_text and the page classifiers on arbitrary bytes (must not crash or hang).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "corpus/wikitext.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view s(reinterpret_cast<const char*>(data), size);
  ctrl::WikitextOptions options;
  options.drop_trailing_sections = size % 2 == 0;
  (void)ctrl::wikitext_to_text(s, options);
  (void)ctrl::is_redirect_wikitext(s);
  (void)ctrl::is_disambiguation_wikitext(s);
  return 0;
}
