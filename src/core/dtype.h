// Element types for parameters, activations and files. The engine's master
// weights and optimizer state are always F32; BF16/F16 are for activations
// and matrix products (mixed precision).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace ctrl {

enum class DType : uint8_t { F32, BF16, F16, I32, I64, U16, U32, F64, U8 };

size_t dtype_size(DType t);
// Names as safetensors writes them ("F32", "BF16", "I64", ...).
const char* dtype_name(DType t);
// Parses a safetensors dtype name; returns false if unknown.
bool parse_dtype(const std::string& name, DType* out);

}  // namespace ctrl
