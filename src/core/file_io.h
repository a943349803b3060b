// Files: every file ctrl writes goes to "<path>.tmp.<pid>", is flushed and
// fsync'd, then renamed over <path>, and the directory is fsync'd, so a reader
// never sees half a file and a file reported written survives a power loss.
// Directories of several files (a prepared corpus, a Hugging Face export) are
// built under "<dir>.tmp-<pid>" and renamed into place the same way. What a
// killed writer leaves behind is removed by the next run (remove_leftovers).
// Every mapped input is checked by its owner (magic, version, sizes, checksum).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ctrl {

// Calls write(fd-backed FILE*) on a temporary file, then atomically renames it
// to path. On any failure the temporary is removed and ctrl::Error is thrown.
void write_file_atomically(const std::string& path, const std::function<void(std::FILE*)>& write);
void write_file_atomically(const std::string& path, std::string_view contents);
// Several files replaced together: each is written to its temporary, flushed and synced, and only when
// every one is written are they renamed into place. A failed write (a full disk, a size limit) removes the
// temporaries and throws, leaving every earlier file as it was, so a result and its chart stay a matching
// pair; a rename that fails after another succeeded (the path became a directory) is not undone.
void write_files_atomically(const std::vector<std::pair<std::string, std::string>>& files);
// Flushes, syncs and closes f (the temporary `tmp`, fully written) and renames it to path; on
// any failure removes tmp and throws ctrl::Error naming path and the reason.
void commit_temporary(std::FILE* f, const std::string& tmp, const std::string& path);

// Whole file into memory; throws ctrl::Error naming the path if unreadable.
std::string read_file(const std::string& path);

// A read-only memory map of a whole file. Empty files map to size 0. A file
// that cannot be opened, stat'ed or mapped throws FileUnreadable.
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Drops the pages of [p, p + n) (widened to whole pages) from this
  // process's memory: they stay in the page cache, and reading them again
  // maps them back. A file read once, such as a checkpoint being verified or
  // loaded, then adds to the process's resident memory only the piece in
  // hand, not its whole size: peak RSS and a cgroup's limit see the
  // training's buffers, as the planner counts them.
  void release(const void* p, size_t n) const;

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// CRC-32 (zlib's polynomial) of a byte range, continuing from crc.
uint32_t crc32_of(const void* data, size_t size, uint32_t crc = 0);

bool file_exists(const std::string& path);
void make_directories(const std::string& path);

// fsync(2) of a directory, so the renames and creations in it are durable;
// throws ctrl::Error naming the directory on failure.
void fsync_directory(const std::string& dir);
// The directory holding path ("." for a bare name).
std::string parent_directory(const std::string& path);

// Puts the directory tmp in place of out, then fsyncs out's parent. An out
// that exists (the caller has decided it may be replaced) is renamed aside to
// "<out>.old-<pid>" first and removed after, so out is never half written.
void install_directory(const std::string& tmp, const std::string& out);

// Whether a process with this id exists (kill(pid, 0)).
bool process_alive(long pid);

// What killed writers left in `dir`: entries named <stem><marker><pid>, where
// <stem> equals `stem` (any non-empty name when `stem` is empty) and <pid> is
// digits, not this process, and not a live process unless `any_pid` (the
// caller holds a lock that only a writer of these files takes). Directories
// are removed only if they hold nothing but regular files (as ctrl's
// temporaries do), so nothing else of that name is ever deleted.
struct Leftovers {
  std::vector<std::string> paths;  // removed
  uintmax_t bytes = 0;
  // "" when nothing was removed, else one line "note: removed N ... (X MB): path, ...".
  std::string note() const;
};
Leftovers remove_leftovers(const std::string& dir, const std::string& stem, const std::string& marker,
                           bool any_pid);

}  // namespace ctrl
