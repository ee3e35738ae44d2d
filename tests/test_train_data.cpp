// Training batches: the generator and the orders against values computed independently in Python,
// epochs covering every sample once, seek against stepping, token windows and their targets, and
// every data error with its exact message.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <string>

#include "core/device_batches.h"
#include "core/error.h"
#include "core/npy.h"
#include "core/train_data.h"
#include "tests/error_test_util.h"
#include "tests/file_test_util.h"

namespace teeny {
namespace {

// The expected values below were computed by the Python twin in core/train_data.h's comment
// (plain Python integers, nothing shared with the C++), e.g. epoch_order(10, 0, 0) and
// token_offsets(20, 4, 3, 7, step) for steps 0 and 1.
TEST(TrainDataGenerator, MatchesThePythonTwin) {
  SplitMix64 plain(0, 0);  // stream 0 is SplitMix64 itself: its published first output for seed 0
  EXPECT_EQ(plain.next(), 0xe220a8397b1dcdafull);
  EXPECT_EQ(plain.next(), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(plain.next(), 0x06c45d188009454full);
  EXPECT_EQ(epoch_order(10, 0, 0), (std::vector<int64_t>{6, 3, 2, 9, 8, 1, 4, 7, 0, 5}));
  EXPECT_EQ(epoch_order(10, 0, 1), (std::vector<int64_t>{2, 1, 8, 4, 9, 6, 5, 7, 3, 0}));
  EXPECT_EQ(epoch_order(10, 42, 0), (std::vector<int64_t>{0, 9, 5, 8, 6, 4, 7, 2, 1, 3}));
  EXPECT_EQ(epoch_order(1, 0, 0), std::vector<int64_t>{0});
}

class TrainDataTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_.str(name); }

  // n samples: x[i] = {i, i + 0.3} (f32 file) and labels[i] = 100 + i (i32 file).
  void write_samples(int64_t n) const {
    HostTensor x{DType::kF32, {n, 2}, {}}, labels{DType::kI32, {n}, {}};
    for (int64_t i = 0; i < n; ++i) {
      x.data.push_back(i);
      x.data.push_back(static_cast<float>(i + 0.3));
      labels.data.push_back(100 + i);
    }
    write_npy(path("x.npy"), x);
    write_npy(path("labels.npy"), labels);
  }
  std::vector<ArrayInput> inputs(int64_t batch, DType x_dtype = DType::kF32) const {
    return {{"x", x_dtype, {batch, 2}, path("x.npy")}, {"labels", DType::kI32, {batch}, path("labels.npy")}};
  }
  // The sample indices of a batch, from its labels.
  static std::vector<int64_t> samples_of(const std::map<std::string, HostTensor>& batch) {
    std::vector<int64_t> samples;
    for (double label : batch.at("labels").data) samples.push_back(static_cast<int64_t>(label) - 100);
    return samples;
  }
  std::string array_error(const std::vector<ArrayInput>& given) const {
    return testing::message([&] { ArrayBatches(given, 0); });
  }

  // Tokens 0..T-1 as a 1-D i32 .npy, and 300..300+T-1 as a .bin (ids above 255 test the high byte).
  std::string write_token_npy(int64_t tokens) const {
    HostTensor ids{DType::kI32, {tokens}, {}};
    for (int64_t i = 0; i < tokens; ++i) ids.data.push_back(i);
    write_npy(path("tokens.npy"), ids);
    return path("tokens.npy");
  }
  std::string write_token_bin(int64_t tokens) const {
    std::string bytes;
    for (int64_t i = 0; i < tokens; ++i) {
      bytes.push_back(static_cast<char>((300 + i) & 0xff));
      bytes.push_back(static_cast<char>((300 + i) >> 8));
    }
    testing::spit(path("tokens.bin"), bytes);
    return path("tokens.bin");
  }
  static TokenData tokens(const std::string& file, int64_t batch, int64_t sequence, int64_t vocab = 0) {
    return {file, "idx", "targets", batch, sequence, vocab};
  }
  static std::string token_error(const TokenData& data) {
    return testing::message([&] { TokenBatches(data, 0); });
  }

  testing::ScratchDir dir_;
};

TEST_F(TrainDataTest, ArrayBatchesFollowEachEpochsOrderAndDropTheRest) {
  write_samples(10);
  ArrayBatches batches(inputs(3), 0);
  EXPECT_EQ(batches.samples(), 10);
  EXPECT_EQ(batches.batches_per_epoch(), 3);
  // Epoch 0's order is 6 3 2 9 8 1 4 7 0 5 (above): three batches, sample 5 dropped.
  const auto first = batches.next_batch();
  EXPECT_EQ(first.at("x").shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(first.at("x").dtype, DType::kF32);
  EXPECT_EQ(first.at("x").data, (std::vector<double>{6, 6.3f, 3, 3.3f, 2, 2.3f}));
  EXPECT_EQ(first.at("labels").shape, std::vector<int64_t>{3});
  EXPECT_EQ(first.at("labels").dtype, DType::kI32);
  EXPECT_EQ(samples_of(first), (std::vector<int64_t>{6, 3, 2}));
  EXPECT_EQ(samples_of(batches.next_batch()), (std::vector<int64_t>{9, 8, 1}));
  EXPECT_EQ(samples_of(batches.next_batch()), (std::vector<int64_t>{4, 7, 0}));
  EXPECT_EQ(batches.step(), 3);
  EXPECT_EQ(batches.epoch(), 1);
  // Epoch 1's order is 2 1 8 4 9 6 5 7 3 0.
  EXPECT_EQ(samples_of(batches.next_batch()), (std::vector<int64_t>{2, 1, 8}));
}

// rows() is what the GPU gathers from its copy of sources(): each input's batch rows as spans of
// its source array (a sample's elements), in the order next_batch() returns them.
TEST_F(TrainDataTest, ArrayRowsNameEachSamplesSpanOfItsSource) {
  write_samples(10);
  ArrayBatches batches(inputs(3), 0);
  ASSERT_EQ(batches.sources().size(), 2u);
  EXPECT_EQ(batches.sources()[0].numel(), 20);  // x: 10 samples of 2
  const std::vector<RowGather> rows = batches.rows(1);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].input, "x");
  EXPECT_EQ(rows[0].source, 0u);
  EXPECT_EQ(rows[0].row, 2);
  EXPECT_EQ(rows[0].shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(rows[0].starts, (std::vector<int64_t>{18, 16, 2}));  // samples 9, 8, 1 (batch 1 above)
  EXPECT_EQ(rows[1].input, "labels");
  EXPECT_EQ(rows[1].source, 1u);
  EXPECT_EQ(rows[1].starts, (std::vector<int64_t>{9, 8, 1}));
  EXPECT_EQ(batches.step(), 0);  // describing a step does not move on
  EXPECT_EQ(batches.next_rows()[1].starts, (std::vector<int64_t>{6, 3, 2}));
  EXPECT_EQ(batches.step(), 1);
}

TEST_F(TrainDataTest, ValuesAreRoundedToTheInputsDtype) {
  write_samples(4);
  ArrayBatches batches(inputs(4, DType::kBF16), 0);
  const HostTensor x = batches.next_batch().at("x");
  EXPECT_EQ(x.dtype, DType::kBF16);
  for (size_t i = 1; i < x.data.size(); i += 2) {
    EXPECT_EQ(x.data[i], bf16_bits_to_float(float_to_bf16_bits(static_cast<float>(x.data[i - 1] + 0.3))));
  }
}

TEST_F(TrainDataTest, EveryEpochTakesEverySampleOnce) {
  write_samples(12);
  ArrayBatches batches(inputs(4), 5);
  std::vector<std::vector<int64_t>> orders;
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> order;
    for (int b = 0; b < 3; ++b) {
      EXPECT_EQ(batches.epoch(), epoch);
      const std::vector<int64_t> samples = samples_of(batches.next_batch());
      order.insert(order.end(), samples.begin(), samples.end());
    }
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> all(12);
    std::iota(all.begin(), all.end(), int64_t{0});
    EXPECT_EQ(sorted, all) << "epoch " << epoch;
    orders.push_back(order);
  }
  // epoch_order(12, 5, 0) and (12, 5, 1) in Python.
  EXPECT_EQ(orders[0], (std::vector<int64_t>{7, 1, 8, 10, 6, 9, 0, 5, 11, 3, 4, 2}));
  EXPECT_EQ(orders[1], (std::vector<int64_t>{7, 10, 1, 3, 2, 8, 9, 0, 5, 4, 6, 11}));
  EXPECT_NE(orders[1], orders[2]);
}

// The orders come from a worker thread ahead of their epochs, or from the caller after a seek;
// either way they are epoch_order's.
TEST(EpochOrdersTest, GiveEpochOrderInAnyOrderOfAsking) {
  EpochOrders small(7, 3);  // a worker task shuffles ceil(65536 / 7) = 9363 epochs
  for (int64_t epoch : {0, 1, 2, 2, 5, 3, 9363, 9364, 9400, 9401, 0, 20000, 1})
    EXPECT_EQ(small.of(epoch), epoch_order(7, 3, epoch)) << epoch;
  EpochOrders large(70000, 1);  // one epoch a task
  for (int64_t epoch : {0, 1, 2, 4, 3}) EXPECT_EQ(large.of(epoch), epoch_order(70000, 1, epoch)) << epoch;
}

TEST_F(TrainDataTest, SeekGivesWhatSteppingGives) {
  write_samples(10);
  ArrayBatches stepped(inputs(3), 9);
  std::vector<std::map<std::string, HostTensor>> batches;
  for (int i = 0; i < 8; ++i) batches.push_back(stepped.next_batch());
  ArrayBatches resumed(inputs(3), 9);
  for (int64_t step : {5, 2, 7, 0}) {
    resumed.seek(step);
    EXPECT_EQ(resumed.step(), step);
    EXPECT_EQ(resumed.epoch(), step / 3);
    EXPECT_EQ(resumed.next_batch().at("x").data, batches[step].at("x").data) << step;
    EXPECT_EQ(resumed.step(), step + 1);
  }
  EXPECT_EQ(testing::message([&] { resumed.seek(-1); }), "cannot continue from step -1: steps count from 0");

  const std::string file = write_token_npy(50);
  TokenBatches tokens_stepped(tokens(file, 2, 5), 3), tokens_resumed(tokens(file, 2, 5), 3);
  std::vector<std::vector<double>> windows;
  for (int i = 0; i < 6; ++i) windows.push_back(tokens_stepped.next_batch().at("idx").data);
  for (int64_t step : {4, 1, 5}) {
    tokens_resumed.seek(step);
    EXPECT_EQ(tokens_resumed.next_batch().at("idx").data, windows[step]) << step;
  }
}

TEST_F(TrainDataTest, ArrayErrorsHaveExactMessages) {
  write_samples(10);
  write_npy(path("few.npy"), HostTensor{DType::kI32, {9}, std::vector<double>(9, 0)});
  std::vector<ArrayInput> given = inputs(3);
  given[1].path = path("few.npy");
  EXPECT_EQ(array_error(given), path("few.npy") + ": 9 samples for input 'labels', but " + path("x.npy") +
                                    " has 10 for input 'x': every input needs the same number of samples (the first "
                                    "dim)");

  EXPECT_EQ(array_error(inputs(11)), path("x.npy") +
                                         ": 10 samples for input 'x', fewer than one batch of 11 (partial batches "
                                         "are dropped)");

  given = inputs(3);
  given[0].shape = {3, 4};
  EXPECT_EQ(
      array_error(given),
      path("x.npy") + ": the file's shape [10, 2] does not fit input 'x' [3, 4]: it must be [N, 4] for N samples");
  given[0].shape = {3, 2, 1};
  EXPECT_EQ(array_error(given), path("x.npy") +
                                    ": the file's shape [10, 2] does not fit input 'x' [3, 2, 1]: it must be [N, 2, "
                                    "1] for N samples");
  write_npy(path("scalar.npy"), HostTensor{DType::kF32, {}, {1}});
  given = inputs(3);
  given[0].path = path("scalar.npy");
  EXPECT_EQ(array_error(given), path("scalar.npy") +
                                    ": the file's shape [] does not fit input 'x' [3, 2]: it must be [N, 2] for N "
                                    "samples");

  given = inputs(3);
  given[1].dtype = DType::kF32;
  EXPECT_EQ(array_error(given), path("labels.npy") + ": the file holds integers, but input 'labels' is f32");
  given = inputs(3);
  given[0].dtype = DType::kI32;
  EXPECT_EQ(array_error(given), path("x.npy") + ": the file holds floats, but input 'x' is i32");

  given = inputs(3);
  given[1].shape = {4};
  EXPECT_EQ(array_error(given),
            "input 'labels' has batch size 4, but input 'x' has 3: array data needs one batch size");
  given[1].shape = {};
  EXPECT_EQ(array_error(given), "input 'labels' [] has no batch dim: array data is batched along the first dim");
}

// Row r of step s is the window at offset token_offsets(20, 4, 3, 7, s)[r]: [7, 12, 2] at step 0,
// [4, 11, 0] at step 1 (Python, above).
TEST_F(TrainDataTest, TokenWindowsAndTheirShiftedTargets) {
  for (const std::string& file : {write_token_npy(20), write_token_bin(20)}) {
    const double first_id = file == path("tokens.bin") ? 300 : 0;
    TokenBatches batches(tokens(file, 3, 4), 7);
    EXPECT_EQ(batches.tokens(), 20);
    EXPECT_EQ(batches.batches_per_epoch(), 1);  // 20 tokens / (3 * 4)
    for (const std::vector<int>& offsets : {std::vector<int>{7, 12, 2}, std::vector<int>{4, 11, 0}}) {
      const auto batch = batches.next_batch();
      ASSERT_EQ(batch.size(), 2u);
      const HostTensor &idx = batch.at("idx"), &targets = batch.at("targets");
      EXPECT_EQ(idx.dtype, DType::kI32);
      EXPECT_EQ(idx.shape, (std::vector<int64_t>{3, 4}));
      EXPECT_EQ(targets.shape, (std::vector<int64_t>{3, 4}));
      std::vector<double> want_idx, want_targets;
      for (int offset : offsets) {
        for (int i = 0; i < 4; ++i) {
          want_idx.push_back(first_id + offset + i);
          want_targets.push_back(first_id + offset + i + 1);
        }
      }
      EXPECT_EQ(idx.data, want_idx) << file;
      EXPECT_EQ(targets.data, want_targets) << file;
    }
  }
}

// Both token inputs gather from the one array of ids; a .bin file's ids stay on disk.
TEST_F(TrainDataTest, TokenRowsShareOneSourceWithTheTargetsOneLater) {
  TokenBatches batches(tokens(write_token_npy(20), 3, 4), 0);
  ASSERT_EQ(batches.sources().size(), 1u);
  EXPECT_EQ(batches.sources()[0].dtype, DType::kI32);
  EXPECT_EQ(batches.sources()[0].numel(), 20);
  const std::vector<RowGather> rows = batches.rows(2);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].input, "idx");
  EXPECT_EQ(rows[1].input, "targets");
  EXPECT_EQ(rows[0].shape, (std::vector<int64_t>{3, 4}));
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(rows[1].starts[r], rows[0].starts[r] + 1);
    EXPECT_LT(rows[0].starts[r], 16);  // below T - S
  }
  EXPECT_TRUE(TokenBatches(tokens(write_token_bin(20), 3, 4), 0).sources().empty());
}

TEST(DeviceBatches, GatherKernelsCompileForEachElementSize) {
  const std::string ptx = gather_rows_ptx(9, 0);
  EXPECT_NE(ptx.find(".entry teeny_gather_rows_2("), std::string::npos) << ptx;
  EXPECT_NE(ptx.find(".entry teeny_gather_rows_4("), std::string::npos) << ptx;
  EXPECT_NE(ptx.find(".u16"), std::string::npos);
}

// Offsets are below T - S: every window fits, and the last token is some window's last target.
TEST_F(TrainDataTest, TokenWindowsReachTheLastTokenAndNoFurther) {
  TokenBatches batches(tokens(write_token_npy(6), 1, 4), 0);
  std::set<double> first_tokens;
  for (int i = 0; i < 40; ++i) first_tokens.insert(batches.next_batch().at("idx").data[0]);
  EXPECT_EQ(first_tokens, (std::set<double>{0, 1}));
  TokenBatches exact(tokens(write_token_npy(5), 2, 4), 0);  // T = S + 1: the one window
  EXPECT_EQ(exact.next_batch().at("targets").data, (std::vector<double>{1, 2, 3, 4, 1, 2, 3, 4}));
}

TEST_F(TrainDataTest, TokenErrorsHaveExactMessages) {
  std::string f = write_token_npy(4);
  EXPECT_EQ(token_error(tokens(f, 2, 4)),
            f + ": 4 tokens, but a window of sequence length 4 needs 5 (its inputs and the token after them)");
  f = write_token_bin(4);
  EXPECT_EQ(token_error(tokens(f, 2, 4)),
            f + ": 4 tokens, but a window of sequence length 4 needs 5 (its inputs and the token after them)");

  f = write_token_npy(20);
  EXPECT_EQ(token_error(tokens(f, 2, 4, 12)), f + ": token 12 at position 12 is not below the vocab size 12");
  f = write_token_bin(20);
  EXPECT_EQ(token_error(tokens(f, 2, 4, 310)), f + ": token 310 at position 10 is not below the vocab size 310");
  EXPECT_EQ(TokenBatches(tokens(f, 2, 4, 320), 0).tokens(), 20);

  write_npy(path("neg.npy"), HostTensor{DType::kI32, {6}, {0, 1, 2, -1, 4, 5}});
  EXPECT_EQ(token_error(tokens(path("neg.npy"), 1, 2)), path("neg.npy") + ": token -1 at position 3 is negative");
  write_npy(path("2d.npy"), HostTensor{DType::kI32, {2, 3}, {0, 1, 2, 3, 4, 5}});
  EXPECT_EQ(token_error(tokens(path("2d.npy"), 1, 2)),
            path("2d.npy") + ": token ids must be a 1-D array, but the file's shape is [2, 3]");
  write_npy(path("float.npy"), HostTensor{DType::kF32, {6}, {0, 1, 2, 3, 4, 5}});
  EXPECT_EQ(token_error(tokens(path("float.npy"), 1, 2)),
            path("float.npy") + ": token ids must be integers, but the file holds floats");
  testing::spit(path("odd.bin"), "abcde");
  EXPECT_EQ(token_error(tokens(path("odd.bin"), 1, 2)),
            path("odd.bin") + ": a .bin token file holds little-endian uint16 ids, but its 5 bytes are an odd count");
  EXPECT_EQ(token_error(tokens(path("tokens.txt"), 1, 2)),
            path("tokens.txt") +
                ": token data is a .npy file (a 1-D integer array) or a .bin file (little-endian uint16 ids, as "
                "nanoGPT writes)");
}

}  // namespace
}  // namespace teeny
