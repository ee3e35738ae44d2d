#include "core/dtype.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace teeny {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF16:
      return 2;
    case DType::kBF16:
      return 2;
    case DType::kI32:
      return 4;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "i32";
  }
  return "?";
}

const char* dtype_c_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "float";
    case DType::kF16:
      return "__half";
    case DType::kBF16:
      return "__nv_bfloat16";
    case DType::kI32:
      return "int";
  }
  return "?";
}

std::vector<std::string> dtype_names() { return {"f32", "f16", "bf16", "i32"}; }

std::optional<DType> parse_dtype(const std::string& name) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32})
    if (name == dtype_name(d)) return d;
  return std::nullopt;
}

bool is_float(DType dtype) { return dtype != DType::kI32; }

const std::vector<DType>& float_dtypes() {
  static const std::vector<DType> dtypes = {DType::kF32, DType::kBF16, DType::kF16};
  return dtypes;
}

uint16_t float_to_bf16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);                           // round to nearest, ties to even
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float bf16_bits_to_float(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}

uint16_t float_to_f16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  uint32_t sign = (bits >> 16) & 0x8000;
  uint32_t exponent = (bits >> 23) & 0xFF;
  uint32_t mantissa = bits & 0x7FFFFF;
  if (exponent == 0xFF) return static_cast<uint16_t>(sign | 0x7C00 | (mantissa ? 0x200 : 0));
  int e = static_cast<int>(exponent) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7C00);  // overflow -> inf
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);  // underflow -> signed zero
    // Subnormal: shift the implicit-one mantissa into place, rounding to nearest even.
    mantissa |= 0x800000;
    int shift = 14 - e;
    uint32_t half = mantissa >> shift;
    uint32_t remainder = mantissa & ((1u << shift) - 1);
    uint32_t midpoint = 1u << (shift - 1);
    if (remainder > midpoint || (remainder == midpoint && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mantissa >> 13);
  uint32_t remainder = mantissa & 0x1FFF;
  if (remainder > 0x1000 || (remainder == 0x1000 && (half & 1))) ++half;  // may carry into exp: correct
  return static_cast<uint16_t>(half);
}

float f16_bits_to_float(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  uint32_t exponent = (bits >> 10) & 0x1F;
  uint32_t mantissa = bits & 0x3FF;
  uint32_t out;
  if (exponent == 0) {
    if (mantissa == 0) {
      out = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        mantissa <<= 1;
        ++e;
      } while (!(mantissa & 0x400));
      out = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mantissa & 0x3FF) << 13);
    }
  } else if (exponent == 0x1F) {
    out = sign | 0x7F800000 | (mantissa << 13);
  } else {
    out = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &out, 4);
  return value;
}

void append_element(std::vector<uint8_t>& out, DType dtype, double value) {
  auto append = [&out](const void* p, size_t n) {
    const auto* bytes = static_cast<const uint8_t*>(p);
    out.insert(out.end(), bytes, bytes + n);  // host is little-endian (x86-64, aarch64)
  };
  switch (dtype) {
    case DType::kF32: {
      float v = static_cast<float>(value);
      append(&v, 4);
      break;
    }
    case DType::kF16: {
      uint16_t v = float_to_f16_bits(static_cast<float>(value));
      append(&v, 2);
      break;
    }
    case DType::kBF16: {
      uint16_t v = float_to_bf16_bits(static_cast<float>(value));
      append(&v, 2);
      break;
    }
    case DType::kI32: {
      int32_t v = static_cast<int32_t>(std::llround(value));
      append(&v, 4);
      break;
    }
  }
}

double read_element(const uint8_t* data, DType dtype, size_t index) {
  const uint8_t* p = data + index * dtype_size(dtype);
  switch (dtype) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::kF16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return f16_bits_to_float(v);
    }
    case DType::kBF16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return bf16_bits_to_float(v);
    }
    case DType::kI32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
  }
  return 0.0;
}

double round_to_dtype(double value, DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<float>(value);
    case DType::kF16:
      return f16_bits_to_float(float_to_f16_bits(static_cast<float>(value)));
    case DType::kBF16:
      return bf16_bits_to_float(float_to_bf16_bits(static_cast<float>(value)));
    case DType::kI32:
      return static_cast<double>(static_cast<int32_t>(std::llround(value)));
  }
  return value;
}

}  // namespace teeny
