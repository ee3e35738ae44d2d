// Tuning files (core/tuning.h): the exact text written, round trips, every kind of malformed file
// rejected with an exact message, and which records apply to a node's constant or symbolic dims.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/builtin_tuning.h"
#include "core/tuning.h"
#include "tests/error_test_util.h"
#include "tests/file_test_util.h"

namespace teeny {
namespace {

using Dims = std::vector<std::pair<std::string, DimRange>>;

TuningRecord record(const std::string& op, DType dtype, Dims dims, const std::string& variant) {
  TuningRecord r;
  r.op = op;
  r.dtype = dtype;
  r.dims = std::move(dims);
  r.variant = variant;
  return r;
}

TuningRecord linear(DimRange m, const std::string& variant) {
  return record("linear", DType::kBF16, {{"M", m}, {"N", {4096, 4096}}, {"K", {4096, 4096}}}, variant);
}

TuningFile h200(std::vector<TuningRecord> records) {
  TuningFile file;
  file.gpu = "NVIDIA H200";
  file.arch = "sm_90";
  file.records = std::move(records);
  return file;
}

void expect_same(const TuningFile& a, const TuningFile& b) {
  EXPECT_EQ(a.gpu, b.gpu);
  EXPECT_EQ(a.arch, b.arch);
  ASSERT_EQ(a.records.size(), b.records.size());
  for (size_t i = 0; i < a.records.size(); ++i) {
    const TuningRecord &x = a.records[i], &y = b.records[i];
    EXPECT_EQ(x.op, y.op) << i;
    EXPECT_EQ(x.dtype, y.dtype) << i;
    EXPECT_EQ(x.dims, y.dims) << i;
    EXPECT_EQ(x.variant, y.variant) << i;
    EXPECT_EQ(x.l2, y.l2) << i;
    ASSERT_EQ(x.candidates.size(), y.candidates.size()) << i;
    for (size_t c = 0; c < x.candidates.size(); ++c) {
      EXPECT_EQ(x.candidates[c].variant, y.candidates[c].variant);
      EXPECT_EQ(x.candidates[c].median_us, y.candidates[c].median_us);
      EXPECT_EQ(x.candidates[c].iterations, y.candidates[c].iterations);
      EXPECT_EQ(x.candidates[c].rejected, y.candidates[c].rejected);
    }
  }
}

// A file whose records are `records` (JSON text of the array's items).
std::string file_text(const std::string& records) {
  return R"({"format": "teeny-tuning", "version": 1, "gpu": "NVIDIA H200", "arch": "sm_90", "records": [)" + records +
         "]}";
}

const char* const kRecord = R"({"op": "linear", "dtype": "bf16", "dims": {"M": 8, "N": 4096, "K": 4096},
                                "variant": "gemv_m8"})";

std::string error_of(const std::string& text) {
  return testing::message([&] { parse_tuning(text, "t.json"); });
}

TEST(Tuning, WritesKeysInAFixedOrderAndASingleValueRangeAsItsValue) {
  TuningRecord r = linear({8, 8}, "gemv_m8");
  r.dims[2].second = {1, 4096};
  r.l2 = "warm";
  r.candidates = {{"gemv_m8", 21.5, 40, ""}, {"wgmma", 0, 0, "numerics: row 3 differs"}};
  EXPECT_EQ(tuning_json(h200({r})), R"({
  "format": "teeny-tuning",
  "version": 1,
  "gpu": "NVIDIA H200",
  "arch": "sm_90",
  "records": [
    {
      "op": "linear",
      "dtype": "bf16",
      "dims": {
        "M": 8,
        "N": 4096,
        "K": [
          1,
          4096
        ]
      },
      "variant": "gemv_m8",
      "l2": "warm",
      "candidates": [
        {
          "variant": "gemv_m8",
          "median_us": 21.5,
          "iterations": 40
        },
        {
          "variant": "wgmma",
          "rejected": "numerics: row 3 differs"
        }
      ]
    }
  ]
}
)");
}

TEST(Tuning, RoundTripsEveryField) {
  TuningRecord small = linear({1, 8}, "gemv_m8");
  small.candidates = {{"gemv_m8", 21.4, 40, ""},
                      {"64x64x32", 25.0 / 3, 7, ""},
                      {"wgmma", 0, 0, "compile: too much shared memory"},
                      {"128x128", 30.25, 12, "numerics: max abs error 0.5"}};
  TuningRecord large = linear({9, 1 << 20}, "64x64x32");
  large.l2 = "warm";
  TuningRecord other = record("rms_norm", DType::kF16, {{"rows", {3, 3}}, {"cols", {1, 7}}}, "two_pass");
  const TuningFile file = h200({small, large, other});
  const TuningFile parsed = parse_tuning(tuning_json(file), "t.json");
  expect_same(parsed, file);
  EXPECT_EQ(parsed.source, "t.json");
  EXPECT_EQ(parsed.records[2].dims[0].first, "rows");  // the file's order, not sorted
}

TEST(Tuning, ReadsDefaultsOfOptionalKeys) {
  const TuningFile file = parse_tuning(file_text(kRecord), "t.json");
  ASSERT_EQ(file.records.size(), 1u);
  EXPECT_EQ(file.records[0].l2, "cold");
  EXPECT_TRUE(file.records[0].candidates.empty());
  EXPECT_EQ(file.records[0].dims, (Dims{{"M", {8, 8}}, {"N", {4096, 4096}}, {"K", {4096, 4096}}}));
}

TEST(Tuning, RejectsMalformedFilesWithTheirPath) {
  EXPECT_EQ(error_of(R"({"format": )"),
            "t.json is not valid JSON: parse error at line 1, column 12: syntax error while parsing value - unexpected "
            "end of input; expected '[', "
            "'{', or a literal");
  EXPECT_EQ(error_of(R"({"format": "teeny-profile", "version": 1})"),
            R"(t.json: format: expected "teeny-tuning", found "teeny-profile")");
  EXPECT_EQ(error_of(R"({"format": "teeny-tuning", "version": 2})"),
            "t.json: version: the file is version 2, written by a newer teeny; teeny " TEENY_VERSION
            " reads version 1");
  EXPECT_EQ(error_of(R"({"format": "teeny-tuning", "version": 1, "gpu": "H200", "arch": "sm_90", "record": []})"),
            "t.json: top level: unknown key 'record' (did you mean 'records'?)");
  EXPECT_EQ(error_of(R"({"format": "teeny-tuning", "version": 1, "gpu": "", "arch": "sm_90", "records": []})"),
            "t.json: gpu: expected a non-empty string");
  EXPECT_EQ(error_of(R"({"format": "teeny-tuning", "version": 1, "gpu": "H200", "arch": "90", "records": []})"),
            R"(t.json: arch: expected an arch like "sm_90", found "90")");
}

TEST(Tuning, RejectsMalformedRecordsWithTheirPath) {
  const std::string good = std::string(kRecord) + ", ";
  EXPECT_EQ(error_of(file_text(good + R"({"op": "linear", "dtype": "fp32", "dims": {"M": 1}, "variant": "v"})")),
            "t.json: records[1].dtype: unknown dtype 'fp32' (did you mean 'f32'?); the dtypes are f32, f16, bf16, i32");
  EXPECT_EQ(error_of(file_text(R"({"op": "linear", "dtype": "f32", "dims": {"M": 1, "N": [5, 2]}, "variant": "v"})")),
            "t.json: records[0].dims.N: expected [lo, hi] with 1 <= lo <= hi, found [5,2]");
  EXPECT_EQ(error_of(file_text(R"({"op": "linear", "dtype": "f32", "dims": {"M": 0}, "variant": "v"})")),
            "t.json: records[0].dims.M: expected an integer >= 1 or [lo, hi], found 0");
  EXPECT_EQ(error_of(file_text(R"({"op": "linear", "dtype": "f32", "dims": {"M": "x"}, "variant": "v"})")),
            R"(t.json: records[0].dims.M: expected an integer >= 1 or [lo, hi], found "x")");
  EXPECT_EQ(error_of(file_text(R"({"op": "linear", "dtype": "f32", "dims": {}, "variant": "v"})")),
            "t.json: records[0].dims: expected at least one dim");
  EXPECT_EQ(error_of(file_text(R"({"op": "linear", "dtype": "f32", "dims": {"2M": 1}, "variant": "v"})")),
            "t.json: records[0].dims: '2M' is not a dim name");
  EXPECT_EQ(error_of(file_text(R"({"op": "linear", "dtype": "f32", "dims": {"M": 1}, "varient": "v"})")),
            "t.json: records[0]: unknown key 'varient' (did you mean 'variant'?)");
  EXPECT_EQ(error_of(file_text(R"({"op": "linear", "dtype": "f32", "dims": {"M": 1}})")),
            "t.json: records[0]: missing key 'variant'");
  EXPECT_EQ(error_of(file_text(R"({"op": "", "dtype": "f32", "dims": {"M": 1}, "variant": "v"})")),
            "t.json: records[0].op: expected a non-empty string");
  EXPECT_EQ(error_of(file_text(R"({"op": "linear", "dtype": "f32", "dims": {"M": 1}, "variant": "v", "l2": "hot"})")),
            R"(t.json: records[0].l2: expected "cold" or "warm", found 'hot')");
}

TEST(Tuning, RejectsCandidatesThatDoNotSupportTheWinner) {
  const std::string head = R"({"op": "linear", "dtype": "f32", "dims": {"M": 1}, "variant": "a", "candidates": )";
  EXPECT_EQ(error_of(file_text(head + R"([{"variant": "b", "median_us": 2, "iterations": 5}]})")),
            "t.json: records[0].variant: 'a' is not among the candidates; the measured ones are b");
  EXPECT_EQ(error_of(file_text(head + R"([{"variant": "a", "rejected": "numerics: NaN"}]})")),
            "t.json: records[0].variant: 'a' is a rejected candidate (numerics: NaN)");
  EXPECT_EQ(error_of(file_text(head + R"([{"variant": "a", "median_us": -1, "iterations": 5}]})")),
            "t.json: records[0].candidates[0].median_us: expected a number >= 0, found -1");
  EXPECT_EQ(error_of(file_text(head + R"([{"variant": "a", "median_us": "inf", "iterations": 5}]})")),
            R"(t.json: records[0].candidates[0].median_us: expected a number >= 0, found "inf")");
  EXPECT_EQ(error_of(file_text(head + R"([{"variant": "a", "median_us": 1}]})")),
            "t.json: records[0].candidates[0]: missing key 'iterations'");
  EXPECT_EQ(error_of(file_text(head + R"([{"variant": "a", "median_us": 1, "iterations": 2, "rejectd": "x"}]})")),
            "t.json: records[0].candidates[0]: unknown key 'rejectd' (did you mean 'rejected'?)");
  EXPECT_EQ(error_of(file_text(head + R"([{"variant": "a", "median_us": 1, "iterations": 2},
                                         {"variant": "a", "median_us": 3, "iterations": 2}]})")),
            "t.json: records[0].candidates[1].variant: 'a' is listed twice");
}

TEST(Tuning, RejectsOverlappingRecordsOfOneOpDtypeAndDimNames) {
  const std::string small = R"({"op": "linear", "dtype": "bf16", "dims": {"M": [1, 8], "N": 4096, "K": 4096},
                                "variant": "a"})";
  const std::string next = R"({"op": "linear", "dtype": "bf16", "dims": {"M": [9, 16], "N": 4096, "K": 4096},
                               "variant": "b"})";
  const std::string f16 = R"({"op": "linear", "dtype": "f16", "dims": {"M": 4, "N": 4096, "K": 4096},
                              "variant": "c"})";
  const std::string other_names = R"({"op": "linear", "dtype": "bf16", "dims": {"M": 4, "N": 4096},
                                      "variant": "d"})";
  const std::string other_n = R"({"op": "linear", "dtype": "bf16", "dims": {"M": 4, "N": 1024, "K": 4096},
                                  "variant": "e"})";
  EXPECT_EQ(parse_tuning(file_text(small + "," + next + "," + f16 + "," + other_names + "," + other_n), "t.json")
                .records.size(),
            5u);
  const std::string inside = R"({"op": "linear", "dtype": "bf16", "dims": {"K": 4096, "M": 8, "N": 4096},
                                 "variant": "f"})";
  EXPECT_EQ(error_of(file_text(small + "," + next + "," + f16 + "," + inside)),
            "t.json: records[3] overlaps records[0] (linear bf16 M=1..8, N=4096, K=4096)");
  EXPECT_EQ(error_of(file_text(small + "," + small)),
            "t.json: records[1] overlaps records[0] (linear bf16 M=1..8, N=4096, K=4096)");
}

TEST(Tuning, UpsertReplacesTheSameDimsAppendsNewOnesAndRefusesOverlaps) {
  TuningFile file = h200({linear({8, 8}, "gemv_m8")});
  upsert_record(file, linear({8, 8}, "64x64x32"));
  ASSERT_EQ(file.records.size(), 1u);
  EXPECT_EQ(file.records[0].variant, "64x64x32");

  // The same dims named in another order are the same record; the new one replaces it whole.
  upsert_record(file, record("linear", DType::kBF16, {{"K", {4096, 4096}}, {"N", {4096, 4096}}, {"M", {8, 8}}}, "v"));
  ASSERT_EQ(file.records.size(), 1u);
  EXPECT_EQ(file.records[0].variant, "v");
  EXPECT_EQ(file.records[0].dims[0].first, "K");

  upsert_record(file, linear({9, 16}, "b"));
  upsert_record(file, record("linear", DType::kF32, {{"M", {8, 8}}, {"N", {4096, 4096}}, {"K", {4096, 4096}}}, "c"));
  ASSERT_EQ(file.records.size(), 3u);
  EXPECT_EQ(file.records[1].variant, "b");
  EXPECT_EQ(testing::message([&] {
              upsert_record(file, linear({1, 9}, "d"));
            }),
            "cannot add the tuning record linear bf16 M=1..9, N=4096, K=4096: it overlaps records[0] "
            "(linear bf16 K=4096, N=4096, M=8)");
  EXPECT_EQ(file.records.size(), 3u);
}

TEST(Tuning, FindRecordMatchesExactSingleValues) {
  const TuningFile file = h200({linear({8, 8}, "gemv_m8"), linear({9, 64}, "tiles")});
  const TuningRecord* found = find_record(file, "linear", DType::kBF16, {{"N", 4096}, {"M", 8}, {"K", 4096}});
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->variant, "gemv_m8");
  EXPECT_EQ(find_record(file, "linear", DType::kBF16, {{"M", 20}, {"N", 4096}, {"K", 4096}}), nullptr);  // a range
  EXPECT_EQ(find_record(file, "linear", DType::kF16, {{"M", 8}, {"N", 4096}, {"K", 4096}}), nullptr);
  EXPECT_EQ(find_record(file, "linear", DType::kBF16, {{"M", 8}, {"N", 4096}}), nullptr);
  EXPECT_EQ(find_record(file, "matmul", DType::kBF16, {{"M", 8}, {"N", 4096}, {"K", 4096}}), nullptr);
}

std::vector<size_t> records_of(const std::vector<TunedChoice>& choices) {
  std::vector<size_t> out;
  for (const TunedChoice& choice : choices) out.push_back(choice.record);
  return out;
}

TEST(Tuning, ChoicesForConstantDimsNeedEveryValueInRange) {
  const TuningFile file = h200({linear({1, 8}, "gemv"), linear({9, 64}, "tiles"),
                                record("linear", DType::kBF16, {{"M", {1, 8}}, {"N", {4096, 4096}}}, "two_dims")});
  auto choices = [&](int64_t m, int64_t n) {
    return tuned_choices(file, "linear", DType::kBF16, {{"K", Expr(4096)}, {"N", Expr(n)}, {"M", Expr(m)}});
  };
  EXPECT_EQ(records_of(choices(1, 4096)), std::vector<size_t>{0});
  EXPECT_EQ(records_of(choices(8, 4096)), std::vector<size_t>{0});
  EXPECT_EQ(records_of(choices(9, 4096)), std::vector<size_t>{1});
  EXPECT_EQ(records_of(choices(64, 4096)), std::vector<size_t>{1});
  EXPECT_TRUE(choices(65, 4096).empty());
  EXPECT_TRUE(choices(8, 4095).empty());
  EXPECT_EQ(choices(8, 4096)[0].when, Expr(1));
  // Names must match as a set: a node with only M and N has record 2 only, one with M, N, K and
  // another dim none.
  EXPECT_EQ(records_of(tuned_choices(file, "linear", DType::kBF16, {{"N", Expr(4096)}, {"M", Expr(3)}})),
            std::vector<size_t>{2});
  EXPECT_TRUE(tuned_choices(file, "linear", DType::kBF16,
                            {{"M", Expr(3)}, {"N", Expr(4096)}, {"K", Expr(4096)}, {"G", Expr(1)}})
                  .empty());
  EXPECT_TRUE(
      tuned_choices(file, "linear", DType::kF32, {{"M", Expr(3)}, {"N", Expr(4096)}, {"K", Expr(4096)}}).empty());
}

TEST(Tuning, ChoicesForASymbolicDimAreOneExactlyInsideTheirRange) {
  const TuningFile file =
      h200({linear({1, 8}, "gemv"), linear({9, 64}, "tiles"), linear({200, 300}, "big"), linear({5, 5}, "wrong_n")});
  TuningFile with_other_n = file;
  with_other_n.records[3].dims[1].second = {1024, 1024};
  const Expr m = Expr::dim("B") * Expr::dim("S");
  const std::vector<TunedChoice> choices =
      tuned_choices(with_other_n, "linear", DType::kBF16, {{"M", m}, {"N", Expr(4096)}, {"K", Expr(4096)}});
  ASSERT_EQ(records_of(choices), (std::vector<size_t>{0, 1, 2}));
  const std::vector<std::pair<int64_t, int64_t>> ranges = {{1, 8}, {9, 64}, {200, 300}};
  for (int64_t b = 1; b <= 20; ++b) {
    for (int64_t s : {1, 2, 3, 7, 8, 9, 15, 16, 17}) {
      for (size_t i = 0; i < choices.size(); ++i) {
        const bool inside = ranges[i].first <= b * s && b * s <= ranges[i].second;
        EXPECT_EQ(choices[i].when.eval({{"B", b}, {"S", s}}), inside ? 1 : 0) << "B=" << b << " S=" << s << " " << i;
      }
    }
  }
  // Binding B alone leaves a condition on S: with B=4, record 1 (M 9..64) holds for S in 3..16.
  const Expr when_b4 = choices[1].when.substitute({{"B", 4}});
  EXPECT_EQ(when_b4.dims(), std::vector<std::string>{"S"});
  EXPECT_EQ(when_b4.eval({{"S", 2}}), 0);
  EXPECT_EQ(when_b4.eval({{"S", 3}}), 1);
  EXPECT_EQ(when_b4.eval({{"S", 16}}), 1);
  EXPECT_EQ(when_b4.eval({{"S", 17}}), 0);
}

TEST(Tuning, WritesIntoANewDirectoryAndLoadsBack) {
  testing::ScratchDir dir;
  TuningRecord r = linear({1, 8}, "gemv");
  r.candidates = {{"gemv", 3.25, 10, ""}, {"tiles", 4.5, 10, ""}};
  const TuningFile file = h200({r, linear({9, 64}, "tiles")});
  const std::string path = dir.str("a/b/h200.json");
  write_tuning(file, path);
  EXPECT_EQ(testing::slurp(path), tuning_json(file));
  const TuningFile loaded = load_tuning(path);
  expect_same(loaded, file);
  EXPECT_EQ(loaded.source, path);
  // Written again over the old one.
  write_tuning(h200({}), path);
  EXPECT_TRUE(load_tuning(path).records.empty());
}

TEST(Tuning, WriteFailsClearlyWhereTheDirectoryCannotBeMade) {
  testing::ScratchDir dir;
  testing::spit(dir.path() / "file", "x");
  const std::string path = dir.str("file/sub/t.json");
  EXPECT_EQ(testing::message([&] { write_tuning(h200({}), path); }), "cannot write tuning file '" + path +
                                                                         "': cannot create the directory '" +
                                                                         dir.str("file/sub") + "': Not a directory");
}

TEST(Tuning, LoadNamesAMissingFile) {
  EXPECT_EQ(testing::message([] { load_tuning("/nonexistent/t.json"); }),
            "cannot read tuning file '/nonexistent/t.json': No such file or directory");
}

TEST(Tuning, BuiltinFilesAreTheSourceTreesAndParse) {
  const std::optional<TuningFile> h200_file = builtin_tuning("sm_90");
  ASSERT_TRUE(h200_file.has_value());
  EXPECT_EQ(h200_file->gpu, "NVIDIA H200");
  EXPECT_EQ(h200_file->arch, "sm_90");
  EXPECT_EQ(h200_file->source, "built-in tuning/nvidia-h200.json");
  EXPECT_FALSE(builtin_tuning("sm_80").has_value());

  size_t on_disk = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(TEENY_SOURCE_DIR) + "/tuning")) {
    if (entry.path().extension() != ".json") continue;
    ++on_disk;
    bool embedded = false;
    for (const EmbeddedFile& file : embedded_tuning_files()) {
      if (file.name != entry.path().filename().string()) continue;
      embedded = true;
      EXPECT_EQ(file.text, testing::slurp(entry.path())) << file.name;
    }
    EXPECT_TRUE(embedded) << entry.path();
  }
  EXPECT_EQ(embedded_tuning_files().size(), on_disk);
}

}  // namespace
}  // namespace teeny
