#include "core/safetensors.h"

#include <algorithm>
#include <cmath>
#include <bit>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace ctrl {

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

static std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

SafetensorsReader::SafetensorsReader(const std::string& path) : file_(path) {
  const size_t size = file_.size();
  if (size < 8) fail(path + ": not a safetensors file: " + std::to_string(size) + " bytes, expected at least 8");
  uint64_t header_len;
  std::memcpy(&header_len, file_.data(), 8);
  if (header_len > size - 8 || header_len > (100u << 20))
    fail(path + ": corrupt safetensors header length " + std::to_string(header_len) + " for a file of " +
         std::to_string(size) + " bytes");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(file_.data() + 8, file_.data() + 8 + header_len);
  } catch (const std::exception& e) {
    fail(path + ": safetensors header is not valid JSON: " + e.what());
  }
  if (!header.is_object()) fail(path + ": safetensors header: expected a JSON object");
  data_begin_ = 8 + header_len;
  const uint8_t* base = file_.data() + data_begin_;
  const size_t data_size = size - 8 - header_len;
  std::vector<std::pair<size_t, size_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) fail(path + ": __metadata__: expected an object of strings");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string()) fail(path + ": __metadata__." + m.key() + ": expected a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = path + ": tensor '" + it.key() + "'";
    const auto& v = it.value();
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      fail(where + ": expected {dtype, shape, data_offsets}");
    TensorInfo info;
    if (!v["dtype"].is_string() || !parse_dtype(v["dtype"].get<std::string>(), &info.dtype))
      fail(where + ": unsupported dtype " + v["dtype"].dump());
    if (!v["shape"].is_array()) fail(where + ": bad shape " + v["shape"].dump());
    uint64_t elements = 1;  // bounded by the data bytes, so that a crafted shape cannot wrap numel()
    for (const auto& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) fail(where + ": bad shape " + v["shape"].dump());
      const uint64_t extent = uint64_t(d.get<int64_t>());
      if (extent > 0 && elements > data_size / extent)
        fail(where + ": shape " + v["shape"].dump() + " holds more elements than the file's " +
             std::to_string(data_size) + " data bytes");
      elements *= extent;
      info.shape.push_back(int64_t(extent));
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail(where + ": bad data_offsets " + off.dump());
    const size_t begin = off[0].get<size_t>(), end = off[1].get<size_t>();
    if (begin > end || end > data_size)
      fail(where + ": data_offsets " + off.dump() + " outside the " + std::to_string(data_size) + " data bytes");
    info.nbytes = end - begin;
    if (size_t(info.numel()) * dtype_size(info.dtype) != info.nbytes)
      fail(where + ": " + std::to_string(info.nbytes) + " bytes do not match shape " + shape_str(info.shape) +
           " of " + dtype_name(info.dtype));
    info.data = base + begin;
    ranges.emplace_back(begin, end);
    tensors_[it.key()] = info;
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) fail(path + ": safetensors tensors overlap");
}

const TensorInfo& SafetensorsReader::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail(path() + ": missing tensor '" + name + "'");
  return it->second;
}

std::vector<float> SafetensorsReader::read_floats(const std::string& name,
                                                  const std::vector<int64_t>& expected) const {
  const TensorInfo& t = get(name);
  if (!expected.empty() && t.shape != expected)
    fail(path() + ": tensor '" + name + "' has shape " + shape_str(t.shape) + ", expected " + shape_str(expected));
  const size_t n = size_t(t.numel());
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = t.data + i * dtype_size(t.dtype);
    switch (t.dtype) {
      case DType::F32: std::memcpy(&out[i], p, 4); break;
      case DType::F64: { double d; std::memcpy(&d, p, 8); out[i] = float(d); break; }
      case DType::BF16: { uint16_t h; std::memcpy(&h, p, 2); out[i] = bf16_to_float(h); break; }
      case DType::F16: { uint16_t h; std::memcpy(&h, p, 2); out[i] = f16_to_float(h); break; }
      case DType::I32: { int32_t v; std::memcpy(&v, p, 4); out[i] = float(v); break; }
      case DType::I64: { int64_t v; std::memcpy(&v, p, 8); out[i] = float(v); break; }
      default: fail(path() + ": tensor '" + name + "': cannot read " + dtype_name(t.dtype) + " as float");
    }
  }
  return out;
}

std::vector<int64_t> SafetensorsReader::read_ints(const std::string& name) const {
  const TensorInfo& t = get(name);
  const size_t n = size_t(t.numel());
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = t.data + i * dtype_size(t.dtype);
    switch (t.dtype) {
      case DType::I64: std::memcpy(&out[i], p, 8); break;
      case DType::I32: { int32_t v; std::memcpy(&v, p, 4); out[i] = v; break; }
      case DType::U32: { uint32_t v; std::memcpy(&v, p, 4); out[i] = v; break; }
      case DType::U16: { uint16_t v; std::memcpy(&v, p, 2); out[i] = v; break; }
      case DType::U8: out[i] = *p; break;
      default: fail(path() + ": tensor '" + name + "': expected integers, found " + dtype_name(t.dtype));
    }
  }
  return out;
}

namespace {
struct TableRow {
  const std::string* name;
  DType dtype;
  const std::vector<int64_t>* shape;
  size_t offset, nbytes;
};

uint32_t table_crc(std::vector<TableRow> rows) {
  std::sort(rows.begin(), rows.end(), [](const TableRow& a, const TableRow& b) { return *a.name < *b.name; });
  uint32_t crc = 0;
  auto add = [&crc](const std::string& field) { crc = crc32_of(field.c_str(), field.size() + 1, crc); };  // with NUL
  for (const TableRow& r : rows) {
    add(*r.name);
    add(dtype_name(r.dtype));
    std::string dims;
    for (int64_t d : *r.shape) dims += std::to_string(d) + ",";
    add(dims);
    add(std::to_string(r.offset) + "+" + std::to_string(r.nbytes));
  }
  return crc;
}
}  // namespace

uint32_t SafetensorsReader::tensor_table_crc32() const {
  std::vector<TableRow> rows;
  const uint8_t* base = file_.data() + data_begin_;
  for (const auto& [name, t] : tensors_) rows.push_back({&name, t.dtype, &t.shape, size_t(t.data - base), t.nbytes});
  return table_crc(std::move(rows));
}

uint32_t SafetensorsWriter::tensor_table_crc32() const {
  std::vector<TableRow> rows;
  size_t offset = 0;
  for (const auto& e : entries_) {
    rows.push_back({&e.name, e.dtype, &e.shape, offset, e.nbytes});
    offset += e.nbytes;
  }
  return table_crc(std::move(rows));
}

uint32_t SafetensorsReader::data_crc32() const {
  constexpr size_t kPiece = size_t(64) << 20;
  uint32_t crc = 0;
  for (size_t at = data_begin_; at < file_.size(); at += kPiece) {
    const size_t n = std::min(kPiece, file_.size() - at);
    crc = crc32_of(file_.data() + at, n, crc);
    file_.release(file_.data() + at, n);
  }
  return crc;
}

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  entries_.push_back({name, dtype, std::move(shape), data, size_t(n) * dtype_size(dtype), nullptr});
}

void SafetensorsWriter::add_streamed(const std::string& name, DType dtype, std::vector<int64_t> shape,
                                     std::function<void(const Emit&)> produce) {
  add(name, dtype, std::move(shape), nullptr);
  entries_.back().produce = std::move(produce);
}

// The JSON header with `crc` as the CRC metadata value (when one is asked for).
std::string SafetensorsWriter::header(const std::string& crc) const {
  nlohmann::ordered_json header;
  auto metadata = metadata_;
  if (!crc_key_.empty()) metadata[crc_key_] = crc;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& e : entries_) {
    header[e.name] = {{"dtype", dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.nbytes}}};
    offset += e.nbytes;
  }
  return header.dump();
}

void SafetensorsWriter::write(const std::string& path) const {
  // Room for the longest CRC (10 digits); the real header is padded with
  // spaces to the same length, with the data aligned to 8 bytes.
  std::string h = header("4294967295");
  while ((h.size() + 8) % 8 != 0) h.push_back(' ');
  write_file_atomically(path, [&](std::FILE* f) {
    const uint64_t len = h.size();
    errno = 0;
    bool ok = std::fwrite(&len, 8, 1, f) == 1 && std::fwrite(h.data(), 1, h.size(), f) == h.size();
    uint32_t crc = 0;
    for (const auto& e : entries_) {
      if (!ok) break;
      if (!e.produce) {
        if (e.nbytes) ok = std::fwrite(e.data, 1, e.nbytes, f) == e.nbytes;
        crc = crc32_of(e.data, e.nbytes, crc);
        continue;
      }
      size_t produced = 0;
      e.produce([&](const void* data, size_t nbytes) {
        ok = ok && std::fwrite(data, 1, nbytes, f) == nbytes;
        crc = crc32_of(data, nbytes, crc);
        produced += nbytes;
      });
      CTRL_ASSERT(produced == e.nbytes);
    }
    if (ok && !crc_key_.empty()) {
      std::string final_header = header(std::to_string(crc));
      CTRL_ASSERT(final_header.size() <= h.size());
      final_header.resize(h.size(), ' ');
      ok = std::fseek(f, 8, SEEK_SET) == 0 && std::fwrite(final_header.data(), 1, h.size(), f) == h.size();
    }
    if (!ok) fail_write(path);
  });
}

float bf16_to_float(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return uint16_t((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

// IEEE binary16 by bit manipulation (portable: not every compiler has _Float16).
float f16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  const float magnitude = float(mantissa) * 5.9604644775390625e-8f;  // subnormal: mantissa · 2^-24
  return sign ? -magnitude : magnitude;
}

uint16_t float_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000);
  const uint32_t abs = u & 0x7fffffff;
  if (abs > 0x7f800000) return uint16_t(sign | 0x7e00);  // NaN
  if (abs >= 0x477ff000) return uint16_t(sign | 0x7c00);  // rounds to beyond 65504: inf
  if (abs < 0x38800000) {  // below 2^-14: subnormal half, round to nearest even at 2^-24
    const float scaled = std::bit_cast<float>(abs) * 16777216.0f;
    return uint16_t(sign | uint16_t(std::nearbyint(scaled)));
  }
  uint32_t r = abs - 0x38000000;  // rebias the exponent from 127 to 15 (in place, shifted by 13)
  r += 0xfff + ((r >> 13) & 1);   // round to nearest even
  return uint16_t(sign | (r >> 13));
}

}  // namespace ctrl
