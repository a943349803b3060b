// Files: every file ctrl writes goes to "<path>.tmp.<pid>", is flushed and
// fsync'd, then renamed over <path>, so a reader never sees half a file.
// Every mapped input is checked by its owner (magic, version, sizes, checksum).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace ctrl {

// Calls write(fd-backed FILE*) on a temporary file, then atomically renames it
// to path. On any failure the temporary is removed and ctrl::Error is thrown.
void write_file_atomically(const std::string& path, const std::function<void(std::FILE*)>& write);
void write_file_atomically(const std::string& path, std::string_view contents);

// Whole file into memory; throws ctrl::Error naming the path if unreadable.
std::string read_file(const std::string& path);

// A read-only memory map of a whole file. Empty files map to size 0.
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

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// CRC-32 (zlib's polynomial) of a byte range, continuing from crc.
uint32_t crc32_of(const void* data, size_t size, uint32_t crc = 0);

bool file_exists(const std::string& path);
void make_directories(const std::string& path);

}  // namespace ctrl
