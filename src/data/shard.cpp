#include "data/shard.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace ctrl {

namespace {

struct ShardHeader {
  char magic[8];
  uint32_t version, token_bytes, vocab_size, crc32;
  uint64_t n_tokens, n_documents;
  uint8_t pad[24];
};
static_assert(sizeof(ShardHeader) == 64);

}  // namespace

ShardFileWriter::ShardFileWriter(std::string path, uint32_t vocab_size)
    : path_(std::move(path)), vocab_size_(vocab_size), token_bytes_(vocab_size <= 65536 ? 2 : 4) {
  tmp_ = path_ + ".tmp." + std::to_string(getpid());
  file_ = std::fopen(tmp_.c_str(), "wb");
  if (!file_) fail(path_ + ": cannot create temporary file " + tmp_ + ": " + std::strerror(errno));
  const ShardHeader placeholder{};  // the real one, with counts and checksum, is written by finish()
  if (std::fwrite(&placeholder, sizeof placeholder, 1, file_) != 1) fail_write(path_);
}

ShardFileWriter::~ShardFileWriter() {
  if (!file_) return;
  std::fclose(file_);
  std::remove(tmp_.c_str());
}

void ShardFileWriter::append(const uint32_t* tokens, size_t n) {
  bytes_.resize(n * token_bytes_);
  for (size_t i = 0; i < n; ++i) {
    if (tokens[i] >= vocab_size_)
      fail(path_ + ": token " + std::to_string(tokens[i]) + " at " + std::to_string(n_tokens_ + i) +
           " is outside the vocabulary of " + std::to_string(vocab_size_));
    if (token_bytes_ == 2) {
      const uint16_t t = uint16_t(tokens[i]);
      std::memcpy(&bytes_[2 * i], &t, 2);
    } else {
      std::memcpy(&bytes_[4 * i], &tokens[i], 4);
    }
  }
  if (n > 0 && std::fwrite(bytes_.data(), 1, bytes_.size(), file_) != bytes_.size()) fail_write(path_);
  crc_ = crc32_of(bytes_.data(), bytes_.size(), crc_);
  n_tokens_ += n;
}

void ShardFileWriter::finish(uint64_t n_documents) {
  ShardHeader h{};
  std::memcpy(h.magic, kShardMagic, 8);
  h.version = kShardVersion;
  h.token_bytes = token_bytes_;
  h.vocab_size = vocab_size_;
  h.crc32 = crc_;
  h.n_tokens = n_tokens_;
  h.n_documents = n_documents;
  if (std::fseek(file_, 0, SEEK_SET) != 0 || std::fwrite(&h, sizeof h, 1, file_) != 1) fail_write(path_);
  std::FILE* f = file_;
  file_ = nullptr;  // committed or removed below, never again by the destructor
  commit_temporary(f, tmp_, path_);
}

void write_shard(const std::string& path, const std::vector<uint32_t>& tokens, uint64_t n_documents,
                 uint32_t vocab_size) {
  ShardFileWriter w(path, vocab_size);
  w.append(tokens.data(), tokens.size());
  w.finish(n_documents);
}

Shard::Shard(const std::string& path, uint32_t expected_vocab_size) : file_(path) {
  if (file_.size() < sizeof(ShardHeader))
    fail(path + ": not a token shard: " + std::to_string(file_.size()) + " bytes, expected a 64-byte header");
  ShardHeader h;
  std::memcpy(&h, file_.data(), sizeof h);
  if (std::memcmp(h.magic, kShardMagic, 8) != 0) fail(path + ": not a token shard: bad magic, expected CTRLTOK1");
  if (h.version != kShardVersion)
    fail(path + ": shard version " + std::to_string(h.version) + ", expected " + std::to_string(kShardVersion));
  if (h.token_bytes != 2 && h.token_bytes != 4)
    fail(path + ": shard token width " + std::to_string(h.token_bytes) + ", expected 2 or 4");
  if (h.vocab_size != expected_vocab_size)
    fail(path + ": shard vocabulary " + std::to_string(h.vocab_size) + " differs from the manifest's " +
         std::to_string(expected_vocab_size));
  // Compared by division, so a huge n_tokens cannot overflow the byte count and pass.
  const uint64_t body = file_.size() - sizeof h;
  if (body % h.token_bytes != 0 || h.n_tokens != body / h.token_bytes)
    fail(path + ": truncated or oversized shard: " + std::to_string(file_.size()) + " bytes, header promises " +
         std::to_string(h.n_tokens) + " tokens of " + std::to_string(h.token_bytes) + " bytes after the 64-byte header");
  if (h.n_documents > h.n_tokens)
    fail(path + ": header claims " + std::to_string(h.n_documents) + " documents in " + std::to_string(h.n_tokens) +
         " tokens; expected at most one document per token");
  tokens_ = file_.data() + sizeof h;
  if (crc32_of(tokens_, body) != h.crc32) fail(path + ": shard checksum mismatch (corrupt file)");
  token_bytes_ = h.token_bytes;
  n_tokens_ = h.n_tokens;
  n_documents_ = h.n_documents;
  crc32_ = h.crc32;
  // Every id must index the embedding: one pass, once, so training and evaluation never check again.
  for (uint64_t i = 0; i < n_tokens_; ++i)
    if (at(i) >= h.vocab_size)
      fail(path + ": token id " + std::to_string(at(i)) + " at byte offset " +
           std::to_string(sizeof h + i * h.token_bytes) + " (token " + std::to_string(i) +
           ") is outside the vocabulary of " + std::to_string(h.vocab_size));
}

uint32_t Shard::at(uint64_t i) const {
  if (token_bytes_ == 2) {
    uint16_t t;
    std::memcpy(&t, tokens_ + 2 * i, 2);
    return t;
  }
  uint32_t t;
  std::memcpy(&t, tokens_ + 4 * i, 4);
  return t;
}

void Shard::copy(uint64_t offset, uint64_t n, int32_t* out) const {
  CTRL_ASSERT(offset + n <= n_tokens_);
  for (uint64_t i = 0; i < n; ++i) out[i] = int32_t(at(offset + i));
}

void TokenStream::add(std::shared_ptr<Shard> shard) {
  starts_.push_back(total_);
  total_ += shard->size();
  shards_.push_back(std::move(shard));
}

uint64_t TokenStream::documents() const {
  uint64_t n = 0;
  for (const auto& s : shards_) n += s->documents();
  return n;
}

std::string TokenStream::digest() const {
  std::string d;
  for (const auto& s : shards_) d += std::to_string(s->crc32()) + ":" + std::to_string(s->size()) + " ";
  return d;
}

void TokenStream::copy(uint64_t offset, uint64_t n, int32_t* out) const {
  CTRL_ASSERT(offset + n <= total_);
  size_t s = 0;
  while (s + 1 < starts_.size() && starts_[s + 1] <= offset) ++s;
  while (n > 0) {
    const uint64_t local = offset - starts_[s];
    const uint64_t take = std::min(n, shards_[s]->size() - local);
    shards_[s]->copy(local, take, out);
    out += take;
    offset += take;
    n -= take;
    ++s;
  }
}

void Manifest::write(const std::string& dir) const {
  nlohmann::ordered_json j;
  j["format"] = "ctrl-shards";
  j["version"] = kShardVersion;
  j["vocab_size"] = vocab_size;
  j["eos_id"] = eos_id;
  j["tokenizer"] = {{"file", tokenizer_file}, {"crc32", tokenizer_crc32}};
  j["split"] = {{"valid_fraction", valid_fraction}, {"seed", split_seed}};
  j["codes"] = nlohmann::json::array();
  for (const auto& c : codes)
    j["codes"].push_back({{"name", c.name},
                          {"token_id", c.token_id},
                          {"documents", {{"train", c.documents_train}, {"valid", c.documents_valid}}},
                          {"shards", {{"train", c.shards_train}, {"valid", c.shards_valid}}}});
  j["sources"] = nlohmann::json::parse(sources_json);
  write_file_atomically(dir + "/manifest.json", j.dump(2) + "\n");
}

Manifest Manifest::read(const std::string& dir) {
  const std::string path = dir + "/manifest.json";
  if (!file_exists(path)) fail(path + ": no manifest; expected a directory written by `ctrl prepare`");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail(path + ": not valid JSON: " + e.what());
  }
  Manifest m;
  std::string field;  // the field being read, for the message when it is missing or malformed
  // j[key] (or j[key][sub]) under the name `name`, which the error names.
  auto at = [&](const nlohmann::json& o, const std::string& name, const char* key,
                const char* sub = nullptr) -> const nlohmann::json& {
    field = name;
    return sub ? o.at(key).at(sub) : o.at(key);
  };
  try {
    if (at(j, "format", "format") != "ctrl-shards") fail(path + ": format is not ctrl-shards");
    if (at(j, "version", "version").get<uint32_t>() != kShardVersion)
      fail(path + ": manifest version " + j.at("version").dump() + ", expected " + std::to_string(kShardVersion));
    m.vocab_size = at(j, "vocab_size", "vocab_size").get<uint32_t>();
    m.eos_id = at(j, "eos_id", "eos_id").get<int32_t>();
    m.tokenizer_file = at(j, "tokenizer.file", "tokenizer", "file").get<std::string>();
    m.tokenizer_crc32 = at(j, "tokenizer.crc32", "tokenizer", "crc32").get<uint32_t>();
    m.valid_fraction = at(j, "split.valid_fraction", "split", "valid_fraction").get<double>();
    m.split_seed = at(j, "split.seed", "split", "seed").get<uint64_t>();
    for (const auto& c : at(j, "codes", "codes")) {
      const std::string code_field = "codes[" + std::to_string(m.codes.size()) + "].";
      ControlCode code;
      code.name = at(c, code_field + "name", "name").get<std::string>();
      code.token_id = at(c, code_field + "token_id", "token_id").get<int32_t>();
      code.documents_train = at(c, code_field + "documents.train", "documents", "train").get<uint64_t>();
      code.documents_valid = at(c, code_field + "documents.valid", "documents", "valid").get<uint64_t>();
      code.shards_train = at(c, code_field + "shards.train", "shards", "train").get<std::vector<std::string>>();
      code.shards_valid = at(c, code_field + "shards.valid", "shards", "valid").get<std::vector<std::string>>();
      m.codes.push_back(std::move(code));
    }
    if (j.contains("sources")) m.sources_json = j["sources"].dump();
  } catch (const nlohmann::json::exception& e) {
    std::string why = e.what();  // "[json.exception.type_error.302] type must be number, but is string"
    if (const size_t bracket = why.find("] "); why.rfind("[json.exception", 0) == 0 && bracket != std::string::npos)
      why.erase(0, bracket + 2);
    fail(path + ": field " + field + " is missing or malformed (" + why + ")");
  }
  m.check(path);
  return m;
}

void Manifest::check(const std::string& path) const {
  if (vocab_size < 2) fail(path + ": vocab_size " + std::to_string(vocab_size) + ": expected at least 2");
  if (eos_id < 0 || uint32_t(eos_id) >= vocab_size)
    fail(path + ": eos_id " + std::to_string(eos_id) + ": expected a token id in [0, " + std::to_string(vocab_size) + ")");
  if (!(valid_fraction >= 0 && valid_fraction < 1))
    fail(path + ": split.valid_fraction " + std::to_string(valid_fraction) + ": expected a fraction in [0, 1)");
  if (codes.empty()) fail(path + ": codes: expected at least one control code");
  auto shard_name_ok = [](const std::string& s) {
    return !s.empty() && s.find('/') == std::string::npos && s != "." && s != "..";
  };
  if (!tokenizer_file.empty() && !shard_name_ok(tokenizer_file))
    fail(path + ": tokenizer.file '" + tokenizer_file + "': expected a file name in the corpus directory");
  for (size_t i = 0; i < codes.size(); ++i) {
    const ControlCode& c = codes[i];
    const std::string where = path + ": codes[" + std::to_string(i) + "] '" + c.name + "'";
    if (c.name.empty()) fail(where + ": expected a non-empty name");
    if (c.token_id < 0 || uint32_t(c.token_id) >= vocab_size)
      fail(where + ": token_id " + std::to_string(c.token_id) + ": expected a token id in [0, " +
           std::to_string(vocab_size) + ")");
    if (c.token_id == eos_id)
      fail(where + ": token_id " + std::to_string(c.token_id) + " is the eos id; expected a token of its own");
    for (size_t k = 0; k < i; ++k) {
      if (codes[k].name == c.name) fail(where + ": name given twice; expected distinct control codes");
      if (codes[k].token_id == c.token_id)
        fail(where + ": token_id " + std::to_string(c.token_id) + " is also '" + codes[k].name +
             "''s; expected one token per code");
    }
    if (c.shards_train.empty() && c.shards_valid.empty()) fail(where + ": lists no shards");
    if (c.shards_valid.empty() != (c.documents_valid == 0))
      fail(where + ": documents.valid " + std::to_string(c.documents_valid) + " but " +
           std::to_string(c.shards_valid.size()) + " valid shards; expected both zero or both non-zero");
    if (c.shards_train.empty() != (c.documents_train == 0))
      fail(where + ": documents.train " + std::to_string(c.documents_train) + " but " +
           std::to_string(c.shards_train.size()) + " train shards; expected both zero or both non-zero");
    for (const auto* list : {&c.shards_train, &c.shards_valid})
      for (const auto& s : *list)
        if (!shard_name_ok(s)) fail(where + ": shard '" + s + "': expected a file name in the corpus directory");
  }
}

Dataset Dataset::open(const std::string& dir) {
  Dataset d;
  d.dir_ = dir;
  d.manifest_ = Manifest::read(dir);
  const auto& m = d.manifest_;
  const std::string manifest_path = dir + "/manifest.json";
  if (!m.tokenizer_file.empty()) {
    const std::string tok = dir + "/" + m.tokenizer_file;
    const std::string bytes = read_file(tok);
    if (crc32_of(bytes.data(), bytes.size()) != m.tokenizer_crc32)
      fail(tok + ": tokenizer checksum differs from the manifest's (replaced or corrupt)");
    check_manifest_against_tokenizer(m, Tokenizer::load(tok), manifest_path);
  }
  for (const auto& c : m.codes) {
    TokenStream train, valid;
    for (const auto& s : c.shards_train) train.add(std::make_shared<Shard>(dir + "/" + s, m.vocab_size));
    for (const auto& s : c.shards_valid) valid.add(std::make_shared<Shard>(dir + "/" + s, m.vocab_size));
    // The shards' headers count the documents too: a manifest that disagrees was edited or mixed up.
    for (const auto& [split, stream, expected] :
         {std::tuple{"train", &train, c.documents_train}, std::tuple{"valid", &valid, c.documents_valid}})
      if (stream->documents() != expected)
        fail(manifest_path + ": code '" + c.name + "' documents." + split + " " + std::to_string(expected) +
             " but its " + split + " shards hold " + std::to_string(stream->documents()));
    d.train_.push_back(std::move(train));
    d.valid_.push_back(std::move(valid));
  }
  return d;
}

void check_manifest_against_tokenizer(const Manifest& m, const Tokenizer& tokenizer, const std::string& where) {
  if (tokenizer.vocab_size() != m.vocab_size)
    fail(where + ": vocab_size " + std::to_string(m.vocab_size) + " but the tokenizer " + tokenizer.path() + " has " +
         std::to_string(tokenizer.vocab_size()) + " pieces");
  if (tokenizer.eos_id() != m.eos_id)
    fail(where + ": eos_id " + std::to_string(m.eos_id) + " but the tokenizer's end-of-document id is " +
         std::to_string(tokenizer.eos_id()));
  for (const auto& c : m.codes) {
    const int32_t id = tokenizer.piece_to_id(c.name);
    if (id < 0)
      fail(where + ": control code '" + c.name + "' is not a piece of the tokenizer " + tokenizer.path() +
           " (renamed?)");
    if (id != c.token_id)
      fail(where + ": control code '" + c.name + "' has token_id " + std::to_string(c.token_id) +
           " but the tokenizer gives it " + std::to_string(id));
  }
}

std::string Dataset::digest() const {
  std::string d = "vocabulary " + std::to_string(manifest_.vocab_size) + ", eos " + std::to_string(manifest_.eos_id) +
                  ", tokenizer crc " + std::to_string(manifest_.tokenizer_crc32);
  for (size_t i = 0; i < n_codes(); ++i)
    d += "; " + code(i).name + " " + std::to_string(code(i).token_id) + " train " + train_[i].digest() + "valid " +
         valid_[i].digest();
  return d;
}

int Dataset::find_code(const std::string& name) const {
  for (size_t i = 0; i < manifest_.codes.size(); ++i)
    if (manifest_.codes[i].name == name) return int(i);
  return -1;
}

std::string Dataset::tokenizer_path() const {
  return manifest_.tokenizer_file.empty() ? "" : dir_ + "/" + manifest_.tokenizer_file;
}

}  // namespace ctrl
