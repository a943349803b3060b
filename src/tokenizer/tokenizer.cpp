// SentencePiece wrapper: training through the sentence-iterator API (no
// temporary text file), loading, parallel encoding and decoding.
#include "tokenizer/tokenizer.h"

#include <omp.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <cstdio>
#include <regex>
#include <unordered_map>

#include "core/clean_text.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/progress.h"
#include "tokenizer/trainer_log.h"

namespace ctrl {

namespace {

// Adapts a SentenceSource to SentencePiece's pull iterator, with progress.
// A line longer than kMaxSentenceBytes is fed as several sentences.
class Feeder : public sentencepiece::SentenceIterator {
 public:
  Feeder(SentenceSource& source, TokenizerTrainStats& stats, std::FILE* terminal)
      : source_(source), stats_(stats),
        progress_("tokenizer: reading sentences", source.size_hint(), "sentences", terminal) {
    stats_ = {};
    source_.rewind();
    Next();
  }
  bool done() const override { return done_; }
  void Next() override {
    while (true) {
      if (piece_ < pieces_.size()) {
        value_.assign(pieces_[piece_].data(), pieces_[piece_].size());
        ++piece_;
        ++stats_.sentences;
        if (!value_.empty()) return;
        continue;
      }
      if (!source_.next(line_)) {
        done_ = true;
        progress_.finish();  // SentencePiece reads everything, then trains
        return;
      }
      progress_.add(1);
      piece_ = 0;
      if (line_.size() > kMaxSentenceBytes) {
        pieces_ = split_for_encoding(line_, kMaxSentenceBytes);
        ++stats_.long_lines;
        stats_.long_line_pieces += pieces_.size();
      } else {
        pieces_.assign(1, std::string_view(line_));
      }
    }
  }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  SentenceSource& source_;
  TokenizerTrainStats& stats_;
  Progress progress_;
  std::string line_, value_;
  std::vector<std::string_view> pieces_;
  size_t piece_ = 0;
  bool done_ = false;
};

int thread_count(int threads) { return threads > 0 ? threads : omp_get_max_threads(); }

}  // namespace

std::vector<std::string_view> split_for_encoding(std::string_view text, size_t max_bytes) {
  std::vector<std::string_view> out;
  if (max_bytes < 8) max_bytes = 8;  // room for one UTF-8 character
  auto is_sentence_end = [&](size_t end) {  // text[.., end) ends a sentence
    static constexpr std::string_view kEnds[] = {"\xE3\x80\x82", "\xEF\xBC\x8E", "\xEF\xBC\x81", "\xEF\xBC\x9F",
                                                  ".", "!", "?"};
    for (auto e : kEnds)
      if (end >= e.size() && text.substr(end - e.size(), e.size()) == e) return true;
    return false;
  };
  while (text.size() > max_bytes) {
    const std::string_view window = text.substr(0, max_bytes);
    size_t cut = window.rfind('\n');
    cut = cut == std::string_view::npos ? 0 : cut + 1;
    if (cut < max_bytes / 4) {  // no newline in the last three quarters: try a sentence end
      for (size_t end = max_bytes; end > max_bytes / 4; --end)
        if (is_sentence_end(end)) {
          cut = end;
          break;
        }
    }
    if (cut < max_bytes / 4) {  // a character boundary
      cut = max_bytes;
      while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
      if (cut == 0) cut = max_bytes;  // not UTF-8 at all: any cut will do
    }
    out.push_back(text.substr(0, cut));
    text.remove_prefix(cut);
  }
  if (!text.empty()) out.push_back(text);
  return out;
}

uint32_t train_tokenizer(SentenceSource& sentences, const TokenizerTrainOptions& options, const std::string& model_path,
                         TokenizerTrainStats* stats_out) {
  TokenizerTrainStats stats;
  std::string symbols;
  for (const auto& code : options.control_codes) {
    if (code.empty() || code.find_first_of(", \t\n") != std::string::npos)
      fail("control code '" + code + "': expected a non-empty name without spaces or commas");
    symbols += (symbols.empty() ? "" : ",") + code;
  }
  uint32_t vocab = options.vocab_size;
  for (int attempt = 0;; ++attempt) {
    std::unordered_map<std::string, std::string> args = {
        {"model_type", "unigram"},
        {"vocab_size", std::to_string(vocab)},
        {"character_coverage", std::to_string(options.character_coverage)},
        {"byte_fallback", "true"},
        // The space (SentencePiece's ▁) is always a piece: where spaces are rare (Japanese text),
        // character_coverage left it out, byte fallback spelled ▁'s own bytes, and those decode
        // as a literal "▁", not as the space the text had.
        {"required_chars", "\xE2\x96\x81"},
        {"normalization_rule_name", "identity"},
        {"add_dummy_prefix", "false"},
        {"remove_extra_whitespaces", "false"},
        {"split_digits", "true"},
        {"input_sentence_size", std::to_string(options.sample_sentences)},
        {"shuffle_input_sentence", "true"},
        {"max_sentence_length", std::to_string(kMaxSentenceBytes)},
        {"num_threads", std::to_string(kTokenizerTrainerThreads)},  // the same tokenizer on any machine
        {"minloglevel", "0"},  // TrainerLog turns the informational lines into progress
    };
    // Control symbols, not user-defined ones: text never encodes to them (a "Wiki" inside "Wikipedia" stays
    // text), so a control token appears only where a sequence is given it, at position 0.
    if (!symbols.empty()) args["control_symbols"] = symbols;
    sentencepiece::SetRandomGeneratorSeed(options.seed);
    std::string model;
    sentencepiece::util::Status status;
    {
      TrainerLog log("tokenizer: training unigram model (" + std::to_string(vocab) + " pieces)", vocab);
      Feeder feeder(sentences, stats, log.terminal());
      status = sentencepiece::SentencePieceTrainer::Train(args, &feeder, &model);
    }
    if (status.ok()) {
      std::fprintf(stderr, "tokenizer: trained on %s of %llu sentences", 
                   stats.sentences > options.sample_sentences ? "a random sample" : "all",
                   static_cast<unsigned long long>(stats.sentences));
      if (stats.sentences > options.sample_sentences)
        std::fprintf(stderr, " (%llu, --sample-sentences)", static_cast<unsigned long long>(options.sample_sentences));
      if (stats.long_lines > 0)
        std::fprintf(stderr, "; %llu line(s) longer than %zu bytes were split into %llu sentences",
                     static_cast<unsigned long long>(stats.long_lines), kMaxSentenceBytes,
                     static_cast<unsigned long long>(stats.long_line_pieces));
      std::fprintf(stderr, "\n");
      if (stats_out) *stats_out = stats;
      write_file_atomically(model_path, model);
      return vocab;
    }
    const std::string message = status.message();
    // SentencePiece reports "Vocabulary size too high (V). Please set it to a value
    // <= N." when the corpus cannot support the requested size.
    std::smatch m;
    if (std::regex_search(message, m, std::regex("<= ([0-9]+)")) && attempt == 0) {
      const uint32_t fits = uint32_t(std::stoul(m[1]));
      if (!options.allow_smaller_vocab || fits == 0)
        fail("tokenizer: the corpus is too small for " + std::to_string(vocab) + " pieces; SentencePiece allows at most " +
             std::to_string(fits) + " (pass a smaller --vocab-size)");
      std::fprintf(stderr, "ctrl: warning: the corpus is too small for %u pieces; lowering the vocabulary to %u\n", vocab,
                   fits);
      vocab = fits;
      continue;
    }
    // "Vocabulary size is smaller than required_chars. V vs N.": the pieces must
    // at least hold every required character, the specials and the control codes.
    if (std::regex_search(message, m, std::regex("smaller than required_chars\\. [0-9]+ vs ([0-9]+)")))
      fail("tokenizer: --vocab-size " + std::to_string(vocab) + " is too small for this corpus: SentencePiece needs " +
           m[1].str() + " pieces for its characters with the special and byte pieces (pass --vocab-size " + m[1].str() +
           " or more)");
    fail("tokenizer: SentencePiece training failed: " + message);
  }
}

Tokenizer::Tokenizer() : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& path) {
  if (!file_exists(path)) fail(path + ": no such tokenizer model");
  return from_bytes(read_file(path), path);
}

Tokenizer Tokenizer::from_bytes(const std::string& bytes, const std::string& name) {
  Tokenizer t;
  t.path_ = name;
  const auto status = t.sp_->LoadFromSerializedProto(absl::string_view(bytes.data(), bytes.size()));
  // SentencePiece's message is its own source location and statement: not for a user.
  if (!status.ok()) fail(name + ": not a SentencePiece model (expected a .model file from spm_train or ctrl prepare)");
  if (t.sp_->eos_id() < 0) fail(name + ": the SentencePiece model has no end-of-sentence piece </s>");
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const { return encode_clean(clean_text(text)); }

std::vector<int32_t> Tokenizer::encode_clean(std::string_view text) const {
  std::vector<int32_t> out;
  std::vector<int> ids;
  while (!text.empty()) {
    const size_t line_end = text.find('\n');
    const size_t n = line_end == std::string_view::npos ? text.size() : line_end + 1;
    for (std::string_view piece : split_for_encoding(text.substr(0, n), kEncodeChunkBytes)) {
      const auto status = sp_->Encode(absl::string_view(piece.data(), piece.size()), &ids);
      if (!status.ok()) fail(path_ + ": encoding failed: " + status.message());
      out.insert(out.end(), ids.begin(), ids.end());
    }
    text.remove_prefix(n);
  }
  return out;
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(const std::vector<std::string_view>& texts, int threads) const {
  std::vector<std::vector<int32_t>> out(texts.size());
  std::string error;
#pragma omp parallel for schedule(dynamic, 1) num_threads(thread_count(threads))
  for (int64_t i = 0; i < int64_t(texts.size()); ++i) {
    try {
      out[i] = encode_clean(texts[i]);
    } catch (const Error& e) {
#pragma omp critical
      error = e.what();
    }
  }
  if (!error.empty()) fail(error);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<int> v(ids.begin(), ids.end());
  for (int id : v)
    if (id < 0 || id >= sp_->GetPieceSize())
      fail(path_ + ": token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(vocab_size()));
  std::string text;
  const auto status = sp_->Decode(v, &text);
  if (!status.ok()) fail(path_ + ": decoding failed: " + status.message());
  return text;
}

int32_t Tokenizer::piece_to_id(std::string_view piece) const {
  const int id = sp_->PieceToId(absl::string_view(piece.data(), piece.size()));
  return sp_->IdToPiece(id) == piece ? id : -1;
}

std::string Tokenizer::id_to_piece(int32_t id) const {
  if (id < 0 || id >= sp_->GetPieceSize())
    fail(path_ + ": token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(vocab_size()));
  return sp_->IdToPiece(id);
}

int32_t Tokenizer::eos_id() const { return sp_->eos_id(); }
bool Tokenizer::is_control(int32_t id) const { return sp_->IsControl(id); }
// Debian's SentencePiece (0.1.97) has no IsUserDefined: a user-defined piece
// is the one kind of ordinary-looking piece that a unigram model scores 0
// (the others hold log-probabilities, below 0).
bool Tokenizer::is_user_defined(int32_t id) const { return !is_special(id) && sp_->GetScore(id) == 0.0f; }
bool Tokenizer::is_special(int32_t id) const {
  return sp_->IsControl(id) || sp_->IsUnknown(id) || sp_->IsByte(id) || sp_->IsUnused(id);
}
uint32_t Tokenizer::vocab_size() const { return uint32_t(sp_->GetPieceSize()); }

size_t printable_length(const std::string& decoded, bool at_end) {
  static const std::string kReplacement = "\xEF\xBF\xBD";
  size_t n = decoded.size();
  while (!at_end && n >= kReplacement.size() &&
         decoded.compare(n - kReplacement.size(), kReplacement.size(), kReplacement) == 0)
    n -= kReplacement.size();
  return n;
}

// Text decoded from a point where it was complete, after the tokens before
// it, is the whole text's continuation there: byte pieces only join the bytes
// of one unfinished character, and the tokens before take whatever a dummy
// prefix strips (SentencePiece strips the space of leading pieces until one
// gives text, so they reach back to one that does). Where that ever fails
// (their text is not a prefix), the window falls back to the whole
// sequence, of which everything returned is a prefix.
std::string TextStream::window_text() {
  if (window_ > 0) {
    size_t from = window_ - 1;
    std::string head = tokenizer_.decode({ids_.begin() + long(from), ids_.begin() + long(window_)});
    while (head.empty() && from > 0 && window_ - from < 16)
      head = tokenizer_.decode({ids_.begin() + long(--from), ids_.begin() + long(window_)});
    if (!head.empty()) {
      const std::string text = tokenizer_.decode({ids_.begin() + long(from), ids_.end()});
      if (text.compare(0, head.size(), head) == 0) return text.substr(head.size());
    }
    window_ = 0;
    returned_ += returned_before_;
    returned_before_ = 0;
  }
  return tokenizer_.decode(ids_);
}

std::string TextStream::push(int32_t id) {
  ids_.push_back(id);
  const std::string text = window_text();
  const size_t printable = printable_length(text, false);
  std::string added = printable > returned_ ? text.substr(returned_, printable - returned_) : std::string();
  returned_ = std::max(returned_, printable);
  if (printable == text.size()) {  // complete: the next window starts after this token
    window_ = ids_.size();
    returned_before_ += returned_;
    returned_ = 0;
  }
  return added;
}

std::string TextStream::finish() {
  const std::string text = window_ < ids_.size() ? window_text() : std::string();
  return text.size() > returned_ ? text.substr(returned_) : std::string();
}

}  // namespace ctrl
