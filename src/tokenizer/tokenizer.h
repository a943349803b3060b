// The tokenizer: a SentencePiece unigram model (Debian's libsentencepiece),
// trained once per corpus and used by prepare (encoding shards), the trainer
// (vocabulary size, eos) and the generator (prompts in, text out).
//
// Normalization happens in core/clean_text.h (ICU NFKC); the model is trained
// with normalization_rule_name=identity, add_dummy_prefix=false and
// remove_extra_whitespaces=false, so decode(encode_clean(x)) == x for every
// cleaned text x (byte_fallback covers characters outside the pieces).
// Control codes are control symbols: each is exactly one token, which no text encodes to.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace ctrl {

// Sentences for training, pulled one at a time; rewind() restarts them (training
// may run twice when the vocabulary has to be lowered for a small corpus).
class SentenceSource {
 public:
  virtual ~SentenceSource() = default;
  virtual void rewind() = 0;
  virtual bool next(std::string& sentence) = 0;  // false at the end
  virtual uint64_t size_hint() const { return 0; }  // sentences, 0 if unknown (for the ETA)
};

class VectorSentenceSource : public SentenceSource {
 public:
  explicit VectorSentenceSource(std::vector<std::string> sentences) : sentences_(std::move(sentences)) {}
  void rewind() override { i_ = 0; }
  bool next(std::string& s) override {
    if (i_ >= sentences_.size()) return false;
    s = sentences_[i_++];
    return true;
  }
  uint64_t size_hint() const override { return sentences_.size(); }

 private:
  std::vector<std::string> sentences_;
  size_t i_ = 0;
};

// SentencePiece's memory grows with the length of one encoded string (its
// lattice) at about 70 bytes per input byte; texts are encoded in pieces of at most this.
constexpr size_t kEncodeChunkBytes = size_t(64) << 10;
// Lines longer than this are split for tokenizer training (SentencePiece skips longer sentences).
constexpr size_t kMaxSentenceBytes = 16384;
// SentencePiece's trainer always runs this many threads (its own default): its float sums follow the
// split of the sentences between threads, so a count that followed the machine would change the tokenizer.
constexpr int kTokenizerTrainerThreads = 16;

// Cuts text into consecutive pieces of at most max_bytes each, preferring a cut
// after a newline, then after a sentence end (。．！？.!?), then any UTF-8
// character boundary. Concatenated, the pieces are the text.
std::vector<std::string_view> split_for_encoding(std::string_view text, size_t max_bytes);

// What tokenizer training read: lines fed, long lines split and the pieces they gave.
struct TokenizerTrainStats {
  uint64_t sentences = 0, long_lines = 0, long_line_pieces = 0;
};

struct TokenizerTrainOptions {
  uint32_t vocab_size = 32000;
  std::vector<std::string> control_codes;  // control symbols: one token each, never the encoding of text
  double character_coverage = 0.9995;
  uint64_t sample_sentences = 2000000;  // input_sentence_size: bounds memory on huge corpora
  uint32_t seed = 1;
  // When the corpus is too small for vocab_size: true lowers it to what
  // SentencePiece says fits, with a warning; false fails with one line.
  bool allow_smaller_vocab = true;
};

// Trains a unigram model and writes it atomically to model_path. Shows
// progress while sentences are fed. Returns the vocabulary size trained.
// Deterministic for the same sentences, options and seed.
// Lines longer than kMaxSentenceBytes are split (split_for_encoding) rather than
// cut or skipped, and a line on stderr says how many sentences the trainer saw,
// how many it samples and how many long lines were split.
uint32_t train_tokenizer(SentenceSource& sentences, const TokenizerTrainOptions& options,
                         const std::string& model_path, TokenizerTrainStats* stats = nullptr);

class Tokenizer {
 public:
  // Loads a .model file; throws ctrl::Error naming the path if unreadable or not a model.
  static Tokenizer load(const std::string& path);
  // The same from a model's bytes (e.g. carried in a checkpoint); `name` stands for the path in messages.
  static Tokenizer from_bytes(const std::string& bytes, const std::string& name);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Encodes a user's text: cleaned exactly as the corpus was (core/clean_text.h), then split.
  std::vector<int32_t> encode(std::string_view text) const;
  // Encodes text that is already clean_text()'s output (the corpus path; no second normalization).
  // Each line (with its newline) is encoded on its own: no piece of a ctrl tokenizer holds a
  // newline (it learns from lines), so this is the whole text's best segmentation, without SentencePiece's float path
  // scores drifting over tens of kilobytes (a 60 KB document once took a worse split at its end). A line longer than
  // kEncodeChunkBytes is encoded in pieces cut at sentence ends, else character boundaries
  // (split_for_encoding), so memory stays bounded on a 50 MB line; decode(encode_clean(x)) == x.
  std::vector<int32_t> encode_clean(std::string_view text) const;
  // Encodes many cleaned texts in parallel over `threads` (0: all); result i belongs
  // to texts[i] whatever the thread count.
  std::vector<std::vector<int32_t>> encode_batch(const std::vector<std::string_view>& texts, int threads = 0) const;
  std::string decode(const std::vector<int32_t>& ids) const;

  int32_t piece_to_id(std::string_view piece) const;  // -1 if the piece is not in the vocabulary
  std::string id_to_piece(int32_t id) const;           // throws ctrl::Error if out of range
  int32_t eos_id() const;
  // Whether id is a piece that text never becomes: control (<s>, </s>), unknown, byte or unused.
  bool is_special(int32_t id) const;
  // A control piece (</s>, <s>, a control code): never the encoding of any text.
  bool is_control(int32_t id) const;
  // A user-defined piece: always its own token where its text occurs (older ctrl tokenizers' codes).
  bool is_user_defined(int32_t id) const;
  uint32_t vocab_size() const;
  const std::string& path() const { return path_; }

 private:
  Tokenizer();
  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

// The text of a growing token sequence, streamed: push() returns what each new
// token adds and finish() what was held back, so that all returns together are
// decode() of the whole sequence. A character still being spelled in byte pieces
// (<0xE3><0x81>...) decodes as U+FFFD until its last byte comes and is held
// back until then, so nothing returned is ever taken back. Only the tokens
// since the text was last complete are decoded again (after a token or a few
// before them, whose text is then cut off: a tokenizer with a dummy prefix
// drops the space of whatever piece comes first), so n tokens cost O(n)
// decoding, not the O(n^2) of decoding the whole sequence per token.
class TextStream {
 public:
  explicit TextStream(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  std::string push(int32_t id);
  std::string finish();

 private:
  std::string window_text();  // the text of ids_[window_..], decoded after the tokens before
  const Tokenizer& tokenizer_;
  std::vector<int32_t> ids_;    // every token so far
  size_t window_ = 0;           // first token since the text was last complete
  size_t returned_ = 0;         // bytes of window_text() already returned
  size_t returned_before_ = 0;  // bytes returned for the tokens before the window
};

// How much of a sequence decoded so far may be printed: all but its trailing
// U+FFFD (a character whose byte pieces have not all come); at the end, all.
size_t printable_length(const std::string& decoded, bool at_end);

}  // namespace ctrl
