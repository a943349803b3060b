#include "data/shard.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"

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

void write_shard(const std::string& path, const std::vector<uint32_t>& tokens, uint64_t n_documents,
                 uint32_t vocab_size) {
  ShardHeader h{};
  std::memcpy(h.magic, kShardMagic, 8);
  h.version = kShardVersion;
  h.token_bytes = vocab_size <= 65536 ? 2 : 4;
  h.vocab_size = vocab_size;
  h.n_tokens = tokens.size();
  h.n_documents = n_documents;
  std::vector<uint8_t> body(tokens.size() * h.token_bytes);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocab_size)
      fail(path + ": token " + std::to_string(tokens[i]) + " at " + std::to_string(i) + " is outside the vocabulary of " +
           std::to_string(vocab_size));
    if (h.token_bytes == 2) {
      const uint16_t t = uint16_t(tokens[i]);
      std::memcpy(&body[2 * i], &t, 2);
    } else {
      std::memcpy(&body[4 * i], &tokens[i], 4);
    }
  }
  h.crc32 = crc32_of(body.data(), body.size());
  write_file_atomically(path, [&](std::FILE* f) {
    if (std::fwrite(&h, sizeof h, 1, f) != 1 ||
        (!body.empty() && std::fwrite(body.data(), 1, body.size(), f) != body.size()))
      fail(path + ": write failed (disk full?)");
  });
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
  if (file_.size() != sizeof h + h.n_tokens * h.token_bytes)
    fail(path + ": truncated or oversized shard: " + std::to_string(file_.size()) + " bytes, header promises " +
         std::to_string(sizeof h + h.n_tokens * h.token_bytes));
  tokens_ = file_.data() + sizeof h;
  if (crc32_of(tokens_, h.n_tokens * h.token_bytes) != h.crc32) fail(path + ": shard checksum mismatch (corrupt file)");
  token_bytes_ = h.token_bytes;
  n_tokens_ = h.n_tokens;
  n_documents_ = h.n_documents;
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
  try {
    if (j.at("format") != "ctrl-shards") fail(path + ": format is not ctrl-shards");
    if (j.at("version").get<uint32_t>() != kShardVersion)
      fail(path + ": manifest version " + j.at("version").dump() + ", expected " + std::to_string(kShardVersion));
    m.vocab_size = j.at("vocab_size").get<uint32_t>();
    m.eos_id = j.at("eos_id").get<int32_t>();
    m.tokenizer_file = j.at("tokenizer").at("file").get<std::string>();
    m.tokenizer_crc32 = j.at("tokenizer").at("crc32").get<uint32_t>();
    m.valid_fraction = j.at("split").at("valid_fraction").get<double>();
    m.split_seed = j.at("split").at("seed").get<uint64_t>();
    for (const auto& c : j.at("codes")) {
      ControlCode code;
      code.name = c.at("name").get<std::string>();
      code.token_id = c.at("token_id").get<int32_t>();
      code.documents_train = c.at("documents").at("train").get<uint64_t>();
      code.documents_valid = c.at("documents").at("valid").get<uint64_t>();
      code.shards_train = c.at("shards").at("train").get<std::vector<std::string>>();
      code.shards_valid = c.at("shards").at("valid").get<std::vector<std::string>>();
      if (code.token_id < 0 || uint32_t(code.token_id) >= m.vocab_size)
        fail(path + ": control code '" + code.name + "' has token id " + std::to_string(code.token_id) +
             " outside the vocabulary");
      m.codes.push_back(std::move(code));
    }
    if (j.contains("sources")) m.sources_json = j["sources"].dump();
  } catch (const nlohmann::json::exception& e) {
    fail(path + ": missing or malformed field: " + e.what());
  }
  if (m.codes.empty()) fail(path + ": no control codes");
  return m;
}

Dataset Dataset::open(const std::string& dir) {
  Dataset d;
  d.dir_ = dir;
  d.manifest_ = Manifest::read(dir);
  const auto& m = d.manifest_;
  if (!m.tokenizer_file.empty()) {
    const std::string tok = dir + "/" + m.tokenizer_file;
    const std::string bytes = read_file(tok);
    if (crc32_of(bytes.data(), bytes.size()) != m.tokenizer_crc32)
      fail(tok + ": tokenizer checksum differs from the manifest's (replaced or corrupt)");
  }
  for (const auto& c : m.codes) {
    TokenStream train, valid;
    for (const auto& s : c.shards_train) train.add(std::make_shared<Shard>(dir + "/" + s, m.vocab_size));
    for (const auto& s : c.shards_valid) valid.add(std::make_shared<Shard>(dir + "/" + s, m.vocab_size));
    d.train_.push_back(std::move(train));
    d.valid_.push_back(std::move(valid));
  }
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
