// The prepare pipeline: read -> clean/filter/split -> spool -> tokenizer -> shards -> manifest.
#include "corpus/prepare.h"

#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "core/clean_text.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/progress.h"
#include "corpus/binary.h"
#include "data/shard.h"
#include "tokenizer/tokenizer.h"

namespace ctrl {

namespace fs = std::filesystem;

namespace {

constexpr size_t kBatchBytes = 16u << 20;  // cleaning / encoding batch
constexpr size_t kBatchDocs = 8192;
constexpr const char* kBinary = "binary";     // drop reason of documents that are binary files' bytes
constexpr const char* kBadCode = "bad control code";  // a JSON line's own code that cannot be a token
constexpr uint64_t kMaxSkipWarnings = 20;             // per source and reason; the rest are only counted

struct DocMeta {
  uint32_t source;
  uint32_t lines;
  uint64_t bytes;
  double score;  // split_score of the cleaned text
  bool valid;
};

// One control code's spooled documents: the cleaned texts in input order on disk
// (records of u32 length + bytes), their metadata in memory.
struct CloseFile {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

struct CodeSpool {
  std::string name, path;
  std::unique_ptr<std::FILE, CloseFile> file;  // open while sources are read; closed on any way out
  std::vector<DocMeta> docs;
  uint64_t bytes = 0;
};

void write_record(CodeSpool& spool, const std::string& text) {
  CTRL_ASSERT(text.size() <= UINT32_MAX);  // the readers bound a document (ReaderOptions::max_document_bytes)
  const uint32_t n = uint32_t(text.size());
  if (std::fwrite(&n, 4, 1, spool.file.get()) != 1 || std::fwrite(text.data(), 1, n, spool.file.get()) != n)
    fail_write(spool.path);
  spool.bytes += n;
}

// Reads the spool's records back in order.
class SpoolReader {
 public:
  explicit SpoolReader(const std::string& path) : path_(path), file_(std::fopen(path.c_str(), "rb")) {
    if (!file_) fail(path + ": cannot reopen the spool file");
  }
  ~SpoolReader() { std::fclose(file_); }
  bool next(std::string& text) {
    uint32_t n;
    if (std::fread(&n, 4, 1, file_) != 1) return false;
    text.resize(n);
    if (std::fread(text.data(), 1, n, file_) != n) fail(path_ + ": truncated spool record");
    return true;
  }

 private:
  std::string path_;
  std::FILE* file_;
};

// A control code must be one piece of the tokenizer, or it cannot open a sequence as one token: a
// control symbol (what ctrl prepare trains), or a user-defined symbol that its text encodes to (older
// ctrl tokenizers).
void check_single_token(const Tokenizer& tokenizer, const std::string& code, const std::string& where) {
  const int32_t id = tokenizer.piece_to_id(code);
  if (id >= 0 && tokenizer.is_control(id) && id != tokenizer.eos_id()) return;
  if (id >= 0 && tokenizer.is_special(id))
    fail(where + ": control code '" + code +
         "' is a special piece of this tokenizer (end of text, unknown or byte); "
         "choose another name");
  if (id < 0 || tokenizer.encode_clean(code) != std::vector<int32_t>{id})
    fail(where + ": control code '" + code + "' is not a single token of this tokenizer (train one with it)");
  if (!tokenizer.is_user_defined(id))
    fail(where + ": control code '" + code +
         "' is an ordinary piece of this tokenizer, which text encodes to: its id would stand for the word inside "
         "documents as well as for the code; train a tokenizer with the code (ctrl prepare without --tokenizer) or "
         "choose a name that is no piece");
}

// Train documents' lines, for the tokenizer trainer.
class SpoolSentences : public SentenceSource {
 public:
  explicit SpoolSentences(const std::vector<CodeSpool>& spools) : spools_(spools) {
    for (const auto& s : spools)
      for (const auto& d : s.docs)
        if (!d.valid) hint_ += d.lines;
  }
  void rewind() override {
    code_ = 0;
    doc_ = 0;
    reader_.reset();
    pos_ = text_.size();
  }
  bool next(std::string& sentence) override {
    while (true) {
      if (pos_ < text_.size()) {
        const size_t end = std::min(text_.find('\n', pos_), text_.size());
        sentence.assign(text_, pos_, end - pos_);
        pos_ = end + 1;
        return true;
      }
      if (!next_document()) return false;
    }
  }
  uint64_t size_hint() const override { return hint_; }

 private:
  bool next_document() {
    while (code_ < spools_.size()) {
      if (!reader_) {
        reader_ = std::make_unique<SpoolReader>(spools_[code_].path);
        doc_ = 0;
      }
      while (reader_->next(text_)) {
        if (spools_[code_].docs[doc_++].valid) continue;
        pos_ = 0;
        return true;
      }
      reader_.reset();
      ++code_;
    }
    return false;
  }
  const std::vector<CodeSpool>& spools_;
  std::unique_ptr<SpoolReader> reader_;
  size_t code_ = 0, doc_ = 0, pos_ = 0;
  std::string text_;
  uint64_t hint_ = 0;
};

// The index keeps stems unique; the code's name keeps them readable. Codes are
// checked NFKC UTF-8 (code_name_problem), so a Japanese name stays as it is and
// only ASCII punctuation such as '/' becomes '_'.
std::string file_stem_for(size_t index, const std::string& code) {
  std::string s;
  for (unsigned char c : code) s += c >= 0x80 || std::isalnum(c) || c == '-' || c == '_' ? char(c) : '_';
  char prefix[32];
  std::snprintf(prefix, sizeof prefix, "%02zu-", index);
  return prefix + s;
}

// What is wrong with a control code's name, or "" when nothing is: it must be
// one token that the tokenizer, the manifest and `--control` can all name.
std::string code_name_problem(const std::string& code) {
  if (code.empty() || code.find_first_of(", \t\r\n") != std::string::npos || clean_text(code) != code ||
      code.find("\u2581") != std::string::npos)
    return "control code '" + code + "': expected a non-empty NFKC name without spaces, commas or U+2581 (▁)";
  const bool byte_piece = code.size() == 6 && code.rfind("<0x", 0) == 0 && code.back() == '>' &&
                          std::isxdigit(static_cast<unsigned char>(code[3])) &&
                          std::isxdigit(static_cast<unsigned char>(code[4]));
  if (code == "<s>" || code == "</s>" || code == "<unk>" || code == "<pad>" || byte_piece)
    return "control code '" + code +
           "' is one of SentencePiece's special pieces (<s>, </s>, <unk>, <pad>, <0xNN>); choose another name";
  return "";
}

// Each split's documents of one code, cut into shards of about shard_tokens,
// streamed to disk as they come (a shard is never held in memory).
struct ShardWriter {
  ShardWriter(std::string dir_, std::string stem_, std::string split_, uint32_t vocab_, uint64_t shard_tokens_)
      : dir(std::move(dir_)), stem(std::move(stem_)), split(std::move(split_)), vocab(vocab_), shard_tokens(shard_tokens_) {}
  std::string dir, stem, split;
  uint32_t vocab;
  uint64_t shard_tokens;
  std::unique_ptr<ShardFileWriter> shard;  // the shard being written, if any
  std::vector<uint32_t> document;
  uint64_t documents = 0, total_tokens = 0;
  std::vector<std::string> files;

  void add(const std::vector<int32_t>& ids, int32_t eos) {
    if (!shard) {
      char name[64];
      std::snprintf(name, sizeof name, ".%s.%04zu.bin", split.c_str(), files.size());
      files.push_back(stem + name);
      shard = std::make_unique<ShardFileWriter>(dir + "/" + files.back(), vocab);
    }
    document.assign(ids.begin(), ids.end());
    document.push_back(uint32_t(eos));
    shard->append(document.data(), document.size());
    total_tokens += document.size();
    ++documents;
    if (shard->tokens() >= shard_tokens) flush();
  }
  void flush() {
    if (!shard) return;
    shard->finish(documents);
    shard.reset();
    documents = 0;
  }
};

// An existing --out is replaced only when nothing in it would be lost: it is
// empty, or it is an earlier prepare output that holds only what prepare
// writes (its manifest, its tokenizer and the shards the manifest names). A
// manifest.json alone proves nothing: other programs write files of that name.
void check_output_replaceable(const std::string& out) {
  if (!fs::exists(out)) return;
  const std::string advice = "; remove it or choose another --out";
  if (!fs::is_directory(out)) fail(out + ": exists and is not a directory" + advice);
  if (fs::is_empty(out)) return;
  if (!fs::exists(out + "/manifest.json"))
    fail(out + ": a directory not written by `ctrl prepare` (it has no manifest.json)" + advice);
  Manifest manifest;
  try {
    manifest = Manifest::read(out);
  } catch (const Error& e) {
    fail(std::string(e.what()) + " (so " + out + " is not an earlier `ctrl prepare` output)" + advice);
  }
  std::set<std::string> written = {"manifest.json", manifest.tokenizer_file};
  for (const ControlCode& code : manifest.codes) {
    written.insert(code.shards_train.begin(), code.shards_train.end());
    written.insert(code.shards_valid.begin(), code.shards_valid.end());
  }
  for (const auto& entry : fs::directory_iterator(out))
    if (!written.count(entry.path().filename().string()))
      fail(out + ": holds " + entry.path().filename().string() +
           ", which `ctrl prepare` did not write; an earlier output is only replaced whole" + advice);
}

// Moves <dir> aside (checked again: it may have changed during the run) and puts tmp in its place.
void install_output(const std::string& tmp, const std::string& out) {
  check_output_replaceable(out);
  install_directory(tmp, out);
}

// Counts by reason: "too short 3, duplicate 2".
std::string reasons(const std::map<std::string, uint64_t>& counts) {
  std::string out;
  for (const auto& [why, n] : counts) out += (out.empty() ? "" : ", ") + why + " " + std::to_string(n);
  return out;
}

// Why a source's documents were dropped, by the reader or by cleaning.
std::string dropped_reasons(const SourceSummary& s) {
  const std::string read = reasons(s.read.dropped), cleaned = reasons(s.clean.dropped);
  return read + (read.empty() || cleaned.empty() ? "" : ", ") + cleaned;
}

PrepareSummary run(const std::vector<PrepareInput>& inputs, const PrepareOptions& options, const std::string& tmp) {
  const auto start = std::chrono::steady_clock::now();
  const int threads = options.threads > 0 ? options.threads : omp_get_max_threads();
  PrepareSummary summary;
  summary.sources.resize(inputs.size());
  std::vector<CodeSpool> spools;
  std::map<std::string, size_t> code_index;
  DocumentFilter filter(CleanOptions{options.min_chars});

  // 1. Read, clean, filter, spool. Cleaning runs in parallel per batch; the
  //    filter (dedup) and the spool see documents in input order.
  for (size_t s = 0; s < inputs.size(); ++s) {
    SourceSummary& src = summary.sources[s];
    src.control_code = inputs[s].control_code;
    src.description = inputs[s].description;
    // By the source's bytes read when it has a size (fraction, rate, ETA), else by documents.
    const bool by_bytes = inputs[s].bytes > 0;
    Progress progress("cleaning " + inputs[s].control_code + "=" + inputs[s].description, inputs[s].bytes,
                      by_bytes ? "B" : "documents");
    uint64_t read_bytes = 0;
    std::vector<Document> batch;
    size_t batch_bytes = 0;
    auto flush = [&] {
      std::vector<std::string> clean(batch.size()), binary(batch.size());
#pragma omp parallel for schedule(dynamic, 16) num_threads(threads)
      for (int64_t i = 0; i < int64_t(batch.size()); ++i) {
        binary[i] = binary_reason(batch[i].text);
        if (binary[i].empty()) clean[i] = clean_text(batch[i].text);
      }
      for (size_t i = 0; i < batch.size(); ++i) {
        if (!binary[i].empty()) {  // a binary file among the text: skipped, counted, and said once per file
          ++src.clean.documents_in;
          if (++src.clean.dropped[kBinary] <= kMaxSkipWarnings)
            print_line("ctrl: warning: " + (batch[i].origin.empty() ? inputs[s].description : batch[i].origin) +
                       ": binary content (" + binary[i] + "); skipped");
          continue;
        }
        const std::string& code = batch[i].control_code.empty() ? inputs[s].control_code : batch[i].control_code;
        if (!batch[i].control_code.empty() && !code_index.count(code)) {  // a document's own code (JSON lines)
          if (const std::string problem = code_name_problem(code); !problem.empty()) {
            ++src.clean.documents_in;
            if (++src.clean.dropped[kBadCode] <= kMaxSkipWarnings)
              print_line("ctrl: warning: " + (batch[i].origin.empty() ? inputs[s].description : batch[i].origin) +
                         ": " + problem + "; document skipped");
            continue;
          }
        }
        if (!filter.accept(clean[i], src.clean)) continue;
        auto [it, added] = code_index.emplace(code, spools.size());
        if (added) {
          CodeSpool spool;
          spool.name = code;
          spool.path = tmp + "/.spool-" + std::to_string(spools.size());
          spool.file.reset(std::fopen(spool.path.c_str(), "wb"));
          if (!spool.file)  // one is open per control code until reading ends
            fail(spool.path + ": cannot create the spool file: " + std::strerror(errno) +
                 (errno == EMFILE ? " (one file is open per control code; raise `ulimit -n`)" : ""));
          spools.push_back(std::move(spool));
        }
        CodeSpool& spool = spools[it->second];
        write_record(spool, clean[i]);
        const uint32_t lines = uint32_t(std::count(clean[i].begin(), clean[i].end(), '\n') + 1);
        const double score = split_score(text_hash(clean[i]), options.seed);
        spool.docs.push_back({uint32_t(s), lines, clean[i].size(), score, score < options.valid_fraction});
      }
      const std::string counts =
          std::to_string(src.clean.documents_in) + " documents, " + std::to_string(src.clean.documents_kept) + " kept";
      if (by_bytes)
        progress.update(std::min(read_bytes, inputs[s].bytes), counts);
      else
        progress.add(batch.size(), std::to_string(src.clean.documents_kept) + " kept");
      batch.clear();
      batch_bytes = 0;
    };
    src.read = inputs[s].read([&](Document&& doc) {
      read_bytes = std::max(read_bytes, doc.read_bytes);
      batch_bytes += doc.text.size();
      batch.push_back(std::move(doc));
      if (batch_bytes >= kBatchBytes || batch.size() >= kBatchDocs) flush();
    });
    flush();
    if (by_bytes) progress.update(inputs[s].bytes);
    progress.finish(by_bytes ? std::to_string(src.clean.documents_in) + " documents, " +
                                   std::to_string(src.clean.documents_kept) + " kept"
                             : std::to_string(src.clean.documents_kept) + " kept");
    if (src.clean.documents_in == 0)
      fail(inputs[s].control_code + "=" + inputs[s].description + ": no documents in this source");
  }
  for (auto& spool : spools)
    if (std::fclose(spool.file.release()) != 0) fail_write(spool.path);
  if (spools.empty()) {
    std::string reasons;
    for (const auto& src : summary.sources)
      reasons += (reasons.empty() ? "" : "; ") + src.control_code + "=" + src.description + ": " + dropped_reasons(src);
    fail("prepare: no documents left after cleaning (" + reasons + ")");
  }
  // A code the user named whose every document was dropped: said, since
  // `--control` will not know it.
  for (const auto& src : summary.sources)
    if (src.clean.documents_kept == 0 && !code_index.count(src.control_code))
      std::fprintf(stderr,
                   "ctrl: warning: %s=%s: every document was dropped (%s); code %s is left out of the corpus and "
                   "its tokenizer\n",
                   src.control_code.c_str(), src.description.c_str(), dropped_reasons(src).c_str(),
                   src.control_code.c_str());

  // 2. Split fix-ups: a code with >= 2 documents keeps at least one on each
  // side; a code's only document trains (held out, the code would have no
  // training text at all).
  for (auto& spool : spools) {
    auto& d = spool.docs;
    if (d.size() == 1) d[0].valid = false;
    if (d.size() < 2) continue;
    const size_t n_valid = std::count_if(d.begin(), d.end(), [](const DocMeta& m) { return m.valid; });
    auto by_score = [](const DocMeta& a, const DocMeta& b) { return a.score < b.score; };
    if (n_valid == 0 && options.valid_fraction > 0) std::min_element(d.begin(), d.end(), by_score)->valid = true;
    if (n_valid == d.size()) std::max_element(d.begin(), d.end(), by_score)->valid = false;
  }

  // 3. Tokenizer: the given one, or one trained on the train documents.
  const std::string model_path = tmp + "/tokenizer.model";
  if (!options.tokenizer.empty()) {
    write_file_atomically(model_path, read_file(options.tokenizer));
  } else {
    SpoolSentences sentences(spools);
    TokenizerTrainOptions t;
    t.vocab_size = options.vocab_size;
    for (const auto& spool : spools) t.control_codes.push_back(spool.name);
    t.sample_sentences = options.sample_sentences;
    t.seed = uint32_t(options.seed);
    train_tokenizer(sentences, t, model_path);
  }
  const Tokenizer tokenizer = Tokenizer::load(model_path);
  const std::string where = options.tokenizer.empty() ? std::string("trained tokenizer") : options.tokenizer;
  for (const auto& spool : spools) check_single_token(tokenizer, spool.name, where);

  // 4. Encode each code's documents in parallel batches and write the shards.
  uint64_t total_bytes = 0;
  for (const auto& spool : spools) total_bytes += spool.bytes;
  Progress progress("encoding", total_bytes, "bytes");
  uint64_t done_bytes = 0;
  Manifest manifest;
  manifest.vocab_size = tokenizer.vocab_size();
  manifest.eos_id = tokenizer.eos_id();
  manifest.tokenizer_file = "tokenizer.model";
  {
    const std::string bytes = read_file(model_path);
    manifest.tokenizer_crc32 = crc32_of(bytes.data(), bytes.size());
  }
  manifest.valid_fraction = options.valid_fraction;
  manifest.split_seed = options.seed;
  for (size_t c = 0; c < spools.size(); ++c) {
    const CodeSpool& spool = spools[c];
    const std::string stem = file_stem_for(c, spool.name);
    ShardWriter train{tmp, stem, "train", manifest.vocab_size, options.shard_tokens};
    ShardWriter valid{tmp, stem, "valid", manifest.vocab_size, options.shard_tokens};
    SpoolReader reader(spool.path);
    size_t doc = 0;
    std::vector<std::string> texts;
    while (doc < spool.docs.size()) {
      texts.clear();
      size_t bytes = 0;
      while (doc + texts.size() < spool.docs.size() && bytes < kBatchBytes && texts.size() < kBatchDocs) {
        texts.emplace_back();
        if (!reader.next(texts.back())) fail(spool.path + ": spool ended early");
        bytes += texts.back().size();
      }
      const auto ids = tokenizer.encode_batch(std::vector<std::string_view>(texts.begin(), texts.end()), threads);
      for (size_t i = 0; i < ids.size(); ++i, ++doc) {
        const DocMeta& m = spool.docs[doc];
        (m.valid ? valid : train).add(ids[i], manifest.eos_id);
        summary.sources[m.source].tokens += ids[i].size() + 1;
      }
      done_bytes += bytes;
      progress.update(done_bytes);
    }
    train.flush();
    valid.flush();
    ControlCode code;
    code.name = spool.name;
    code.token_id = tokenizer.piece_to_id(spool.name);
    for (const auto& m : spool.docs) (m.valid ? code.documents_valid : code.documents_train)++;
    code.shards_train = train.files;
    code.shards_valid = valid.files;
    manifest.codes.push_back(code);
    summary.codes.push_back({code.name, code.token_id, code.documents_train, code.documents_valid, train.total_tokens,
                             valid.total_tokens});
    std::remove(spool.path.c_str());
  }
  progress.finish();

  // 5. The manifest, last: per source what was read, kept, dropped and encoded.
  nlohmann::ordered_json sources = nlohmann::ordered_json::array();
  for (const auto& s : summary.sources) {
    nlohmann::ordered_json dropped = nlohmann::ordered_json::object();
    for (const auto& [why, n] : s.read.dropped) dropped["reader: " + why] = n;
    for (const auto& [why, n] : s.clean.dropped) dropped[why] = n;
    nlohmann::ordered_json notes = nlohmann::ordered_json::object();
    for (const auto& [what, n] : s.read.notes) notes[what] = n;
    sources.push_back({{"control_code", s.control_code},
                       {"path", s.description},
                       {"documents_read", s.clean.documents_in},
                       {"documents_kept", s.clean.documents_kept},
                       {"dropped", dropped},
                       {"reader_warnings", s.read.warnings},
                       {"reader_notes", notes},
                       {"characters_kept", s.clean.chars_kept},
                       {"characters_dropped", s.clean.chars_dropped},
                       {"tokens", s.tokens}});
  }
  manifest.sources_json = sources.dump();
  manifest.write(tmp);
  summary.vocab_size = manifest.vocab_size;
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace

PrepareSummary prepare_corpus(const std::vector<PrepareInput>& inputs, const PrepareOptions& options) {
  if (inputs.empty()) fail("prepare: no sources given");
  // One spool file per control code is open while sources are read: take the hard limit of open
  // files, not the soft one (often 1024), so thousands of per-document codes read.
  if (struct rlimit files; getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  if (options.out_dir.empty()) fail("prepare: --out is required");
  if (!(options.valid_fraction >= 0 && options.valid_fraction < 1))
    fail("prepare: --valid-fraction " + std::to_string(options.valid_fraction) + ": expected 0 <= f < 1");
  if (options.shard_tokens == 0) fail("prepare: shard size must be positive");
  for (const auto& input : inputs)
    if (const std::string problem = code_name_problem(input.control_code); !problem.empty())
      fail("prepare: --source " + input.control_code + "=" + input.description + ": " + problem);
  if (!options.tokenizer.empty()) {  // checked before hours of reading: loads, and each code is one token
    if (!file_exists(options.tokenizer)) fail(options.tokenizer + ": no such tokenizer model (--tokenizer)");
    const Tokenizer given = Tokenizer::load(options.tokenizer);
    for (const auto& input : inputs) check_single_token(given, input.control_code, options.tokenizer);
  }
  std::string out = options.out_dir;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  // What killed prepares left next to out: their "<out>.tmp-<pid>" (with its
  // .spool-* files) and "<out>.old-<pid>", when that pid is no longer alive.
  for (const char* marker : {".tmp-", ".old-"}) {
    const std::string note = remove_leftovers(parent_directory(out), fs::path(out).filename().string(), marker,
                                              false).note();
    if (!note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
  }
  check_output_replaceable(out);  // before hours of reading, and again before the rename
  const std::string tmp = out + ".tmp-" + std::to_string(getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  make_directories(tmp);
  try {
    PrepareSummary summary = run(inputs, options, tmp);
    install_output(tmp, out);
    if (!options.quiet) std::fprintf(stderr, "%s", format_summary(summary).c_str());
    return summary;
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

std::string format_summary(const PrepareSummary& summary) {
  std::string out;
  char line[512];
  out += "sources:\n";
  for (const auto& s : summary.sources) {
    std::snprintf(line, sizeof line, "  %s=%s: %" PRIu64 " documents read, %" PRIu64 " kept, %s characters kept, %s tokens",
                  s.control_code.c_str(), s.description.c_str(), s.clean.documents_in, s.clean.documents_kept,
                  Progress::format_count(double(s.clean.chars_kept)).c_str(), Progress::format_count(double(s.tokens)).c_str());
    out += line;
    // What the reader skipped never became a document, so it is not among those read.
    const std::string skipped = reasons(s.read.dropped), dropped = reasons(s.clean.dropped);
    out += skipped.empty() ? "" : "; skipped by the reader: " + skipped;
    out += dropped.empty() ? "" : "; dropped: " + dropped;
    std::string notes;
    for (const auto& [what, n] : s.read.notes) notes += (notes.empty() ? "" : ", ") + what + " " + std::to_string(n);
    out += (notes.empty() ? "" : "; " + notes) + "\n";
  }
  std::snprintf(line, sizeof line, "codes (vocabulary %u):\n", summary.vocab_size);
  out += line;
  int name_columns = 12;
  for (const auto& c : summary.codes) name_columns = std::max(name_columns, display_columns(c.name));
  for (const auto& c : summary.codes) {
    std::snprintf(line, sizeof line,
                  "  %s id %-5d train %" PRIu64 " documents, %" PRIu64 " tokens; valid %" PRIu64 " documents, %" PRIu64
                  " tokens\n",
                  fit_columns(c.name, name_columns).c_str(), c.token_id, c.documents_train, c.tokens_train,
                  c.documents_valid, c.tokens_valid);
    out += line;
  }
  std::snprintf(line, sizeof line, "prepared in %s\n", Progress::format_duration(summary.seconds).c_str());
  return out + line;
}

}  // namespace ctrl
