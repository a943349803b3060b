#include "core/file_io.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/error.h"

namespace ctrl {

namespace {

std::string temporary_for(const std::string& path) { return path + ".tmp." + std::to_string(getpid()); }

std::FILE* open_temporary(const std::string& tmp, const std::string& path) {
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail(path + ": cannot create temporary file " + tmp + ": " + std::strerror(errno));
  return f;
}

// Flushes, syncs and closes f, the temporary `tmp` of path; on failure removes tmp and throws naming path.
void close_temporary(std::FILE* f, const std::string& tmp, const std::string& path) {
  bool ok = std::fflush(f) == 0 && fsync(fileno(f)) == 0;
  const int saved_errno = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    fail(path + ": write failed: " + std::strerror(saved_errno ? saved_errno : errno));
  }
}

void rename_temporary(const std::string& tmp, const std::string& path) {
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    fail(path + ": cannot rename temporary file into place: " + std::strerror(e));
  }
}

}  // namespace

void write_file_atomically(const std::string& path, const std::function<void(std::FILE*)>& write) {
  const std::string tmp = temporary_for(path);
  std::FILE* f = open_temporary(tmp, path);
  try {
    write(f);
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  commit_temporary(f, tmp, path);
}

void commit_temporary(std::FILE* f, const std::string& tmp, const std::string& path) {
  close_temporary(f, tmp, path);
  rename_temporary(tmp, path);
  fsync_directory(parent_directory(path));
}

void write_files_atomically(const std::vector<std::pair<std::string, std::string>>& files) {
  std::vector<std::string> temporaries;
  try {
    for (const auto& [path, contents] : files) {
      const std::string tmp = temporary_for(path);
      std::FILE* f = open_temporary(tmp, path);
      temporaries.push_back(tmp);
      if (!contents.empty() && std::fwrite(contents.data(), 1, contents.size(), f) != contents.size()) {
        const int e = errno;
        std::fclose(f);
        fail(path + ": write failed: " + std::strerror(e));
      }
      close_temporary(f, tmp, path);
    }
    for (size_t i = 0; i < files.size(); ++i) rename_temporary(temporaries[i], files[i].first);
  } catch (...) {
    for (const std::string& tmp : temporaries) std::remove(tmp.c_str());  // those not renamed yet
    throw;
  }
  for (const auto& [path, contents] : files) fsync_directory(parent_directory(path));
}

void write_file_atomically(const std::string& path, std::string_view contents) {
  write_file_atomically(path, [&](std::FILE* f) {
    if (!contents.empty() && std::fwrite(contents.data(), 1, contents.size(), f) != contents.size())
      fail(path + ": write failed: " + std::strerror(errno));
  });
}

std::string read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail(path + ": cannot open: " + std::strerror(errno));
  std::string out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const bool bad = std::ferror(f);
  const int read_errno = errno;
  std::fclose(f);
  if (bad && read_errno == EISDIR) fail(path + ": is a directory; expected a file");
  if (bad) fail(path + ": read error: " + std::strerror(read_errno));
  return out;
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) throw FileUnreadable(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    close(fd);
    throw FileUnreadable(path + ": cannot stat: " + std::strerror(e));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      close(fd);
      throw FileUnreadable(path + ": cannot map: " + std::strerror(e));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  close(fd);
}

MappedFile::~MappedFile() {
  if (data_) munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::release(const void* p, size_t n) const {
  if (!data_ || n == 0) return;
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) / page * page;
  const uintptr_t end = std::min((reinterpret_cast<uintptr_t>(p) + n + page - 1) / page * page,
                                 reinterpret_cast<uintptr_t>(data_) + (size_ + page - 1) / page * page);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);  // advice: failure is harmless
}

MappedFile::MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_) munmap(const_cast<uint8_t*>(data_), size_);
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

uint32_t crc32_of(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const Bytef*>(data);
  uLong c = crc;
  while (size > 0) {
    const uInt chunk = size > (1u << 30) ? (1u << 30) : static_cast<uInt>(size);
    c = crc32(c, p, chunk);
    p += chunk;
    size -= chunk;
  }
  return static_cast<uint32_t>(c);
}

bool file_exists(const std::string& path) { return std::filesystem::exists(path); }

void make_directories(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) fail(path + ": cannot create directory: " + ec.message());
}

void fsync_directory(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail(dir + ": cannot open the directory to sync it: " + std::strerror(errno));
  // EINVAL: a file system that cannot sync directories (nothing more to do there).
  const bool ok = fsync(fd) == 0 || errno == EINVAL;
  const int e = errno;
  close(fd);
  if (!ok) fail(dir + ": cannot sync the directory: " + std::strerror(e));
}

std::string parent_directory(const std::string& path) {
  const std::filesystem::path p = std::filesystem::path(path).parent_path();
  return p.empty() ? "." : p.string();
}

void install_directory(const std::string& tmp, const std::string& out) {
  std::error_code ec;
  if (std::filesystem::exists(out)) {
    const std::string old = out + ".old-" + std::to_string(getpid());
    std::filesystem::rename(out, old, ec);
    if (ec) fail(out + ": cannot move the previous output aside: " + ec.message());
    std::filesystem::rename(tmp, out, ec);
    if (ec) fail(out + ": cannot rename " + tmp + " into place: " + ec.message());
    std::filesystem::remove_all(old, ec);
  } else {
    std::filesystem::rename(tmp, out, ec);
    if (ec) fail(out + ": cannot rename " + tmp + " into place: " + ec.message());
  }
  fsync_directory(parent_directory(out));
}

bool process_alive(long pid) { return pid > 0 && (kill(pid_t(pid), 0) == 0 || errno == EPERM); }

namespace {

// The pid of a temporary named <stem><marker><digits>, or -1.
long leftover_pid(const std::string& name, const std::string& stem, const std::string& marker) {
  const size_t at = name.rfind(marker);
  if (at == std::string::npos || at == 0 || (!stem.empty() && name.substr(0, at) != stem)) return -1;
  const std::string digits = name.substr(at + marker.size());
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stol(digits);
}

}  // namespace

Leftovers remove_leftovers(const std::string& dir, const std::string& stem, const std::string& marker,
                           bool any_pid) {
  namespace fs = std::filesystem;
  Leftovers out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path path = it->path();
    const long pid = leftover_pid(path.filename().string(), stem, marker);
    if (pid < 0 || pid == long(getpid()) || (!any_pid && process_alive(pid))) continue;
    uintmax_t bytes = 0;
    std::error_code e;
    if (fs::is_directory(fs::symlink_status(path, e))) {
      bool flat = true;
      for (const auto& inner : fs::directory_iterator(path, e)) {
        if (!inner.is_regular_file(e) || inner.is_symlink(e)) flat = false;
        else bytes += inner.file_size(e);
      }
      if (!flat || e) continue;
      fs::remove_all(path, e);
    } else if (fs::is_regular_file(fs::symlink_status(path, e))) {
      bytes = fs::file_size(path, e);
      fs::remove(path, e);
    } else {
      continue;
    }
    if (e) continue;  // could not remove: left as it was
    out.paths.push_back(path.string());
    out.bytes += bytes;
  }
  return out;
}

std::string Leftovers::note() const {
  if (paths.empty()) return "";
  char size[32];
  std::snprintf(size, sizeof size, "%.1f MB", double(bytes) / 1e6);
  std::string line = "note: removed " + std::to_string(paths.size()) + " temporar" +
                     (paths.size() == 1 ? "y" : "ies") + " left by an interrupted run (" + size + "): ";
  for (size_t i = 0; i < paths.size() && i < 3; ++i) line += (i ? ", " : "") + paths[i];
  if (paths.size() > 3) line += ", ...";
  return line;
}

}  // namespace ctrl
