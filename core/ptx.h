// Reading what NVRTC produced: the `.entry` declarations of a PTX module, with their
// parameter lists and launch-shape directives, so compile can check launches against them.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

namespace teeny {

struct PtxParam {
  std::string type;         // ".u64", ".u32", ".s32", ".f32", ".b8", ...
  std::string name;         // "<entry>_param_<i>"
  int size = 0;             // bytes: element size × array length
  int align = 0;            // bytes: `.align N` when given, else the element size
  bool is_pointer = false;  // `.ptr` attribute present (older NVRTC marks pointers this way)
  int pointee_align = 0;    // `.ptr .align N`: alignment of the pointed-to data, 0 if absent
};

struct PtxEntry {
  std::string name;
  bool visible = false;  // `.visible` linkage (callable from the host)
  std::vector<PtxParam> params;
  std::optional<std::array<int, 3>> reqntid, maxntid;  // missing dimensions are 1
  int line = 0;                                        // 1-based line of `.entry` in the PTX
};

// Parses every `.entry` in `ptx` (comments ignored). Throws teeny::Error naming `what`
// (e.g. "kernels/relu_f32.ptx") and the line when a declaration cannot be read.
std::vector<PtxEntry> parse_ptx_entries(const std::string& ptx, const std::string& what);

// The `.visible .entry` named `name`, or nullptr.
const PtxEntry* find_visible_entry(const std::vector<PtxEntry>& entries, const std::string& name);

// Size in bytes of a PTX fundamental type (".u64" -> 8, ".f16" -> 2); 0 if unknown.
int ptx_type_size(const std::string& type);

// "256, 1, 1"
std::string ntid_str(const std::array<int, 3>& ntid);

// Whether the PTX issues f16/bf16 tensor-core MMAs (mma.sync or wgmma.mma_async), so its
// arithmetic is measured against the tensor-core ceiling rather than the FP32 one.
bool ptx_uses_f16_mma(const std::string& ptx);

}  // namespace teeny
