// An independent domain classifier for measuring control: multinomial naive
// Bayes over character n-grams (1 to 3 Unicode characters by default, hashed
// into a fixed number of buckets), with additive smoothing and a uniform
// prior over the labels.
//
// Why this and not the model: control accuracy asks whether text generated
// under code A reads like A's text to a judge that shares nothing with the
// model — not its tokenizer, not its parameters, not its perplexity. Naive
// Bayes on character n-grams is small, fast to train on a whole corpus and
// strong at telling domains apart (manual pages from FAQs, Wikipedia from
// novels). A uniform prior keeps the judge from favouring the largest domain:
// the samples it judges come in equal numbers per code.
//
// Deterministic: the same texts added in the same order give the same
// counts, the same scores and the same labels (ties go to the lower label).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ctrl {

class DomainClassifier {
 public:
  struct Options {
    int min_n = 1, max_n = 3;          // n-gram lengths in characters
    uint32_t buckets = 1u << 18;       // hashed feature space
    double smoothing = 0.1;            // added to every bucket's count
  };
  explicit DomainClassifier(std::vector<std::string> labels) : DomainClassifier(std::move(labels), Options{}) {}
  DomainClassifier(std::vector<std::string> labels, Options options);

  // Training text of `label` (any number of calls per label, in any order).
  void add(size_t label, std::string_view text);
  // Log-likelihood of the text under each label (uniform prior): higher is likelier.
  std::vector<double> scores(std::string_view text) const;
  // The label with the highest score; ties (e.g. an empty text) go to the lowest index.
  size_t classify(std::string_view text) const;

  const std::vector<std::string>& labels() const { return labels_; }
  // Characters of training text per label.
  const std::vector<uint64_t>& trained_characters() const { return characters_; }

 private:
  // Calls f(bucket) for every n-gram of the text.
  template <typename F>
  void for_each_ngram(std::string_view text, F&& f) const;
  void refresh() const;

  std::vector<std::string> labels_;
  Options options_;
  std::vector<std::vector<uint32_t>> counts_;  // [label][bucket]
  std::vector<uint64_t> totals_, characters_;
  // Log-probabilities per bucket, recomputed after training text changes.
  mutable std::vector<std::vector<double>> log_prob_;
  mutable bool stale_ = true;
};

// Decodes UTF-8 into code points; an invalid byte becomes one code point of
// its own (0xDC00 + byte), so any byte string has a decoding.
std::vector<uint32_t> utf8_code_points(std::string_view text);

}  // namespace ctrl
