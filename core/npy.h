// NumPy .npy files (format versions 1, 2 and 3), little-endian, C order.
//
// Read: '<f4' (f32), '<f2' (f16), '<f8' (read as f32), '<i4' (i32), '<i8' (read as i32,
//   range-checked). Values come back exactly as stored (f64 rounded to f32).
// Write: f32 -> '<f4', f16 -> '<f2', i32 -> '<i4'. NumPy has no bf16, so bf16 tensors are
//   written as '<f4' — exact, since every bf16 value is an f32 value.
// Writes are atomic (core/atomic_file.h).
#pragma once

#include <string>

#include "core/op.h"

namespace teeny {

// Throws Error (exit code 1) naming the file and what is wrong with it.
HostTensor read_npy(const std::string& path);
void write_npy(const std::string& path, const HostTensor& tensor);

// The dtype a tensor of `dtype` is written as (bf16 -> f32).
DType npy_storage_dtype(DType dtype);

}  // namespace teeny
