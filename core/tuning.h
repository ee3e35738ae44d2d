// Tuning files (docs/tuning.md): measured kernel-variant choices of tunable ops (OpDef::tuning),
// written by `teeny tune` and read by `teeny compile`. One file holds one GPU's records:
//   {"format": "teeny-tuning", "version": 1, "gpu": "NVIDIA H200", "arch": "sm_90",
//    "records": [{"op": "linear", "dtype": "bf16",
//                 "dims": {"M": 8, "N": 4096, "K": 4096},       (a value, or a range [lo, hi])
//                 "variant": "gemv_m8", "l2": "cold",
//                 "candidates": [{"variant": "gemv_m8", "median_us": 21.4, "iterations": 40},
//                                {"variant": "64x64x32", "median_us": 25.0, "iterations": 40},
//                                {"variant": "128x128x64_wgmma_pp", "rejected": "numerics: ..."}]}]}
// A record applies to a node of its op and dtype whose tuning dims (OpTuning::dims) have the
// record's names and lie in its ranges; where a node's dim is symbolic, the range becomes the
// `when` of the record's launches. Records of one op and dtype may not overlap, so at most one
// applies at any binding.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/expr.h"
#include "core/op.h"

namespace teeny {

inline constexpr int kTuningFormatVersion = 1;

// One variant as `tune` measured it: the median GPU time of its launches, or why it was rejected
// (failed the numerics check, failed to compile or to run).
struct TuningCandidate {
  std::string variant;
  double median_us = 0;
  int iterations = 0;
  std::string rejected;  // empty: measured
};

struct TuningRecord {
  std::string op;
  DType dtype = DType::kF32;
  std::vector<std::pair<std::string, DimRange>> dims;  // in the op's order
  std::string variant;                                 // the winner: a measured candidate
  std::string l2 = "cold";                             // "cold" (flushed before each launch) or "warm"
  std::vector<TuningCandidate> candidates;
};

struct TuningFile {
  std::string gpu;   // the device name, e.g. "NVIDIA H200"
  std::string arch;  // e.g. "sm_90"
  std::vector<TuningRecord> records;
  std::string source;  // where it came from, for inspect: a path, or "built-in <name>"
};

// Parses a tuning file's text. Throws Error naming `document` and the JSON path of what is wrong
// ("t.json: records[2].dims.M: expected an integer >= 1 or [lo, hi], found \"x\""), and for two
// records of one op and dtype that overlap ("records[3] overlaps records[1] (linear bf16 M=8,
// N=4096, K=4096)").
TuningFile parse_tuning(const std::string& text, const std::string& document);
TuningFile load_tuning(const std::string& path);
// The file's JSON text (records in order; ranges of one value written as the value).
std::string tuning_json(const TuningFile& file);
// Writes atomically (core/atomic_file.h): a reader never sees half a file.
void write_tuning(const TuningFile& file, const std::string& path);

// Replaces the record of the same op, dtype and dims, or appends it. Throws Error where it would
// overlap another record without being equal to it.
void upsert_record(TuningFile& file, TuningRecord record);

// The record with exactly this op, dtype and dims (every range a single value), if any.
const TuningRecord* find_record(const TuningFile& file, const std::string& op, DType dtype,
                                const std::vector<std::pair<std::string, int64_t>>& dims);

// A record that applies to a node, and where: `when` is 1 when all of the node's dims are
// constant, else the product of the le() conditions of its symbolic dims' ranges.
struct TunedChoice {
  size_t record = 0;  // index into file.records
  Expr when;
};
// The records of `op` and `dtype` whose dims are `dims`' names (any order) and whose ranges
// contain `dims`' constant values, in file order; symbolic dims make the `when`.
std::vector<TunedChoice> tuned_choices(const TuningFile& file, const std::string& op, DType dtype,
                                       const std::vector<std::pair<std::string, Expr>>& dims);

// The tuning file built into teeny for `arch` (tuning/*.json in the source tree, embedded at build
// time), or nullopt where none is.
std::optional<TuningFile> builtin_tuning(const std::string& arch);

// "M=8, N=4096, K=4096" ("M=1..16" for a range).
std::string dims_text(const std::vector<std::pair<std::string, DimRange>>& dims);

}  // namespace teeny
