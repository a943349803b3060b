// Token shards: the one place where the corpus pipeline's output and the
// trainer's input are defined.
//
// A shard file holds one control code's tokens for one split, documents
// concatenated, each followed by the tokenizer's end-of-document id:
//   64-byte header: magic "CTRLTOK1", u32 version (1), u32 token_bytes (2|4),
//   u32 vocab_size, u32 crc32 of the token bytes, u64 n_tokens, u64 n_documents,
//   then zero padding; then n_tokens little-endian tokens.
// manifest.json in the same directory lists the codes, their token ids and
// shards, the tokenizer file and its checksum, counts and the split.
// Every file is written atomically; reading checks magic, version, sizes,
// vocabulary bounds of the header and the checksum before use.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/file_io.h"

namespace ctrl {

constexpr char kShardMagic[8] = {'C', 'T', 'R', 'L', 'T', 'O', 'K', '1'};
constexpr uint32_t kShardVersion = 1;

// Writes one shard as its tokens come, holding none of them: the header (counts
// and checksum) is written last, and the file appears at `path` only when
// finish() succeeds; an unfinished one's temporary is removed when the writer
// goes. An id outside the vocabulary is an error naming the file.
class ShardFileWriter {
 public:
  ShardFileWriter(std::string path, uint32_t vocab_size);
  ~ShardFileWriter();
  ShardFileWriter(const ShardFileWriter&) = delete;
  ShardFileWriter& operator=(const ShardFileWriter&) = delete;
  void append(const uint32_t* tokens, size_t n);
  uint64_t tokens() const { return n_tokens_; }
  void finish(uint64_t n_documents);

 private:
  std::string path_, tmp_;
  std::FILE* file_ = nullptr;
  uint32_t vocab_size_, token_bytes_, crc_ = 0;
  uint64_t n_tokens_ = 0;
  std::vector<uint8_t> bytes_;  // one append's tokens at their width
};

// Writes one shard file from tokens in memory.
void write_shard(const std::string& path, const std::vector<uint32_t>& tokens, uint64_t n_documents,
                 uint32_t vocab_size);

// A validated, memory-mapped shard.
class Shard {
 public:
  explicit Shard(const std::string& path, uint32_t expected_vocab_size);
  uint64_t size() const { return n_tokens_; }
  uint64_t documents() const { return n_documents_; }
  uint32_t crc32() const { return crc32_; }  // of the token bytes, verified on opening
  uint32_t at(uint64_t i) const;
  void copy(uint64_t offset, uint64_t n, int32_t* out) const;

 private:
  MappedFile file_;
  const uint8_t* tokens_ = nullptr;
  uint32_t token_bytes_ = 2;
  uint64_t n_tokens_ = 0, n_documents_ = 0;
  uint32_t crc32_ = 0;
};

// One control code's tokens in one split, across its shards.
class TokenStream {
 public:
  void add(std::shared_ptr<Shard> shard);
  uint64_t size() const { return total_; }
  uint64_t documents() const;
  // Each shard's checksum and size, in order: equal for equal token streams.
  std::string digest() const;
  // Copies tokens [offset, offset + n) into out; the range must lie inside.
  void copy(uint64_t offset, uint64_t n, int32_t* out) const;

 private:
  std::vector<std::shared_ptr<Shard>> shards_;
  std::vector<uint64_t> starts_;
  uint64_t total_ = 0;
};

struct ControlCode {
  std::string name;
  int32_t token_id = -1;
  uint64_t documents_train = 0, documents_valid = 0;
  std::vector<std::string> shards_train, shards_valid;  // file names relative to the directory
};

struct Manifest {
  uint32_t vocab_size = 0;
  int32_t eos_id = -1;
  std::string tokenizer_file;  // relative to the directory; empty for token-only corpora
  uint32_t tokenizer_crc32 = 0;
  double valid_fraction = 0;
  uint64_t split_seed = 0;
  std::vector<ControlCode> codes;
  std::string sources_json = "[]";  // free-form description of the inputs, kept verbatim

  void write(const std::string& dir) const;                // dir/manifest.json, atomically
  static Manifest read(const std::string& dir);            // validates fields (check())
  // Fields against each other: eos and code ids inside the vocabulary and
  // distinct, names distinct, the split fraction in [0, 1), document counts
  // zero exactly when a split has no shards, shard and tokenizer names plain
  // file names (nothing outside the directory).
  // One-line ctrl::Error naming `path` and the field otherwise.
  void check(const std::string& path) const;
};

class Tokenizer;
// The manifest agrees with its tokenizer: vocabulary size, eos id, and each
// control code is the tokenizer's piece of that name with that token id.
void check_manifest_against_tokenizer(const Manifest& m, const Tokenizer& tokenizer, const std::string& where);

// A prepared corpus opened for training or evaluation. open() checks the
// manifest (Manifest::check), the tokenizer against it, every shard (header,
// checksum, every token id below the vocabulary) and the manifest's document
// counts against the shards' headers.
class Dataset {
 public:
  static Dataset open(const std::string& dir);
  const Manifest& manifest() const { return manifest_; }
  const std::string& dir() const { return dir_; }
  size_t n_codes() const { return manifest_.codes.size(); }
  const ControlCode& code(size_t i) const { return manifest_.codes[i]; }
  const TokenStream& train(size_t i) const { return train_[i]; }
  const TokenStream& valid(size_t i) const { return valid_[i]; }
  // Index of the code with this name, or -1.
  int find_code(const std::string& name) const;
  // What training reads, in one line: vocabulary, eos, and each code's name,
  // id and token streams (TokenStream::digest) with the tokenizer's checksum.
  // Ranks compare it: a copy with another split or other shards differs.
  std::string digest() const;
  std::string tokenizer_path() const;  // empty if none

 private:
  std::string dir_;
  Manifest manifest_;
  std::vector<TokenStream> train_, valid_;
};

}  // namespace ctrl
