// What the fuzz targets share: the op registry teeny runs with, and an in-memory file for the
// readers that take a path. See docs/hardening.md for building and running the targets.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/registry.h"
#include "ops/ops.h"

namespace teeny::fuzz {

// The built-in ops and passes, as cli/main.cpp registers them.
inline const Registry& registry() {
  static const Registry built = [] {
    Registry r;
    ops::register_all(r);
    return r;
  }();
  return built;
}

// A memfd rewritten with each input; path() (/proc/self/fd/N) opens it like a regular file, and
// nothing is left on disk when a run crashes.
class InputFile {
 public:
  InputFile() : fd_(memfd_create("teeny-fuzz-input", 0)), path_("/proc/self/fd/" + std::to_string(fd_)) {
    if (fd_ < 0) fail("memfd_create");
  }
  const std::string& write(const uint8_t* data, size_t size) {
    if (ftruncate(fd_, 0) != 0) fail("ftruncate");
    for (size_t done = 0; done < size;) {
      ssize_t n = pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) fail("pwrite");
      done += static_cast<size_t>(n);
    }
    return path_;
  }

 private:
  // The harness itself failing is not a finding in teeny: stop loudly.
  [[noreturn]] static void fail(const char* what) {
    std::perror(what);
    std::abort();
  }
  int fd_;
  std::string path_;
};

// A directory of its own under /tmp, for writers that write a temp file beside the target and
// rename it (core/atomic_file.h); removed at exit.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() / (name + "-" + std::to_string(getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string path() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Stops the run with a message when a property teeny promises does not hold (a finding).
[[noreturn]] inline void property_failed(const std::string& what) {
  std::fprintf(stderr, "teeny fuzz: property failed: %s\n", what.c_str());
  std::abort();
}

}  // namespace teeny::fuzz
