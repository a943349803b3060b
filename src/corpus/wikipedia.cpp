#include "corpus/wikipedia.h"

#include <expat.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/error.h"
#include "corpus/wikitext.h"

namespace ctrl {
namespace {

struct Page {
  uint64_t index = 0;
  std::string title, ns, text;
  bool redirect = false;
  bool ns_given = false;  // exports before schema 0.4 have no <ns>
};

// The converted page: a document, or the reason it was dropped.
struct Result {
  std::optional<Document> document;
  const char* dropped = nullptr;
};

Result convert_page(Page& page, const std::string& file, const WikitextOptions& options) {
  Result r;
  if (page.ns != "0") r.dropped = "namespace";
  else if (page.redirect || is_redirect_wikitext(page.text)) r.dropped = "redirect";
  else if (is_disambiguation_wikitext(page.text)) r.dropped = "disambiguation";
  if (r.dropped) return r;
  Document d;
  d.title = page.title;
  d.text = wikitext_to_text(page.text, options);
  d.origin = file + "#" + page.title;
  if (d.text.empty()) r.dropped = "empty";
  else r.document = std::move(d);
  return r;
}

// Converts pages on worker threads; results leave in page order through emit_ready()/finish(),
// called only from the parser thread. At most `window` pages are in flight, so memory stays bounded.
class PagePipeline {
 public:
  PagePipeline(int threads, const std::string& file, ReadContext& context)
      : file_(file), context_(context), window_(static_cast<size_t>(threads) * 8) {
    options_.drop_trailing_sections = context.options.drop_trailing_sections;
    for (int t = 0; t < (threads > 1 ? threads : 0); ++t) workers_.emplace_back([this] { work(); });
  }
  ~PagePipeline() { stop(); }

  void submit(Page&& page) {
    if (workers_.empty()) {
      deliver(convert_page(page, file_, options_));
      return;
    }
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queue_.push_back(std::move(page));
      results_.emplace_back();
      ready_.push_back(false);
    }
    work_cv_.notify_one();
    drain(window_);
  }

  // Delivers every remaining result in order and stops the workers.
  void finish() {
    drain(0);
    stop();
  }

 private:
  void work() {
    for (;;) {
      Page page;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        page = std::move(queue_.front());
        queue_.pop_front();
      }
      Result r = convert_page(page, file_, options_);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        const size_t k = page.index - first_index_;
        results_[k] = std::move(r);
        ready_[k] = true;
      }
      done_cv_.notify_all();
    }
  }

  // Emits results in order until at most `keep` pages are in flight.
  void drain(size_t keep) {
    for (;;) {
      Result r;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        if (results_.empty()) return;
        if (!ready_.front()) {
          if (results_.size() <= keep) return;
          done_cv_.wait(lock, [&] { return ready_.front(); });
        }
        r = std::move(results_.front());
        results_.pop_front();
        ready_.pop_front();
        ++first_index_;
      }
      deliver(std::move(r));
    }
  }

  void deliver(Result&& r) {
    if (r.document) context_.emit(std::move(*r.document));
    else context_.stats.drop(r.dropped);
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    work_cv_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }

  const std::string& file_;
  ReadContext& context_;
  WikitextOptions options_;
  size_t window_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Page> queue_;
  std::deque<Result> results_;
  std::deque<bool> ready_;
  uint64_t first_index_ = 0;
  bool stopping_ = false;
};

// expat callbacks: collect <title>, <ns>, <redirect>, and the first <text> of each <page>, and the
// names of <siteinfo>'s namespaces other than the main one.
struct ParserState {
  PagePipeline* pipeline;
  Page page;
  bool in_page = false, in_revision = false, revision_seen = false;
  std::string* field = nullptr;  // where character data goes, if anywhere
  uint64_t pages = 0;
  std::string namespace_key, namespace_name;
  std::vector<std::pair<std::string, std::string>> namespaces;  // ("Name:", key), main namespace excluded
};

// A page without <ns> (export schema 0.3 and older) is in the namespace its title's prefix names in
// <siteinfo>; without such a prefix it is an article, as MediaWiki reads the title.
void infer_namespace(const ParserState& st, Page& page) {
  static const std::string kMain = "0";
  const std::string* ns = &kMain;
  for (const auto& [prefix, key] : st.namespaces)
    if (page.title.compare(0, prefix.size(), prefix) == 0) ns = &key;
  page.ns = *ns;
}

void XMLCALL on_start(void* user, const XML_Char* name, const XML_Char** attributes) {
  auto* st = static_cast<ParserState*>(user);
  const std::string_view n(name);
  if (n == "page") {
    st->page = Page();
    st->page.index = st->pages;
    st->in_page = true;
    st->revision_seen = false;
  } else if (!st->in_page) {
    if (n != "namespace") return;
    st->namespace_key.clear();
    st->namespace_name.clear();
    for (const XML_Char** a = attributes; a[0]; a += 2)
      if (std::string_view(a[0]) == "key") st->namespace_key = a[1];
    st->field = &st->namespace_name;
  } else if (n == "title" && !st->in_revision) {
    st->field = &st->page.title;
  } else if (n == "ns" && !st->in_revision) {
    st->page.ns_given = true;
    st->field = &st->page.ns;
  } else if (n == "redirect") {
    st->page.redirect = true;
  } else if (n == "revision") {
    st->in_revision = true;
  } else if (n == "text" && st->in_revision && !st->revision_seen) {
    st->field = &st->page.text;
  }
}

void XMLCALL on_end(void* user, const XML_Char* name) {
  auto* st = static_cast<ParserState*>(user);
  const std::string_view n(name);
  st->field = nullptr;
  if (n == "namespace" && !st->in_page) {
    if (st->namespace_key != "0" && !st->namespace_name.empty())
      st->namespaces.emplace_back(st->namespace_name + ":", st->namespace_key);
  } else if (n == "revision") {
    st->in_revision = false;
    st->revision_seen = true;
  } else if (n == "page" && st->in_page) {
    st->in_page = false;
    ++st->pages;
    if (!st->page.ns_given) infer_namespace(*st, st->page);
    st->pipeline->submit(std::move(st->page));
  }
}

void XMLCALL on_text(void* user, const XML_Char* s, int len) {
  auto* st = static_cast<ParserState*>(user);
  if (st->field) st->field->append(s, static_cast<size_t>(len));
}

}  // namespace

// Whether bytes (perhaps cut short) begin another XML document: a second dump
// part appended with `cat`, which expat calls junk after the first.
bool starts_another_document(std::string_view rest) {
  const size_t first = rest.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return false;
  rest.remove_prefix(first);
  for (std::string_view start : {std::string_view("<?xml"), std::string_view("<mediawiki")})
    if (rest.substr(0, start.size()) == start.substr(0, std::min(start.size(), rest.size()))) return true;
  return false;
}

void read_wikipedia_xml(ByteStream& stream, const std::string& file, ReadContext& context) {
  PagePipeline pipeline(context.threads(), file, context);
  ParserState state;
  state.pipeline = &pipeline;
  XML_Parser parser = nullptr;
  uint64_t parser_start = 0;  // the stream offset where the current document (dump part) began
  auto new_parser = [&] {
    if (parser) XML_ParserFree(parser);
    parser = XML_ParserCreate("UTF-8");
    if (!parser) fail(file + ": cannot create an XML parser");
    XML_SetUserData(parser, &state);
    XML_SetElementHandler(parser, on_start, on_end);
    XML_SetCharacterDataHandler(parser, on_text);
  };
  new_parser();
  std::vector<char> buffer(1 << 20);
  bool xml_error = false;
  try {
    for (;;) {
      const size_t n = stream.read(buffer.data(), buffer.size());
      const bool last = n == 0;
      const uint64_t buffer_start = stream.offset() - n;
      size_t from = 0;  // where in the buffer the current parser starts
      while (XML_Parse(parser, buffer.data() + from, static_cast<int>(n - from), last) != XML_STATUS_OK) {
        const uint64_t at = parser_start + static_cast<uint64_t>(XML_GetCurrentByteIndex(parser));
        const XML_Error code = XML_GetErrorCode(parser);
        const size_t in_buffer = at >= buffer_start ? size_t(at - buffer_start) : n;
        if ((code == XML_ERROR_JUNK_AFTER_DOC_ELEMENT || code == XML_ERROR_MISPLACED_XML_PI) && !state.in_page &&
            in_buffer < n && starts_another_document(std::string_view(buffer.data() + in_buffer, n - in_buffer))) {
          new_parser();  // the next dump part: read on
          parser_start = at;
          from = in_buffer;
          continue;
        }
        std::string what = std::string("XML error: ") + XML_ErrorString(code);
        if (last && (code == XML_ERROR_NO_ELEMENTS || code == XML_ERROR_UNCLOSED_TOKEN))
          what = "XML ends before </mediawiki> (cut-off file?); pages read so far are kept";
        else what += "; pages read before it are kept";
        if (stream.offset() !=
            stream.raw_offset())  // libbz2 finds a damaged block only at its end: the XML breaks first
          what += " (a damaged .bz2 reads as broken XML too: `bzip2 -t " + file + "` checks it)";
        context.warnings.warn(file, at, what);
        xml_error = true;
        if (state.in_page) context.stats.drop("truncated_page");
        break;
      }
      if (last || xml_error) break;
    }
  } catch (...) {
    XML_ParserFree(parser);
    throw;
  }
  XML_ParserFree(parser);
  pipeline.finish();
  context.stats.bytes_in += stream.raw_offset();
  if (state.pages == 0 && xml_error)
    fail(file + ": no MediaWiki <page> could be read (expected a MediaWiki XML export)");
}

}  // namespace ctrl
