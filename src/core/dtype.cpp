#include "core/dtype.h"

namespace ctrl {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: case DType::U32: return 4;
    case DType::BF16: case DType::F16: case DType::U16: return 2;
    case DType::I64: case DType::F64: return 8;
    case DType::U8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U16: return "U16";
    case DType::U32: return "U32";
    case DType::F64: return "F64";
    case DType::U8: return "U8";
  }
  return "?";
}

bool parse_dtype(const std::string& name, DType* out) {
  static const struct { const char* n; DType t; } table[] = {
      {"F32", DType::F32}, {"BF16", DType::BF16}, {"F16", DType::F16}, {"I32", DType::I32},
      {"I64", DType::I64}, {"U16", DType::U16},   {"U32", DType::U32}, {"F64", DType::F64},
      {"U8", DType::U8}};
  for (const auto& e : table)
    if (name == e.n) { *out = e.t; return true; }
  return false;
}

}  // namespace ctrl
