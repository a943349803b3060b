// The safetensors format (8-byte little-endian header length, a JSON header
// mapping names to {dtype, shape, data_offsets} plus optional "__metadata__"
// of string values, then the raw little-endian data). ctrl uses it for Hugging
// Face export/import, checkpoints and test fixtures, so there is one reader.
#pragma once
#include <cstdint>
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
  // CRC-32 of the whole data section (all tensors' bytes in file order).
  uint32_t data_crc32() const;

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
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  void write(const std::string& path) const;
  // CRC-32 of the data section write() will produce, e.g. to store in metadata.
  uint32_t data_crc32() const;

 private:
  struct Entry { std::string name; DType dtype; std::vector<int64_t> shape; const void* data; size_t nbytes; };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Conversions between float and 16-bit floats (round to nearest even).
float bf16_to_float(uint16_t h);
uint16_t float_to_bf16(float f);
float f16_to_float(uint16_t h);
uint16_t float_to_f16(float f);

}  // namespace ctrl
