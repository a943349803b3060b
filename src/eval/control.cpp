#include "eval/control.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/plot.h"
#include "core/progress.h"
#include "data/shard.h"
#include "eval/domain_classifier.h"
#include "tokenizer/tokenizer.h"
#include "train/trainer.h"

namespace ctrl {

double CodeMatrix::gain(size_t r) const {
  const size_t own = row_column[r];
  double sum = 0;
  int n = 0;
  for (size_t c = 0; c < columns.size(); ++c)
    if (c != own) sum += loss[r][c], ++n;
  return n ? sum / n - loss[r][own] : 0.0;
}

CodeMatrix code_matrix(Model& model, const Batches& batches, int64_t batch, int64_t max_sequences, bool quiet) {
  CodeMatrix m;
  const int64_t T = batches.context();
  for (size_t c = 0; c < batches.n_codes(); ++c) {
    m.columns.push_back(batches.code_name(c));
    m.column_tokens.push_back(batches.code_token(c));
  }
  // The windows first, so the progress line knows the total.
  std::vector<std::vector<int32_t>> tokens(batches.n_codes()), targets(batches.n_codes());
  int64_t total = 0;
  for (size_t c = 0; c < batches.n_codes(); ++c) {
    const int64_t n = batches.held_out(c, max_sequences, &tokens[c], &targets[c]);
    if (n == 0) continue;
    m.rows.push_back(batches.code_name(c));
    m.row_column.push_back(c);
    m.windows.push_back(n);
    total += n * int64_t(batches.n_codes());
  }
  std::unique_ptr<Progress> progress;
  if (!quiet) progress = std::make_unique<Progress>("code-by-code matrix", uint64_t(total), "windows");
  for (size_t r = 0; r < m.rows.size(); ++r) {
    const size_t own = m.row_column[r];
    std::vector<int32_t>& tok = tokens[own];
    const int64_t n = m.windows[r];
    std::vector<double> row(m.columns.size());
    int64_t count = 0;
    for (size_t c = 0; c < m.columns.size(); ++c) {
      // Only position 0, the control token, changes; the text and its targets stay.
      for (int64_t i = 0; i < n; ++i) tok[size_t(i * T)] = m.column_tokens[c];
      const LossSum l = evaluate_windows(model, tok.data(), targets[own].data(), n, T, batch);
      row[c] = l.count ? l.sum / double(l.count) : 0.0;
      count = l.count;
      if (progress) progress->add(uint64_t(n), m.rows[r] + " as " + m.columns[c]);
    }
    m.loss.push_back(std::move(row));
    m.tokens.push_back(count);
  }
  if (progress) progress->finish();
  return m;
}

std::string code_matrix_json(const CodeMatrix& m) {
  nlohmann::ordered_json j;
  j["codes"] = m.columns;
  j["rows"] = m.rows;
  nlohmann::ordered_json windows, tokens, loss, ppl, gain;
  for (size_t r = 0; r < m.rows.size(); ++r) {
    windows[m.rows[r]] = m.windows[r];
    tokens[m.rows[r]] = m.tokens[r];
    for (size_t c = 0; c < m.columns.size(); ++c) {
      loss[m.rows[r]][m.columns[c]] = m.loss[r][c];
      ppl[m.rows[r]][m.columns[c]] = std::exp(m.loss[r][c]);
    }
    gain[m.rows[r]] = m.gain(r);
  }
  j["windows"] = windows;
  j["tokens"] = tokens;
  j["loss"] = loss;
  j["perplexity"] = ppl;
  j["control_gain"] = gain;
  return j.dump(2) + "\n";
}

std::string code_matrix_svg(const CodeMatrix& m) {
  Heatmap h;
  h.title = "Held-out loss (nats/token) with each control code";
  h.x_label = "control code given";
  h.y_label = "held-out text of";
  h.columns = m.columns;
  for (size_t r = 0; r < m.rows.size(); ++r) {
    char gain[64];
    std::snprintf(gain, sizeof gain, " (gain %+.3f)", m.gain(r));
    h.rows.push_back(m.rows[r] + gain);
    const double own = m.loss[r][m.row_column[r]];
    std::vector<double> color;
    std::vector<std::string> text;
    for (size_t c = 0; c < m.columns.size(); ++c) {
      color.push_back(m.loss[r][c] - own);
      char buf[64];
      if (c == m.row_column[r]) std::snprintf(buf, sizeof buf, "%.3f", m.loss[r][c]);
      else std::snprintf(buf, sizeof buf, "%.3f (%+.3f)", m.loss[r][c], m.loss[r][c] - own);
      text.push_back(buf);
    }
    h.color.push_back(std::move(color));
    h.text.push_back(std::move(text));
    h.outlined.push_back({r, m.row_column[r]});
  }
  h.legend = "outlined: the text's own code; colour: loss minus the own-code loss (red: worse)";
  return heatmap_svg(h);
}

}  // namespace ctrl

namespace ctrl {

namespace {

// Token stretches of a stream split at the end-of-document id.
std::vector<std::vector<int32_t>> split_documents(const std::vector<int32_t>& tokens, int32_t eos) {
  std::vector<std::vector<int32_t>> docs(1);
  for (int32_t t : tokens) {
    if (t == eos) docs.emplace_back();
    else docs.back().push_back(t);
  }
  if (docs.back().empty()) docs.pop_back();
  return docs;
}

std::vector<int32_t> read_stream(const TokenStream& s, uint64_t offset, uint64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  if (n) s.copy(offset, n, v.data());
  return v;
}

}  // namespace

double ControlAccuracy::accuracy(const std::vector<std::vector<int64_t>>& confusion,
                                 const std::vector<int64_t>& misses) {
  double sum = 0;
  int rows = 0;
  for (size_t r = 0; r < confusion.size(); ++r) {
    int64_t total = r < misses.size() ? misses[r] : 0;
    for (int64_t v : confusion[r]) total += v;
    if (total == 0) continue;
    sum += double(confusion[r][r]) / double(total);
    ++rows;
  }
  return rows ? sum / rows : 0.0;
}

std::vector<std::string> ControlAccuracy::ceiling_codes() const {
  std::vector<std::string> out;
  for (size_t c = 0; c < codes.size(); ++c)
    if (std::any_of(ceiling_confusion[c].begin(), ceiling_confusion[c].end(), [](int64_t v) { return v > 0; }))
      out.push_back(codes[c]);
  return out;
}

int64_t ControlAccuracy::empty_total() const {
  int64_t n = 0;
  for (int64_t e : empty_samples) n += e;
  return n;
}

ControlAccuracy control_accuracy(Model& model, const Dataset& data, const Tokenizer& tokenizer,
                                 const ControlAccuracyOptions& o) {
  ControlAccuracy a;
  const size_t K = data.n_codes();
  const int32_t eos = data.manifest().eos_id;
  for (size_t c = 0; c < K; ++c) a.codes.push_back(data.code(c).name);
  DomainClassifier classifier(a.codes);

  // 1. The classifier, from the training split.
  {
    std::unique_ptr<Progress> progress;
    if (!o.quiet) progress = std::make_unique<Progress>("domain classifier: training text", uint64_t(K), "codes");
    for (size_t c = 0; c < K; ++c) {
      const TokenStream& s = data.train(c);
      const uint64_t cap = uint64_t(std::max<int64_t>(o.train_tokens_per_code, 1));
      const uint64_t pieces = s.size() <= cap ? 1 : 16, piece = s.size() <= cap ? s.size() : cap / pieces;
      for (uint64_t p = 0; p < pieces; ++p) {
        const uint64_t start = pieces == 1 ? 0 : p * (s.size() / pieces);
        for (const auto& doc : split_documents(read_stream(s, start, piece), eos))
          classifier.add(c, tokenizer.decode(doc));
      }
      if (progress) progress->add(1, a.codes[c]);
    }
    if (progress) progress->finish();
  }
  a.classifier_characters = classifier.trained_characters();

  // 2. Its ceiling: held-out documents cut into snippets of the samples' length.
  const int64_t n_ctx = model.config().n_ctx;
  a.sample_tokens = std::min(o.max_tokens, n_ctx);
  a.ceiling_confusion.assign(K, std::vector<int64_t>(K, 0));
  const size_t len = size_t(a.sample_tokens);
  for (size_t c = 0; c < K; ++c) {
    // Where the snippets are (offset, length), found in pieces of the stream: only those classified
    // are read whole, so a held-out split of billions of tokens is never copied.
    const TokenStream& s = data.valid(c);
    std::vector<std::pair<uint64_t, size_t>> snippets;
    auto cut = [&](uint64_t begin, uint64_t end) {  // the document s[begin, end)
      for (uint64_t at = begin; at < end; at += len) {
        const size_t n = size_t(std::min<uint64_t>(len, end - at));
        // A document's short tail is not a snippet of its own (unless it is the whole document).
        if (at > begin && n < len / 2) break;
        snippets.emplace_back(at, n);
      }
    };
    uint64_t doc_begin = 0;
    constexpr uint64_t kPiece = uint64_t(1) << 20;
    for (uint64_t start = 0; start < s.size(); start += kPiece) {
      const std::vector<int32_t> piece = read_stream(s, start, std::min(kPiece, s.size() - start));
      for (size_t k = 0; k < piece.size(); ++k)
        if (piece[k] == eos) cut(doc_begin, start + k), doc_begin = start + k + 1;
    }
    cut(doc_begin, s.size());
    const size_t take = std::min(snippets.size(), size_t(std::max<int64_t>(o.ceiling_snippets, 0)));
    for (size_t i = 0; i < take; ++i) {
      const auto [offset, n] = snippets[i * snippets.size() / take];
      ++a.ceiling_confusion[c][classifier.classify(tokenizer.decode(read_stream(s, offset, n)))];
    }
  }

  // 3. Samples under each code, labelled.
  a.confusion.assign(K, std::vector<int64_t>(K, 0));
  a.empty_samples.assign(K, 0);
  a.samples.assign(K, {});
  SamplingOptions sampling = o.sampling;
  sampling.vocabulary = tokenizer.vocab_size();  // every sample must decode
  Generator gen(model);
  std::unique_ptr<Progress> progress;
  if (!o.quiet)
    progress = std::make_unique<Progress>("control accuracy: generating",
                                          uint64_t(K) * uint64_t(o.samples_per_code), "samples");
  for (size_t c = 0; c < K; ++c) {
    for (int64_t i = 0; i < o.samples_per_code; ++i) {
      // Each sample's randomness is its own stream: the same sample whatever N or the order.
      CounterRng rng{o.seed, 0xC0DE0000ull + c, uint64_t(i) << 32};
      gen.reset();
      std::vector<int32_t> history = {data.code(c).token_id};
      std::vector<float> logits = gen.feed(history[0]);
      for (int64_t t = 0; t < a.sample_tokens; ++t) {
        const int32_t next = sample_next(logits, history, sampling, rng);
        if (next == eos) break;
        history.push_back(next);
        if (gen.position() >= n_ctx) break;
        logits = gen.feed(next);
      }
      const std::string text = tokenizer.decode(std::vector<int32_t>(history.begin() + 1, history.end()));
      if (history.size() == 1)
        ++a.empty_samples[c];
      else
        ++a.confusion[c][classifier.classify(text)];
      a.samples[c].push_back(text);
      if (progress) progress->add(1, a.codes[c]);
    }
  }
  if (progress) progress->finish();
  return a;
}

std::string control_accuracy_json(const ControlAccuracy& a, const ControlAccuracyOptions& o) {
  nlohmann::ordered_json j;
  j["codes"] = a.codes;
  j["samples_per_code"] = o.samples_per_code;
  j["sampling"] = {{"max_tokens", a.sample_tokens}, {"temperature", o.sampling.temperature},
                   {"top_k", o.sampling.top_k},     {"top_p", o.sampling.top_p},
                   {"penalty", o.sampling.penalty}, {"seed", o.seed}};
  auto matrix = [&](const std::vector<std::vector<int64_t>>& m) {
    nlohmann::ordered_json x;
    for (size_t r = 0; r < a.codes.size(); ++r)
      for (size_t c = 0; c < a.codes.size(); ++c) x[a.codes[r]][a.codes[c]] = m[r][c];
    return x;
  };
  j["confusion"] = matrix(a.confusion);
  j["accuracy"] = a.sample_accuracy();
  nlohmann::ordered_json empty;
  for (size_t c = 0; c < a.codes.size(); ++c) empty[a.codes[c]] = a.empty_samples[c];
  j["empty_samples"] = empty;  // left out of the confusion matrix, counted as misses
  j["classifier"] = {{"kind", "multinomial naive Bayes, character 1-3-grams, uniform prior"},
                     {"training_characters", a.classifier_characters},
                     {"held_out_confusion", matrix(a.ceiling_confusion)},
                     {"held_out_accuracy", ControlAccuracy::accuracy(a.ceiling_confusion)}};
  nlohmann::ordered_json samples;
  for (size_t c = 0; c < a.codes.size(); ++c) samples[a.codes[c]] = a.samples[c];
  j["samples"] = samples;
  return j.dump(2) + "\n";
}

}  // namespace ctrl
