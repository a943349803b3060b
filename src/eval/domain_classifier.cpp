#include "eval/domain_classifier.h"

#include <cmath>

#include "core/error.h"
#include "core/rng.h"

namespace ctrl {

std::vector<uint32_t> utf8_code_points(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char b = s[i];
    const int len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + size_t(len) <= n;
    uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1Fu) : len == 3 ? (b & 0x0Fu) : (b & 0x07u);
    for (int k = 1; ok && k < len; ++k) {
      if ((s[i + size_t(k)] & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (s[i + size_t(k)] & 0x3Fu);
    }
    if (!ok) {
      out.push_back(0xDC00u + b);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += size_t(len);
  }
  return out;
}

DomainClassifier::DomainClassifier(std::vector<std::string> labels, Options options)
    : labels_(std::move(labels)), options_(options) {
  if (labels_.empty()) fail("domain classifier: no labels");
  CTRL_ASSERT(options_.min_n >= 1 && options_.max_n >= options_.min_n && options_.buckets > 0 &&
              options_.smoothing > 0);
  counts_.assign(labels_.size(), std::vector<uint32_t>(options_.buckets, 0));
  totals_.assign(labels_.size(), 0);
  characters_.assign(labels_.size(), 0);
}

template <typename F>
void DomainClassifier::for_each_ngram(std::string_view text, F&& f) const {
  const std::vector<uint32_t> cps = utf8_code_points(text);
  for (size_t i = 0; i < cps.size(); ++i) {
    uint64_t h = 0;
    for (int n = 1; n <= options_.max_n && i + size_t(n) <= cps.size(); ++n) {
      h = mix64(h ^ (uint64_t(cps[i + size_t(n) - 1]) + 0x100000000ull * uint64_t(n)));
      if (n >= options_.min_n) f(uint32_t(h % options_.buckets));
    }
  }
}

void DomainClassifier::add(size_t label, std::string_view text) {
  CTRL_ASSERT(label < labels_.size());
  std::vector<uint32_t>& counts = counts_[label];
  uint64_t added = 0;
  for_each_ngram(text, [&](uint32_t b) {
    ++counts[b];
    ++added;
  });
  totals_[label] += added;
  characters_[label] += utf8_code_points(text).size();
  stale_ = true;
}

void DomainClassifier::refresh() const {
  if (!stale_) return;
  const double alpha = options_.smoothing, B = double(options_.buckets);
  log_prob_.assign(labels_.size(), std::vector<double>(options_.buckets));
  for (size_t l = 0; l < labels_.size(); ++l) {
    const double log_denominator = std::log(double(totals_[l]) + alpha * B);
    for (uint32_t b = 0; b < options_.buckets; ++b)
      log_prob_[l][b] = std::log(double(counts_[l][b]) + alpha) - log_denominator;
  }
  stale_ = false;
}

std::vector<double> DomainClassifier::scores(std::string_view text) const {
  refresh();
  std::vector<double> s(labels_.size(), 0.0);
  for_each_ngram(text, [&](uint32_t b) {
    for (size_t l = 0; l < labels_.size(); ++l) s[l] += log_prob_[l][b];
  });
  return s;
}

size_t DomainClassifier::classify(std::string_view text) const {
  const std::vector<double> s = scores(text);
  size_t best = 0;
  for (size_t l = 1; l < s.size(); ++l)
    if (s[l] > s[best]) best = l;
  return best;
}

}  // namespace ctrl
