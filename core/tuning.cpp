#include "core/tuning.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/builtin_tuning.h"
#include "core/error.h"
#include "core/identifier.h"
#include "core/input_file.h"
#include "core/json_field.h"

namespace teeny {
namespace {

using json = nlohmann::json;
// Written in a fixed key order, and read in it where order means something (a record's dims).
using ordered_json = nlohmann::ordered_json;

constexpr const char* kFormat = "teeny-tuning";
constexpr const char* kBuiltinPrefix = "built-in tuning/";

// ---- reading ------------------------------------------------------------------------------------

// A misspelt key ("varient") must not be ignored: the record would silently mean something else.
void reject_unknown_keys(const JsonField& field, const std::vector<std::string>& allowed) {
  if (!field.value().is_object()) field.fail(fmt::format("expected an object, found {}", field.value().type_name()));
  for (const auto& item : field.value().items()) {
    if (std::find(allowed.begin(), allowed.end(), item.key()) == allowed.end()) {
      field.fail(fmt::format("unknown key '{}'{}", excerpt(item.key()), did_you_mean(item.key(), allowed)));
    }
  }
}

std::string non_empty_string(const JsonField& field) {
  std::string text = field.str();
  if (text.empty()) field.fail("expected a non-empty string");
  return text;
}

void check_format(const JsonField& top) {
  const JsonField format = top["format"];
  if (format.value() != kFormat) {
    format.fail(fmt::format("expected \"{}\", found {}", kFormat, excerpt(format.value().dump())));
  }
  const JsonField version_field = top["version"];
  const int64_t version = version_field.integer();
  if (version > kTuningFormatVersion) {
    version_field.fail(fmt::format("the file is version {}, written by a newer teeny; teeny {} reads version {}",
                                   version, TEENY_VERSION, kTuningFormatVersion));
  }
  if (version != kTuningFormatVersion) {
    version_field.fail(
        fmt::format("unknown version {}; teeny {} reads version {}", version, TEENY_VERSION, kTuningFormatVersion));
  }
}

// "sm_" and a number, as compile's --arch takes it.
std::string read_arch(const JsonField& field) {
  std::string arch = field.str();
  const bool digits =
      arch.size() > 3 && std::all_of(arch.begin() + 3, arch.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (arch.rfind("sm_", 0) != 0 || !digits) {
    field.fail(fmt::format("expected an arch like \"sm_90\", found {}", excerpt(field.value().dump())));
  }
  return arch;
}

DType read_dtype(const JsonField& field) {
  const std::string name = field.str();
  if (std::optional<DType> dtype = parse_dtype(name)) return *dtype;
  field.fail(fmt::format("unknown dtype '{}'{}; the dtypes are {}", excerpt(name), did_you_mean(name, dtype_names()),
                         fmt::join(dtype_names(), ", ")));
}

std::optional<int64_t> positive_integer(const json& value) {
  if (value.is_number_unsigned()) {
    const uint64_t n = value.get<uint64_t>();
    if (n >= 1 && n <= uint64_t{std::numeric_limits<int64_t>::max()}) return static_cast<int64_t>(n);
  } else if (value.is_number_integer() && value.get<int64_t>() >= 1) {
    return value.get<int64_t>();
  }
  return std::nullopt;
}

DimRange read_range(const JsonField& field) {
  const json& value = field.value();
  if (std::optional<int64_t> n = positive_integer(value)) return {*n, *n};
  if (!value.is_array()) {
    field.fail(fmt::format("expected an integer >= 1 or [lo, hi], found {}", excerpt(value.dump())));
  }
  if (value.size() == 2) {
    const std::optional<int64_t> lo = positive_integer(value[0]), hi = positive_integer(value[1]);
    if (lo && hi && *lo <= *hi) return {*lo, *hi};
  }
  field.fail(fmt::format("expected [lo, hi] with 1 <= lo <= hi, found {}", excerpt(value.dump())));
}

// `ordered` is the same object as `field`'s, read with its keys in the file's order.
std::vector<std::pair<std::string, DimRange>> read_dims(const JsonField& field, const ordered_json& ordered) {
  if (!field.value().is_object()) {
    field.fail(fmt::format("expected an object of dims, found {}", field.value().type_name()));
  }
  if (field.value().empty()) field.fail("expected at least one dim");
  std::vector<std::pair<std::string, DimRange>> dims;
  for (const auto& item : ordered.items()) {
    const std::string& name = item.key();
    if (!is_identifier(name)) field.fail(fmt::format("'{}' is not a dim name", excerpt(name)));
    dims.emplace_back(name, read_range(field[name.c_str()]));
  }
  return dims;
}

std::string read_l2(const JsonField& field) {
  const std::vector<std::string> choices = {"cold", "warm"};
  const std::string l2 = field.str();
  if (std::find(choices.begin(), choices.end(), l2) == choices.end()) {
    field.fail(fmt::format("expected \"cold\" or \"warm\", found '{}'{}", excerpt(l2), did_you_mean(l2, choices)));
  }
  return l2;
}

double read_median(const JsonField& field) {
  const double us = field.number();
  if (!std::isfinite(us) || us < 0)
    field.fail(fmt::format("expected a number >= 0, found {}", excerpt(field.value().dump())));
  return us;
}

int read_iterations(const JsonField& field) {
  const int64_t n = field.integer();
  if (n < 0 || n > std::numeric_limits<int>::max()) field.fail(fmt::format("expected a count >= 0, found {}", n));
  return static_cast<int>(n);
}

// A rejected candidate may have no time: it can fail before running.
TuningCandidate read_candidate(const JsonField& field) {
  reject_unknown_keys(field, {"variant", "median_us", "iterations", "rejected"});
  TuningCandidate candidate;
  candidate.variant = non_empty_string(field["variant"]);
  if (field.has("rejected")) candidate.rejected = non_empty_string(field["rejected"]);
  const bool measured = candidate.rejected.empty();
  if (measured || field.has("median_us")) candidate.median_us = read_median(field["median_us"]);
  if (measured || field.has("iterations")) candidate.iterations = read_iterations(field["iterations"]);
  return candidate;
}

std::vector<TuningCandidate> read_candidates(const JsonField& field) {
  std::vector<TuningCandidate> candidates;
  for (const JsonField& item : field.items()) {
    TuningCandidate candidate = read_candidate(item);
    for (const TuningCandidate& earlier : candidates) {
      if (earlier.variant == candidate.variant) {
        item["variant"].fail(fmt::format("'{}' is listed twice", excerpt(candidate.variant)));
      }
    }
    candidates.push_back(std::move(candidate));
  }
  return candidates;
}

// Where the candidates are given, they are the evidence for the winner.
void check_winner(const JsonField& variant_field, const TuningRecord& record) {
  if (record.candidates.empty()) return;
  std::vector<std::string> measured;
  for (const TuningCandidate& candidate : record.candidates) {
    if (candidate.variant == record.variant && candidate.rejected.empty()) return;
    if (candidate.variant == record.variant) {
      variant_field.fail(
          fmt::format("'{}' is a rejected candidate ({})", excerpt(record.variant), excerpt(candidate.rejected)));
    }
    if (candidate.rejected.empty()) measured.push_back(candidate.variant);
  }
  variant_field.fail(fmt::format("'{}' is not among the candidates; the measured ones are {}", excerpt(record.variant),
                                 measured.empty() ? "none" : fmt::format("{}", fmt::join(measured, ", "))));
}

TuningRecord read_record(const JsonField& field, const ordered_json& ordered) {
  reject_unknown_keys(field, {"op", "dtype", "dims", "variant", "l2", "candidates"});
  TuningRecord record;
  record.op = non_empty_string(field["op"]);
  record.dtype = read_dtype(field["dtype"]);
  const JsonField dims = field["dims"];
  record.dims = read_dims(dims, ordered.at("dims"));
  record.variant = non_empty_string(field["variant"]);
  if (field.has("l2")) record.l2 = read_l2(field["l2"]);
  if (field.has("candidates")) record.candidates = read_candidates(field["candidates"]);
  check_winner(field["variant"], record);
  return record;
}

// ---- dims --------------------------------------------------------------------------------------

template <typename Value>
std::vector<std::string> sorted_names(const std::vector<std::pair<std::string, Value>>& dims) {
  std::vector<std::string> names;
  for (const auto& dim : dims) names.push_back(dim.first);
  std::sort(names.begin(), names.end());
  return names;
}

const DimRange* range_of(const std::vector<std::pair<std::string, DimRange>>& dims, const std::string& name) {
  for (const auto& [dim, range] : dims) {
    if (dim == name) return &range;
  }
  return nullptr;
}

bool same_kind(const TuningRecord& a, const TuningRecord& b) {
  return a.op == b.op && a.dtype == b.dtype && sorted_names(a.dims) == sorted_names(b.dims);
}

// Some binding of the dims falls in both records: every dim's ranges intersect.
bool overlaps(const TuningRecord& a, const TuningRecord& b) {
  if (!same_kind(a, b)) return false;
  return std::all_of(a.dims.begin(), a.dims.end(), [&](const auto& dim) {
    const DimRange& other = *range_of(b.dims, dim.first);
    return dim.second.lo <= other.hi && other.lo <= dim.second.hi;
  });
}

bool same_dims(const TuningRecord& a, const TuningRecord& b) {
  if (!same_kind(a, b)) return false;
  return std::all_of(a.dims.begin(), a.dims.end(),
                     [&](const auto& dim) { return *range_of(b.dims, dim.first) == dim.second; });
}

// "linear bf16 M=8, N=4096, K=4096"
std::string record_text(const TuningRecord& record) {
  return fmt::format("{} {} {}", record.op, dtype_name(record.dtype), dims_text(record.dims));
}

void check_no_overlaps(const std::vector<TuningRecord>& records, const std::string& document) {
  for (size_t i = 0; i < records.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (overlaps(records[j], records[i])) {
        throw Error(fmt::format("{}: records[{}] overlaps records[{}] ({})", document, i, j, record_text(records[j])));
      }
    }
  }
}

// ---- writing ------------------------------------------------------------------------------------

ordered_json range_json(const DimRange& range) {
  if (range.lo == range.hi) return range.lo;
  return ordered_json::array({range.lo, range.hi});
}

// A rejected candidate's time and count are written only where it has them.
ordered_json candidate_json(const TuningCandidate& candidate) {
  ordered_json out;
  out["variant"] = candidate.variant;
  const bool measured = candidate.rejected.empty();
  if (measured || candidate.median_us != 0) out["median_us"] = candidate.median_us;
  if (measured || candidate.iterations != 0) out["iterations"] = candidate.iterations;
  if (!measured) out["rejected"] = candidate.rejected;
  return out;
}

ordered_json record_json(const TuningRecord& record) {
  ordered_json out;
  out["op"] = record.op;
  out["dtype"] = dtype_name(record.dtype);
  ordered_json dims = ordered_json::object();
  for (const auto& [name, range] : record.dims) dims[name] = range_json(range);
  out["dims"] = std::move(dims);
  out["variant"] = record.variant;
  out["l2"] = record.l2;
  if (!record.candidates.empty()) {
    ordered_json candidates = ordered_json::array();
    for (const TuningCandidate& candidate : record.candidates) candidates.push_back(candidate_json(candidate));
    out["candidates"] = std::move(candidates);
  }
  return out;
}

// The embedded files, parsed once, by file name.
const std::vector<TuningFile>& builtin_files() {
  static const std::vector<TuningFile> files = [] {
    std::vector<EmbeddedFile> embedded = embedded_tuning_files();
    std::sort(embedded.begin(), embedded.end(),
              [](const EmbeddedFile& a, const EmbeddedFile& b) { return a.name < b.name; });
    std::vector<TuningFile> parsed;
    for (const EmbeddedFile& file : embedded) parsed.push_back(parse_tuning(file.text, kBuiltinPrefix + file.name));
    return parsed;
  }();
  return files;
}

}  // namespace

TuningFile parse_tuning(const std::string& text, const std::string& document) {
  const json doc = parse_json_text(text, document);
  // The same document with its objects' keys in the file's order, for the order of the dims.
  const ordered_json ordered = ordered_json::parse(text);
  const JsonField top(doc, document);
  check_format(top);
  reject_unknown_keys(top, {"format", "version", "gpu", "arch", "records"});
  TuningFile file;
  file.gpu = non_empty_string(top["gpu"]);
  file.arch = read_arch(top["arch"]);
  const std::vector<JsonField> records = top["records"].items();
  for (size_t i = 0; i < records.size(); ++i) file.records.push_back(read_record(records[i], ordered["records"][i]));
  check_no_overlaps(file.records, document);
  file.source = document;
  return file;
}

TuningFile load_tuning(const std::string& path) { return parse_tuning(read_input_file(path, "tuning file"), path); }

std::string tuning_json(const TuningFile& file) {
  ordered_json out;
  out["format"] = kFormat;
  out["version"] = kTuningFormatVersion;
  out["gpu"] = file.gpu;
  out["arch"] = file.arch;
  ordered_json records = ordered_json::array();
  for (const TuningRecord& record : file.records) records.push_back(record_json(record));
  out["records"] = std::move(records);
  return out.dump(2) + "\n";
}

void write_tuning(const TuningFile& file, const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec)) {
    std::filesystem::create_directories(parent, ec);
    if (ec) {
      throw Error(fmt::format("cannot write tuning file '{}': cannot create the directory '{}': {}", path,
                              parent.string(), ec.message()));
    }
  }
  write_file_atomically(path, tuning_json(file), "tuning file");
}

void upsert_record(TuningFile& file, TuningRecord record) {
  for (TuningRecord& existing : file.records) {
    if (same_dims(existing, record)) {
      existing = std::move(record);
      return;
    }
  }
  for (size_t i = 0; i < file.records.size(); ++i) {
    if (overlaps(file.records[i], record)) {
      throw Error(fmt::format("cannot add the tuning record {}: it overlaps records[{}] ({})", record_text(record), i,
                              record_text(file.records[i])));
    }
  }
  file.records.push_back(std::move(record));
}

const TuningRecord* find_record(const TuningFile& file, const std::string& op, DType dtype,
                                const std::vector<std::pair<std::string, int64_t>>& dims) {
  for (const TuningRecord& record : file.records) {
    if (record.op != op || record.dtype != dtype || sorted_names(record.dims) != sorted_names(dims)) continue;
    const bool exact = std::all_of(dims.begin(), dims.end(), [&](const auto& dim) {
      return *range_of(record.dims, dim.first) == DimRange{dim.second, dim.second};
    });
    if (exact) return &record;
  }
  return nullptr;
}

std::vector<TunedChoice> tuned_choices(const TuningFile& file, const std::string& op, DType dtype,
                                       const std::vector<std::pair<std::string, Expr>>& dims) {
  const std::vector<std::string> names = sorted_names(dims);
  std::vector<TunedChoice> choices;
  for (size_t i = 0; i < file.records.size(); ++i) {
    const TuningRecord& record = file.records[i];
    if (record.op != op || record.dtype != dtype || sorted_names(record.dims) != names) continue;
    Expr when = 1;
    bool applies = true;
    for (const auto& [name, value] : dims) {
      const DimRange& range = *range_of(record.dims, name);
      if (std::optional<int64_t> constant = value.const_value()) {
        applies = applies && range.contains(*constant);
      } else {
        // Dims are at least 1, so a range from 1 needs no lower bound.
        if (range.lo > 1) when = when * le(Expr(range.lo), value);
        when = when * le(value, Expr(range.hi));
      }
    }
    if (applies && when != Expr(0)) choices.push_back({i, when});
  }
  return choices;
}

std::optional<TuningFile> builtin_tuning(const std::string& arch) {
  for (const TuningFile& file : builtin_files()) {
    if (file.arch == arch) return file;
  }
  return std::nullopt;
}

std::string dims_text(const std::vector<std::pair<std::string, DimRange>>& dims) {
  std::string out;
  for (const auto& [name, range] : dims) {
    if (!out.empty()) out += ", ";
    out += range.lo == range.hi ? fmt::format("{}={}", name, range.lo)
                                : fmt::format("{}={}..{}", name, range.lo, range.hi);
  }
  return out;
}

}  // namespace teeny
