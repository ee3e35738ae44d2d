// The built-in tuning files (tuning/*.json in the source tree), embedded in the binary at build
// time (cmake/embed_kernels.cmake); builtin_tuning (core/tuning.h) reads them.
#pragma once

#include <string>
#include <vector>

namespace teeny {

struct EmbeddedFile {
  std::string name;  // the file name, e.g. "nvidia-h200.json"
  std::string text;
};

const std::vector<EmbeddedFile>& embedded_tuning_files();

}  // namespace teeny
