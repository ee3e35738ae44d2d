// Element types. Part of the type system from day one: every tensor and param has one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace teeny {

enum class DType { kF32, kF16, kBF16, kI32 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);    // "f32", "f16", "bf16", "i32"
const char* dtype_c_type(DType dtype);  // "float", "__half", "__nv_bfloat16", "int"
std::optional<DType> parse_dtype(const std::string& name);
std::vector<std::string> dtype_names();
bool is_float(DType dtype);
// f32, bf16, f16: what an op that takes any float dtype accepts.
const std::vector<DType>& float_dtypes();

// Conversions used by host code (references, init bytes, npy/safetensors, checks).
// Rounding is round-to-nearest-even, as the GPU's __float2bfloat16 / __float2half.
uint16_t float_to_bf16_bits(float value);
float bf16_bits_to_float(uint16_t bits);
uint16_t float_to_f16_bits(float value);
float f16_bits_to_float(uint16_t bits);

// Encode `value` as one element of `dtype`, little-endian, appended to `out`.
void append_element(std::vector<uint8_t>& out, DType dtype, double value);
// Decode element `index` of a little-endian buffer of `dtype`.
double read_element(const uint8_t* data, DType dtype, size_t index);
// Round a double to what `dtype` can hold (identity for i32 within range).
double round_to_dtype(double value, DType dtype);

}  // namespace teeny
