#include "core/nvrtc.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nvrtc.h>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/input_file.h"
#include "core/sha256.h"

namespace teeny {
namespace fs = std::filesystem;
namespace {

std::atomic<uint64_t> g_compile_count{0};

void check_nvrtc(nvrtcResult result, const char* call, const std::string& doing) {
  if (result != NVRTC_SUCCESS) {
    throw gpu_error(fmt::format("NVRTC error {} from {} while {}", nvrtcGetErrorString(result), call, doing));
  }
}

// Owns an nvrtcProgram so every exit path destroys it.
class Program {
 public:
  Program(const KernelSource& kernel, const std::vector<KernelHeader>& headers) {
    // An absolute virtual file name keeps -lineinfo's `.file` (and so the PTX) independent of
    // the working directory.
    std::string file = fmt::format("/teeny/{}.cu", kernel.name);
    std::vector<const char*> texts, names;
    for (const KernelHeader& header : headers) {
      texts.push_back(header.text.c_str());
      names.push_back(header.name.c_str());
    }
    check_nvrtc(nvrtcCreateProgram(&program_, kernel.source.c_str(), file.c_str(), static_cast<int>(headers.size()),
                                   texts.data(), names.data()),
                "nvrtcCreateProgram", fmt::format("creating the program for kernel '{}'", kernel.name));
  }
  ~Program() { nvrtcDestroyProgram(&program_); }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram get() const { return program_; }

 private:
  nvrtcProgram program_ = nullptr;
};

CompiledKernel run_nvrtc(const KernelSource& kernel, const std::vector<std::string>& options,
                         const std::vector<KernelHeader>& headers) {
  Program program(kernel, headers);
  std::vector<const char*> argv;
  for (const std::string& option : options) argv.push_back(option.c_str());
  g_compile_count.fetch_add(1);
  nvrtcResult compiled = nvrtcCompileProgram(program.get(), static_cast<int>(argv.size()), argv.data());

  CompiledKernel out;
  out.options = options;
  size_t log_size = 0;
  std::string doing = fmt::format("reading the log of kernel '{}'", kernel.name);
  check_nvrtc(nvrtcGetProgramLogSize(program.get(), &log_size), "nvrtcGetProgramLogSize", doing);
  out.log.assign(log_size, '\0');
  check_nvrtc(nvrtcGetProgramLog(program.get(), out.log.data()), "nvrtcGetProgramLog", doing);
  while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n')) out.log.pop_back();

  if (compiled != NVRTC_SUCCESS) {
    Error error = gpu_error(fmt::format("NVRTC failed to compile kernel '{}' ({}), generated at {}:{}", kernel.name,
                                        nvrtcGetErrorString(compiled), kernel.file, kernel.line));
    error.note("NVRTC log:\n" + out.log);
    std::string joined;
    for (const std::string& option : options) joined += (joined.empty() ? "" : " ") + option;
    error.note("options: " + joined);
    throw error;
  }

  size_t ptx_size = 0;
  doing = fmt::format("reading the PTX of kernel '{}'", kernel.name);
  check_nvrtc(nvrtcGetPTXSize(program.get(), &ptx_size), "nvrtcGetPTXSize", doing);
  out.ptx.assign(ptx_size, '\0');
  check_nvrtc(nvrtcGetPTX(program.get(), out.ptx.data()), "nvrtcGetPTX", doing);
  while (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
  return out;
}

// Every header is part of the key (not only those the source includes): a header edit recompiles
// all kernels, which is rare and always correct.
std::string cache_key(const KernelSource& kernel, const std::vector<std::string>& options, const std::string& version,
                      const std::string& arch, const std::vector<KernelHeader>& headers) {
  Sha256 hash;
  hash.part("teeny nvrtc cache v2").part(kernel.source).part(version).part(arch);
  for (const std::string& option : options) hash.part(option);
  for (const KernelHeader& header : headers) hash.part(header.name).part(header.text);
  return hash.hex();
}

// A cache entry is JSON {key, ptx, ptx_sha256, log}; anything unreadable, truncated or for
// another key is treated as absent (and rewritten).
std::optional<CompiledKernel> read_cache(const fs::path& file, const std::string& key,
                                         const std::vector<std::string>& options) {
  std::string text;
  try {
    text = read_input_file(file.string(), "cache entry");
  } catch (const Error&) {
    return std::nullopt;
  }
  nlohmann::json entry = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!entry.is_object()) return std::nullopt;
  auto string_field = [&](const char* name) -> std::optional<std::string> {
    auto it = entry.find(name);
    if (it == entry.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  };
  auto stored_key = string_field("key");
  auto ptx = string_field("ptx");
  auto ptx_sha = string_field("ptx_sha256");
  auto log = string_field("log");
  if (!stored_key || *stored_key != key || !ptx || !ptx_sha || !log || sha256_hex(*ptx) != *ptx_sha) {
    return std::nullopt;
  }
  CompiledKernel out;
  out.ptx = *ptx;
  out.log = *log;
  out.options = options;
  out.from_cache = true;
  return out;
}

// Atomic, so concurrent teeny processes and interrupted writes never leave a partial entry under
// the final name. Returns a warning, or "" on success.
std::string write_cache(const fs::path& file, const std::string& key, const CompiledKernel& kernel) {
  nlohmann::json entry = {
      {"key", key}, {"ptx", kernel.ptx}, {"ptx_sha256", sha256_hex(kernel.ptx)}, {"log", kernel.log}};
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  if (ec) return fmt::format("cannot create kernel cache directory {}: {}", file.parent_path().string(), ec.message());
  try {
    write_file_atomically(file.string(), entry.dump(), "kernel cache entry");
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

struct Job {
  CompiledKernel result;
  std::string cache_warning;
  std::exception_ptr error;
};

}  // namespace

uint64_t nvrtc_compile_count() { return g_compile_count.load(); }

std::string nvrtc_version() {
  int major = 0, minor = 0;
  check_nvrtc(nvrtcVersion(&major, &minor), "nvrtcVersion", "reading the NVRTC version");
  return fmt::format("{}.{}", major, minor);
}

std::string default_cache_dir() {
  if (const char* dir = std::getenv("TEENY_CACHE_DIR"); dir != nullptr && *dir != '\0') return dir;
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return (fs::path(home) / ".cache" / "teeny").string();
  }
  return (fs::temp_directory_path() / "teeny-cache").string();
}

int arch_sm(const std::string& arch) {
  static const std::regex arch_pattern("(sm|compute)_([0-9]{1,4})[af]?");
  std::smatch match;
  if (!std::regex_match(arch, match, arch_pattern)) {
    throw Error(fmt::format("invalid --arch '{}': expected sm_NN or compute_NN, e.g. sm_90", arch));
  }
  return std::stoi(match[2].str());
}

std::string arch_specific(const std::string& arch) {
  return !arch.empty() && std::isdigit(static_cast<unsigned char>(arch.back())) ? arch + "a" : arch;
}

std::vector<std::string> arch_specific_options(std::vector<std::string> options) {
  static const std::string prefix = "--gpu-architecture=";
  for (std::string& option : options) {
    if (option.rfind(prefix, 0) == 0) option = prefix + arch_specific(option.substr(prefix.size()));
  }
  return options;
}

std::vector<std::string> nvrtc_options(const NvrtcConfig& config) {
  const int number = arch_sm(config.arch);
  int count = 0;
  check_nvrtc(nvrtcGetNumSupportedArchs(&count), "nvrtcGetNumSupportedArchs", "checking --arch");
  std::vector<int> supported(count);
  check_nvrtc(nvrtcGetSupportedArchs(supported.data()), "nvrtcGetSupportedArchs", "checking --arch");
  if (std::find(supported.begin(), supported.end(), number) == supported.end()) {
    std::string list;
    for (int arch : supported) list += fmt::format("{}sm_{}", list.empty() ? "" : ", ", arch);
    throw Error(fmt::format("--arch '{}' is not supported by NVRTC {}", config.arch, nvrtc_version()))
        .note("supported: " + list);
  }

  std::vector<std::string> options = {"-std=c++17", "--gpu-architecture=" + config.arch, "-default-device",
                                      "-lineinfo"};
  // CMake's include-dir list (cuda_fp16.h, cuda_bf16.h) may hold several ';'-separated paths.
  std::stringstream dirs(TEENY_CUDA_INCLUDE_DIR);
  for (std::string dir; std::getline(dirs, dir, ';');) {
    if (!dir.empty()) options.push_back("-I" + dir);
  }
  options.insert(options.end(), config.extra_options.begin(), config.extra_options.end());
  return options;
}

std::vector<CompiledKernel> compile_kernels(const std::vector<KernelSource>& kernels, const NvrtcConfig& config,
                                            NvrtcStats* stats) {
  const std::vector<std::string> plain_options = nvrtc_options(config);
  const std::vector<std::string> specific_options = arch_specific_options(plain_options);
  const std::string version = nvrtc_version();
  const fs::path cache_dir = fs::path(config.cache_dir.empty() ? default_cache_dir() : config.cache_dir) / "nvrtc";

  std::vector<Job> jobs(kernels.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  auto worker = [&] {
    // Work is claimed in index order, so when a job fails every lower-index job has already
    // been claimed and will finish: the first error in input order is always reported.
    for (size_t i; !failed.load() && (i = next.fetch_add(1)) < kernels.size();) {
      Job& job = jobs[i];
      try {
        const std::vector<std::string>& options = kernels[i].arch_specific ? specific_options : plain_options;
        std::string key = cache_key(kernels[i], options, version, config.arch, config.headers);
        fs::path file = cache_dir / (key + ".json");
        std::optional<CompiledKernel> hit;
        if (config.use_cache) hit = read_cache(file, key, options);
        if (hit) {
          job.result = std::move(*hit);
        } else {
          job.result = run_nvrtc(kernels[i], options, config.headers);
          if (config.use_cache) job.cache_warning = write_cache(file, key, job.result);
        }
      } catch (...) {
        job.error = std::current_exception();
        failed.store(true);
      }
    }
  };

  size_t threads =
      config.jobs > 0 ? static_cast<size_t>(config.jobs) : std::max(1u, std::thread::hardware_concurrency());
  threads = std::min(threads, kernels.size());
  if (threads <= 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    for (size_t t = 0; t < threads; ++t) pool.emplace_back(worker);
    for (std::thread& thread : pool) thread.join();
  }

  std::vector<CompiledKernel> results;
  results.reserve(kernels.size());
  for (Job& job : jobs) {
    if (job.error) std::rethrow_exception(job.error);
    if (stats != nullptr) {
      (job.result.from_cache ? stats->cached : stats->compiled) += 1;
      if (!job.cache_warning.empty()) stats->cache_warnings.push_back(job.cache_warning);
    }
    results.push_back(std::move(job.result));
  }
  return results;
}

}  // namespace teeny
