// NVRTC: CUDA C++ kernel source -> PTX, with a content-addressed on-disk cache and a small
// thread pool for compiling many kernels at once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/op.h"

namespace teeny {

struct NvrtcConfig {
  std::string arch = "sm_90";              // --gpu-architecture
  std::vector<std::string> extra_options;  // appended to the defaults, e.g. "--use_fast_math"
  bool use_cache = true;
  std::string cache_dir;  // empty: default_cache_dir()
  int jobs = 0;           // compile threads; 0: one per hardware thread
  // In-memory headers the sources may #include (by name); part of every cache key.
  std::vector<KernelHeader> headers;
};

// One compiled kernel, jitify-style: the PTX with the log and the exact options used.
struct CompiledKernel {
  std::string ptx;
  std::string log;  // NVRTC's log (warnings); empty when clean
  std::vector<std::string> options;
  bool from_cache = false;
};

struct NvrtcStats {
  int compiled = 0;                         // kernels NVRTC compiled in this call
  int cached = 0;                           // kernels read from the cache
  std::vector<std::string> cache_warnings;  // cache entries that could not be written
};

// "13.0"; throws a GPU error if NVRTC cannot report it.
std::string nvrtc_version();
// The full option list for `config`: -std=c++17, --gpu-architecture=<arch>, -default-device,
// -lineinfo, -I<CUDA include dir>, then the extra options. Validates the arch against
// nvrtcGetSupportedArchs.
std::vector<std::string> nvrtc_options(const NvrtcConfig& config);
// The SM number of an --arch value ("sm_90", "compute_90a" -> 90); throws on anything else.
int arch_sm(const std::string& arch);
// The arch-specific variant of an --arch value ("sm_90" -> "sm_90a"; "sm_90a" stays).
std::string arch_specific(const std::string& arch);
// `options` with its --gpu-architecture switched to arch_specific(), for kernels marked so.
std::vector<std::string> arch_specific_options(std::vector<std::string> options);
// TEENY_CACHE_DIR, else $HOME/.cache/teeny.
std::string default_cache_dir();

// Compiles each source (a whole translation unit), `config.jobs` at a time, consulting
// and filling the cache. Results are in input order. If any kernel fails, throws the error of
// the first failing kernel in input order (deterministic whatever the thread timing), with
// NVRTC's log, the options, and the op's source file and line.
std::vector<CompiledKernel> compile_kernels(const std::vector<KernelSource>& kernels, const NvrtcConfig& config,
                                            NvrtcStats* stats = nullptr);

// Process-wide number of nvrtcCompileProgram calls so far (tests use it to see cache hits).
uint64_t nvrtc_compile_count();

}  // namespace teeny
