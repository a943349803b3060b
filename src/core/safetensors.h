// The safetensors format (8-byte little-endian header length, a JSON header
// mapping names to {dtype, shape, data_offsets} plus optional "__metadata__"
// of string values, then the raw little-endian data). ctrl uses it for Hugging
// Face export/import, checkpoints and test fixtures, so there is one reader.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/file_io.h"

namespace ctrl {

struct TensorInfo {
  DType dtype;
  std::vector<int64_t> shape;
  const uint8_t* data;  // into the mapped file
  size_t nbytes;
  int64_t numel() const;
};

// Reads and validates a safetensors file: header length and JSON, dtypes,
// that every tensor's byte range matches its shape and lies inside the file,
// and that ranges do not overlap. Errors name the file and the tensor.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);
  const std::string& path() const { return file_.path(); }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorInfo& get(const std::string& name) const;
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Copies a tensor into out, converting F32/BF16/F16/F64/I32/I64 to float.
  // Checks that the shape matches `expected` (if non-empty).
  std::vector<float> read_floats(const std::string& name, const std::vector<int64_t>& expected = {}) const;
  std::vector<int64_t> read_ints(const std::string& name) const;
  // CRC-32 of the whole data section (all tensors' bytes in file order),
  // released (MappedFile::release) piece by piece as it goes.
  uint32_t data_crc32() const;
  // CRC-32 of the tensor table (each tensor's name, dtype, shape and byte
  // range, in name order): equal to the writer's tensor_table_crc32() for an
  // unchanged header, so a checkpoint's metadata can cover its tensor names.
  uint32_t tensor_table_crc32() const;
  // Drops a range of the file's bytes (e.g. a tensor's, once copied) from
  // this process's memory: MappedFile::release.
  void release(const void* p, size_t n) const { file_.release(p, n); }

 private:
  MappedFile file_;
  size_t data_begin_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Collects tensors, then writes them atomically in one file. Data pointers must
// stay valid until write() returns.
class SafetensorsWriter {
 public:
  // Receives a streamed tensor's bytes in order, in one or more calls.
  using Emit = std::function<void(const void* data, size_t nbytes)>;
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data);
  // A tensor whose bytes do not exist whole in memory: write() calls `produce`
  // once, in entry order, and it must pass exactly the tensor's bytes to emit.
  void add_streamed(const std::string& name, DType dtype, std::vector<int64_t> shape,
                    std::function<void(const Emit&)> produce);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  // Stores the CRC-32 of the data section (decimal) under `key` in the
  // metadata, computed while the data is written; the header goes in last.
  void set_crc_metadata(const std::string& key) { crc_key_ = key; }
  // The reader's tensor_table_crc32() of the file write() will produce.
  uint32_t tensor_table_crc32() const;
  void write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    const void* data;
    size_t nbytes;
    std::function<void(const Emit&)> produce;  // set for streamed entries
  };
  std::string header(const std::string& crc) const;
  std::string crc_key_;
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Conversions between float and 16-bit floats (round to nearest even).
float bf16_to_float(uint16_t h);
uint16_t float_to_bf16(float f);
float f16_to_float(uint16_t h);
uint16_t float_to_f16(float f);

}  // namespace ctrl
