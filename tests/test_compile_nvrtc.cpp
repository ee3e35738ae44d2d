// NVRTC: the on-disk cache (hits counted, corrupt entries recompiled), parallel compilation
// with a deterministic first error, options and arch validation.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <iostream>

#include <fmt/format.h>

#include "core/error.h"
#include "core/nvrtc.h"
#include "tests/test_compile_util.h"

namespace teeny {
namespace {

using testing::ScratchDir;

KernelSource kernel(const std::string& name, int constant) {
  return {name,
          fmt::format("extern \"C\" __global__ void {}_entry_point(float* y, int n) {{\n"
                      "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                      "  if (i < n) y[i] = {}.0f * y[i];\n"
                      "}}\n",
                      name, constant),
          "test.cpp", 1};
}

KernelSource broken(const std::string& name) {
  return {name, "extern \"C\" __global__ void " + name + "_entry_point() { int x = ; }\n", "broken.cpp", 7};
}

NvrtcConfig config_in(const ScratchDir& cache, int jobs = 2) {
  NvrtcConfig config;
  config.cache_dir = cache.str();
  config.jobs = jobs;
  return config;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST(NvrtcCache, RecompileIsServedFromCacheWithoutCallingNvrtc) {
  ScratchDir cache;
  std::vector<KernelSource> kernels = {kernel("a", 2), kernel("b", 3), kernel("c", 4)};

  uint64_t before = nvrtc_compile_count();
  auto start = std::chrono::steady_clock::now();
  NvrtcStats first;
  std::vector<CompiledKernel> cold = compile_kernels(kernels, config_in(cache), &first);
  double cold_seconds = seconds_since(start);
  EXPECT_EQ(nvrtc_compile_count() - before, 3u);
  EXPECT_EQ(first.compiled, 3);
  EXPECT_EQ(first.cached, 0);
  EXPECT_TRUE(first.cache_warnings.empty());

  before = nvrtc_compile_count();
  start = std::chrono::steady_clock::now();
  NvrtcStats second;
  std::vector<CompiledKernel> warm = compile_kernels(kernels, config_in(cache), &second);
  double warm_seconds = seconds_since(start);
  EXPECT_EQ(nvrtc_compile_count() - before, 0u);
  EXPECT_EQ(second.compiled, 0);
  EXPECT_EQ(second.cached, 3);
  for (size_t i = 0; i < kernels.size(); ++i) {
    EXPECT_EQ(warm[i].ptx, cold[i].ptx);
    EXPECT_TRUE(warm[i].from_cache);
    EXPECT_FALSE(cold[i].from_cache);
    EXPECT_EQ(warm[i].options, cold[i].options);
  }
  std::cout << fmt::format("[ timing ] 3 kernels: NVRTC {:.3f} s, cache {:.3f} s\n", cold_seconds, warm_seconds);
  EXPECT_LT(warm_seconds, cold_seconds);
}

TEST(NvrtcCache, KeyCoversSourceOptionsAndArch) {
  ScratchDir cache;
  NvrtcStats stats;
  compile_kernels({kernel("a", 2)}, config_in(cache), &stats);
  NvrtcConfig fast = config_in(cache);
  fast.extra_options = {"--use_fast_math"};
  compile_kernels({kernel("a", 2)}, fast, &stats);              // other options
  compile_kernels({kernel("a", 5)}, config_in(cache), &stats);  // other source
  NvrtcConfig other_arch = config_in(cache);
  other_arch.arch = "sm_80";
  std::vector<CompiledKernel> sm80 = compile_kernels({kernel("a", 2)}, other_arch, &stats);
  EXPECT_EQ(stats.compiled, 4);
  EXPECT_EQ(stats.cached, 0);
  EXPECT_NE(sm80[0].ptx.find(".target sm_80"), std::string::npos);
  compile_kernels({kernel("a", 2)}, fast, &stats);
  EXPECT_EQ(stats.cached, 1);
}

// A source including an in-memory header; the headers are part of the key.
TEST(NvrtcCache, InMemoryHeadersCompileAndChangingOneRecompiles) {
  ScratchDir cache;
  const KernelSource source{"h",
                            "#include \"scale.cuh\"\n"
                            "extern \"C\" __global__ void h_entry_point(float* y) { y[threadIdx.x] *= kScale; }\n",
                            "test.cpp", 1};
  NvrtcConfig config = config_in(cache);
  config.headers = {{"scale.cuh", "constexpr float kScale = 3.0f;\n"}};
  NvrtcStats stats;
  const std::vector<CompiledKernel> three = compile_kernels({source}, config, &stats);
  EXPECT_NE(three[0].ptx.find("0f40400000"), std::string::npos) << three[0].ptx;  // 3.0f
  compile_kernels({source}, config, &stats);
  EXPECT_EQ(stats.compiled, 1);
  EXPECT_EQ(stats.cached, 1);
  config.headers[0].text = "constexpr float kScale = 5.0f;\n";
  const std::vector<CompiledKernel> five = compile_kernels({source}, config, &stats);
  EXPECT_EQ(stats.compiled, 2);
  EXPECT_NE(five[0].ptx.find("0f40A00000"), std::string::npos) << five[0].ptx;  // 5.0f
}

TEST(NvrtcCache, UnreadableEntriesAreRecompiledAndRewritten) {
  ScratchDir cache;
  compile_kernels({kernel("a", 2)}, config_in(cache));
  std::vector<std::filesystem::path> entries;
  for (const auto& entry : std::filesystem::directory_iterator(cache.path() / "nvrtc")) entries.push_back(entry.path());
  ASSERT_EQ(entries.size(), 1u);  // no temp files left behind
  EXPECT_EQ(entries[0].extension(), ".json");

  for (const std::string& damage : {std::string("{\"key\": \"trunc"), std::string("not json"), std::string("")}) {
    SCOPED_TRACE(damage);
    std::ofstream(entries[0], std::ios::trunc) << damage;
    uint64_t before = nvrtc_compile_count();
    NvrtcStats stats;
    compile_kernels({kernel("a", 2)}, config_in(cache), &stats);
    EXPECT_EQ(stats.compiled, 1);
    EXPECT_EQ(nvrtc_compile_count() - before, 1u);
    NvrtcStats again;
    compile_kernels({kernel("a", 2)}, config_in(cache), &again);
    EXPECT_EQ(again.cached, 1);  // the entry was rewritten
  }

  // Valid JSON whose PTX no longer matches its checksum is not trusted either.
  std::ifstream in(entries[0]);
  nlohmann::json entry = nlohmann::json::parse(in);
  entry["ptx"] = entry["ptx"].get<std::string>() + "// altered\n";
  std::ofstream(entries[0], std::ios::trunc) << entry.dump();
  NvrtcStats stats;
  std::vector<CompiledKernel> out = compile_kernels({kernel("a", 2)}, config_in(cache), &stats);
  EXPECT_EQ(stats.compiled, 1);
  EXPECT_EQ(out[0].ptx.find("// altered"), std::string::npos);
}

TEST(NvrtcCache, UnwritableCacheIsAWarningNotAFailure) {
  ScratchDir scratch;
  std::ofstream(scratch.str("file")) << "x";  // a file where the cache directory should be
  NvrtcConfig config;
  config.cache_dir = scratch.str("file");
  NvrtcStats stats;
  std::vector<CompiledKernel> out = compile_kernels({kernel("a", 2)}, config, &stats);
  EXPECT_NE(out[0].ptx.find(".visible .entry a_entry_point("), std::string::npos);
  ASSERT_EQ(stats.cache_warnings.size(), 1u);
  EXPECT_EQ(
      stats.cache_warnings[0].rfind("cannot create kernel cache directory " + scratch.str("file") + "/nvrtc: ", 0), 0u)
      << stats.cache_warnings[0];
}

TEST(NvrtcParallel, FirstErrorInInputOrderWhateverTheTiming) {
  ScratchDir cache;
  std::vector<KernelSource> kernels = {kernel("ok1", 1), broken("bad1"),   kernel("ok2", 2),
                                       broken("bad2"),   kernel("ok3", 3), kernel("ok4", 4)};
  for (int round = 0; round < 3; ++round) {
    NvrtcConfig config = config_in(cache, 4);
    config.use_cache = false;
    try {
      compile_kernels(kernels, config);
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(e.message(),
                "NVRTC failed to compile kernel 'bad1' (NVRTC_ERROR_COMPILATION), generated at broken.cpp:7");
    }
  }
}

TEST(NvrtcParallel, ResultsKeepInputOrder) {
  ScratchDir cache;
  std::vector<KernelSource> kernels;
  for (int i = 0; i < 6; ++i) kernels.push_back(kernel(fmt::format("k{}", i), i));
  std::vector<CompiledKernel> out = compile_kernels(kernels, config_in(cache, 3));
  ASSERT_EQ(out.size(), kernels.size());
  for (int i = 0; i < 6; ++i) {
    EXPECT_NE(out[i].ptx.find(fmt::format(".visible .entry k{}_entry_point(", i)), std::string::npos) << i;
  }
}

TEST(NvrtcOptions, DefaultsAndArchValidation) {
  NvrtcConfig config;
  std::vector<std::string> options = nvrtc_options(config);
  ASSERT_GE(options.size(), 5u);
  EXPECT_EQ(std::vector<std::string>(options.begin(), options.begin() + 4),
            (std::vector<std::string>{"-std=c++17", "--gpu-architecture=sm_90", "-default-device", "-lineinfo"}));
  EXPECT_EQ(options[4].rfind("-I", 0), 0u);
  EXPECT_EQ(std::count(options.begin(), options.end(), "--use_fast_math"), 0);

  config.arch = "sm90";
  try {
    nvrtc_options(config);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "invalid --arch 'sm90': expected sm_NN or compute_NN, e.g. sm_90");
  }
  config.arch = "sm_11";
  try {
    nvrtc_options(config);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), fmt::format("--arch 'sm_11' is not supported by NVRTC {}", nvrtc_version()));
    ASSERT_EQ(e.notes().size(), 1u);
    EXPECT_NE(e.notes()[0].find("sm_90"), std::string::npos) << e.notes()[0];
  }
}

TEST(NvrtcOptions, DefaultCacheDirFollowsEnvironment) {
  const char* saved = std::getenv("TEENY_CACHE_DIR");
  std::string restore = saved ? saved : "";
  setenv("TEENY_CACHE_DIR", "/some/where", 1);
  EXPECT_EQ(default_cache_dir(), "/some/where");
  unsetenv("TEENY_CACHE_DIR");
  if (const char* home = std::getenv("HOME")) {
    EXPECT_EQ(default_cache_dir(), std::string(home) + "/.cache/teeny");
  }
  if (saved) setenv("TEENY_CACHE_DIR", restore.c_str(), 1);
}

}  // namespace
}  // namespace teeny
