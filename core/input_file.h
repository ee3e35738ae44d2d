// Reading the files teeny is given (graph specs, bundle files, .npy and .safetensors data, NVRTC
// cache entries) as hostile input: only regular files are read, so a directory, a FIFO or
// /dev/zero is refused at once instead of hanging or reading forever; what is read whole has a
// size limit, and what is large (tensor data) is read only once its declared size has been checked
// against the file's; JSON and YAML are refused when nested deeper than the parsers' recursion
// can take.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace teeny {

// Files read whole into memory (specs, manifests, PTX, headers): 64 MiB is far above any real one.
inline constexpr uint64_t kTextFileLimit = uint64_t{64} << 20;

// Lists and maps inside each other, in a spec, a manifest or a safetensors header.
inline constexpr int kMaxNesting = 64;

// An open regular file. Errors read "cannot read <what> '<path>': <reason>", the reason being
// "is a directory", "not a regular file", "larger than the N MiB limit", "it ends at byte N" or
// the system's ("No such file or directory").
class InputFile {
 public:
  InputFile(std::string path, std::string what);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // `count` bytes from `offset`; an error when the file ends before (it shrank after the size check).
  std::string read(uint64_t offset, uint64_t count) const;
  // The whole file; an error when it is larger than `limit` bytes.
  std::string read_all(uint64_t limit = kTextFileLimit) const;
  Error error(const std::string& reason) const;

 private:
  std::string path_, what_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The whole of the file at `path`, at most `limit` bytes (errors as InputFile's).
std::string read_input_file(const std::string& path, const std::string& what, uint64_t limit = kTextFileLimit);

// 1-based line and column of the first bracket (JSON) or the first list or map (YAML: flow
// brackets, indentation and "- " entries) nested more than `limit` deep, if any. For YAML the
// count is an approximation that never counts less than the nesting yaml-cpp will recurse into.
struct TextPosition {
  int line = 0, column = 0;
};
std::optional<TextPosition> json_nesting_beyond(const std::string& text, int limit = kMaxNesting);
std::optional<TextPosition> yaml_nesting_beyond(const std::string& text, int limit = kMaxNesting);

// `text` as JSON, nested at most kMaxNesting deep. Throws Error "<what> is not valid JSON: <problem
// at line and column>", or "<what>: <problem>" for JSON that teeny cannot hold (a number out of
// double's range, nesting).
nlohmann::json parse_json_text(const std::string& text, const std::string& what);

// nlohmann's message without its "[json.exception.parse_error.101] " prefix, and with the text it
// quotes cut short.
std::string json_error_text(const nlohmann::json::exception& e);

}  // namespace teeny
