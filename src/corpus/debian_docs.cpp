// The default corpus from Debian's Japanese documentation packages.
#include "corpus/debian_docs.h"

#include <libxml/HTMLparser.h>
#include <libxml/tree.h>
#include <sys/wait.h>
#include <unicode/uchar.h>
#include <unicode/utf8.h>
#include <zlib.h>

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "core/file_io.h"
#include "core/progress.h"
#include "core/signals.h"

namespace ctrl {

namespace fs = std::filesystem;

const std::vector<DebianPackage>& debian_ja_packages() {
  static const std::vector<DebianPackage> packages = {
      {"manpages-ja", "Manual", true},
      {"manpages-ja-dev", "Manual", true},
      {"debian-reference-ja", "Reference", false},
      {"maint-guide-ja", "Guide", false},
      {"developers-reference-ja", "Guide", false},
      {"aptitude-doc-ja", "Guide", false},
      {"debian-faq-ja", "FAQ", false},
  };
  return packages;
}

std::string default_debian_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/ctrl/debian-ja";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.cache/ctrl/debian-ja";
}

namespace {

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs a shell command, returning its stdout; ok is false on a non-zero exit.
std::string run_command(const std::string& command, bool& ok) {
  std::FILE* pipe;
  {
    const StopSignalsUnblocked interruptible;  // the child (apt-get, dpkg-deb) stops on Ctrl-C as ctrl does
    pipe = popen(command.c_str(), "r");
  }
  if (!pipe) fail("cannot run: " + command);
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int status = pclose(pipe);
  ok = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return out;
}

std::string gunzip_file(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) fail(path + ": cannot open");
  std::string out;
  char buf[65536];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, size_t(n));
  const bool bad = n < 0;
  gzclose(f);
  if (bad) fail(path + ": corrupt gzip data");
  return out;
}

// Fetches and unpacks one package; returns the directory it was unpacked into.
std::string ensure_unpacked(const std::string& cache, const std::string& package) {
  const std::string root = cache + "/root/" + package;
  if (file_exists(root + "/.unpacked")) return root;
  make_directories(cache + "/debs");
  std::string deb;
  auto find_deb = [&] {
    for (const auto& e : fs::directory_iterator(cache + "/debs"))
      if (e.path().filename().string().rfind(package + "_", 0) == 0 && e.path().extension() == ".deb") deb = e.path().string();
  };
  find_deb();
  bool ok = true;
  if (deb.empty()) {
    std::fprintf(stderr, "fetching %s with apt-get download\n", package.c_str());
    const std::string out = run_command("cd " + shell_quote(cache + "/debs") + " && apt-get download " + package + " 2>&1", ok);
    find_deb();
    if (!ok || deb.empty())
      fail(package + ": `apt-get download " + package + "` failed (is the package in your apt sources? run apt-get update): " +
           out.substr(0, out.find('\n')));
  }
  std::error_code ec;
  fs::remove_all(root, ec);
  make_directories(root);
  const std::string out = run_command("dpkg-deb -x " + shell_quote(deb) + " " + shell_quote(root) + " 2>&1", ok);
  if (!ok) fail(deb + ": `dpkg-deb -x` failed: " + out.substr(0, out.find('\n')));
  write_file_atomically(root + "/.unpacked", "");
  return root;
}

std::vector<std::string> files_under(const std::string& root, bool man_pages) {
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    // Symbolic links are alias pages (and aliases of HTML files): their target is read once.
    if (e.is_symlink() || !e.is_regular_file()) continue;
    const std::string p = e.path().string();
    const std::string name = e.path().filename().string();
    if (man_pages) {
      if (p.find("/usr/share/man/") != std::string::npos && name.size() > 3 && name.ends_with(".gz")) files.push_back(p);
    } else if (name.ends_with(".html") && name != "search.html" && name != "genindex.html") {
      files.push_back(p);
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

bool is_block(const char* name) {
  static const char* blocks[] = {"p",  "div", "h1", "h2",    "h3",         "h4",     "h5",      "h6",   "li",
                                 "tr", "br",  "pre", "dt",   "dd",         "table",  "ul",      "ol",   "dl",
                                 "blockquote", "section", "title", "caption", "hr", "article", "header", "figure"};
  for (const char* b : blocks)
    if (std::strcmp(name, b) == 0) return true;
  return false;
}

bool is_skipped(xmlNode* node) {
  static const char* names[] = {"script", "style", "head", "nav", "noscript", "form", "button"};
  const char* name = reinterpret_cast<const char*>(node->name);
  for (const char* n : names)
    if (std::strcmp(name, n) == 0) return true;
  xmlChar* cls = xmlGetProp(node, reinterpret_cast<const xmlChar*>("class"));
  if (!cls) return false;
  const std::string c = reinterpret_cast<const char*>(cls);
  xmlFree(cls);
  for (const char* n : {"navheader", "navfooter", "sphinxsidebar", "related", "footer", "headerlink"})
    if (c.find(n) != std::string::npos) return true;
  return false;
}

void html_text(xmlNode* node, bool in_pre, std::string& out) {
  for (xmlNode* n = node; n; n = n->next) {
    if (n->type == XML_TEXT_NODE || n->type == XML_CDATA_SECTION_NODE) {
      const char* t = reinterpret_cast<const char*>(n->content);
      if (!t) continue;
      if (in_pre) {
        out += t;
      } else {
        for (const char* p = t; *p; ++p) out += (*p == '\n' || *p == '\r') ? ' ' : *p;
      }
    } else if (n->type == XML_ELEMENT_NODE) {
      if (is_skipped(n)) continue;
      const char* name = reinterpret_cast<const char*>(n->name);
      const bool block = is_block(name);
      if (block) out += '\n';
      if (std::strcmp(name, "td") == 0 || std::strcmp(name, "th") == 0) out += '\t';
      html_text(n->children, in_pre || std::strcmp(name, "pre") == 0, out);
      if (block) out += '\n';
    }
  }
}

}  // namespace

std::string render_man_page(const std::string& path, const std::string& origin) {
  // Alias pages (".so man1/other.1") carry no text of their own.
  const std::string source = path.ends_with(".gz") ? gunzip_file(path) : read_file(path);
  size_t first = source.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && source.compare(first, 4, ".so ") == 0 &&
      source.find('\n', first) >= source.find_last_not_of(" \t\r\n"))
    return "";
  // -k -Kutf-8: preconv reads UTF-8 Japanese; -rLL: paragraphs on one line;
  // -rHY=0 -dAD=l: no hyphenation, no justification spaces; -P-cbou: plain text.
  const std::string command = (path.ends_with(".gz") ? "gzip -dc -- " : "cat -- ") + shell_quote(path) +
                              " | groff -k -Kutf-8 -Tutf8 -mandoc -rLL=5000n -rHY=0 -dAD=l -P-c -P-b -P-o -P-u 2>/dev/null";
  bool ok = true;
  std::string text = run_command(command, ok);
  if (!ok) fail(origin + ": groff failed; expected a roff man page (is groff installed?)");
  // Drop the running header (first line) and footer (last line).
  const size_t a = text.find_first_not_of("\n");
  if (a == std::string::npos) return "";
  size_t header_end = text.find('\n', a);
  if (header_end == std::string::npos) return "";
  const size_t z = text.find_last_not_of("\n");
  const size_t footer_start = text.rfind('\n', z);
  if (footer_start == std::string::npos || footer_start <= header_end) return "";
  return text.substr(header_end + 1, footer_start - header_end - 1);
}

std::string render_html(const std::string& html, const std::string& origin) {
  htmlDocPtr doc = htmlReadMemory(html.data(), int(html.size()), origin.c_str(), nullptr,
                                  HTML_PARSE_RECOVER | HTML_PARSE_NOERROR | HTML_PARSE_NOWARNING | HTML_PARSE_NONET);
  if (!doc) fail(origin + ": libxml2 could not parse this HTML");
  std::string out;
  xmlNode* root = xmlDocGetRootElement(doc);
  if (root) html_text(root, false, out);
  xmlFreeDoc(doc);
  return out;
}

double japanese_share(const std::string& text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const int32_t n = int32_t(std::min<size_t>(text.size(), INT32_MAX));
  uint64_t letters = 0, japanese = 0;
  for (int32_t i = 0; i < n;) {
    UChar32 c;
    U8_NEXT(s, i, n, c);
    if (c < 0 || !u_isalpha(c)) continue;
    ++letters;
    japanese += (c >= 0x3040 && c <= 0x30FF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x4E00 && c <= 0x9FFF) ||
                (c >= 0xFF66 && c <= 0xFF9D);
  }
  return letters ? double(japanese) / double(letters) : 0.0;
}

std::vector<PrepareInput> debian_docs_inputs(const std::string& cache_dir, int threads) {
  std::vector<PrepareInput> inputs;
  for (const auto& pkg : debian_ja_packages()) {
    const std::string root = ensure_unpacked(cache_dir, pkg.name);
    inputs.push_back({pkg.control_code, "debian:" + pkg.name, [root, pkg, threads](const DocumentSink& sink) {
                        ReadStats stats;
                        const auto files = files_under(root, pkg.man_pages);
                        if (files.empty()) fail(root + ": no " + std::string(pkg.man_pages ? "man pages" : "HTML files") +
                                                " in package " + pkg.name);
                        std::vector<std::string> texts(files.size());
                        std::vector<std::string> errors(files.size());
                        Progress progress("rendering " + pkg.name, files.size(), "files");
                        int64_t done = 0;
#pragma omp parallel for schedule(dynamic, 4) num_threads(threads > 0 ? threads : omp_get_max_threads())
                        for (int64_t i = 0; i < int64_t(files.size()); ++i) {
                          try {
                            texts[i] = pkg.man_pages ? render_man_page(files[i], files[i]) : render_html(read_file(files[i]), files[i]);
                          } catch (const Error& e) {
                            errors[i] = e.what();
                          }
#pragma omp critical
                          progress.update(uint64_t(++done));
                        }
                        progress.finish();
                        for (size_t i = 0; i < files.size(); ++i) {
                          stats.bytes_in += texts[i].size();
                          if (!errors[i].empty()) {
                            if (stats.warnings++ < 5) std::fprintf(stderr, "ctrl: warning: %s\n", errors[i].c_str());
                            stats.drop("unreadable");
                          } else if (pkg.man_pages && texts[i].empty()) {
                            stats.drop("alias page");
                          } else if (japanese_share(texts[i]) < 0.1) {
                            stats.drop("not Japanese");
                          } else {
                            ++stats.documents;
                            Document doc;
                            doc.control_code = pkg.control_code;
                            doc.title = fs::path(files[i]).filename().string();
                            doc.text = std::move(texts[i]);
                            doc.origin = files[i];
                            sink(std::move(doc));
                          }
                        }
                        return stats;
                      }});
  }
  return inputs;
}

}  // namespace ctrl
