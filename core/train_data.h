// Training batches (docs/training.md, "Data order"): the same batches in the same order on every
// machine, from a seed, so that a resumed run continues the order it left and a Python twin can
// feed PyTorch exactly what teeny trained on.
//
// The generator is SplitMix64 with a stream picked by (seed, stream), all arithmetic mod 2^64:
//   mix(z):  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
//            return z ^ (z >> 31)
//   start:   state = seed ^ mix(stream)   (mix(0) = 0: stream 0 is plain SplitMix64 from `seed`)
//   next():  state += 0x9E3779B97F4A7C15; return mix(state)
// mix scatters the streams' starts over SplitMix64's one cycle; `seed ^ stream * 0x9E37...` would
// not: from seed 0, stream k + 1 would be stream k without its first draw.
//
// Array data (N samples, batch size B): epoch e draws from stream e a Fisher-Yates shuffle of
// 0..N-1, from the last index down: for i = N-1 ... 1: j = next() % (i + 1); swap(p[i], p[j]).
// Batch b of the epoch is samples p[b*B], ..., p[b*B + B-1]; the N % B samples left at the end of
// each epoch's order are dropped, as PyTorch's DataLoader(drop_last=True) does.
//
// Token data (T tokens, sequence length S, batch size B): the batch of step s draws from stream s,
// for rows r = 0 ... B-1 in order, the offset o = next() % (T - S); row r's inputs are tokens
// [o, o+S) and its targets tokens [o+1, o+S+1), the inputs shifted by one.
//
// In Python:
//   M = (1 << 64) - 1
//   def mix(z):
//       z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
//       z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
//       return z ^ (z >> 31)
//   class SplitMix64:
//       def __init__(self, seed, stream): self.state = seed ^ mix(stream)
//       def next(self):
//           self.state = (self.state + 0x9E3779B97F4A7C15) & M
//           return mix(self.state)
//   def epoch_order(n, seed, epoch):
//       g, p = SplitMix64(seed, epoch), list(range(n))
//       for i in range(n - 1, 0, -1):
//           j = g.next() % (i + 1)
//           p[i], p[j] = p[j], p[i]
//       return p
//   def token_offsets(T, S, B, seed, step):
//       g = SplitMix64(seed, step)
//       return [g.next() % (T - S) for _ in range(B)]
#pragma once

#include <cstdint>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/op.h"

namespace teeny {

class InputFile;

class SplitMix64 {
 public:
  SplitMix64(uint64_t seed, uint64_t stream);
  uint64_t next();

 private:
  uint64_t state_;
};

// Epoch `epoch`'s order of samples 0..n-1 (the Fisher-Yates shuffle above).
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch);

// epoch_order's orders, the next epochs' shuffled on a worker thread while the current one is
// read: a shuffle costs about 10 ns a sample, which a training step at a large batch would
// otherwise spend on the host with the GPU idle. Each worker task shuffles at least 65536
// samples' worth of epochs, so that starting it costs little per step however small the data.
class EpochOrders {
 public:
  EpochOrders(int64_t samples, uint64_t seed);
  ~EpochOrders();
  EpochOrders(const EpochOrders&) = delete;
  EpochOrders& operator=(const EpochOrders&) = delete;
  const std::vector<int64_t>& of(int64_t epoch);  // valid until the next call

 private:
  bool ahead_holds(int64_t epoch) const;
  int64_t samples_;
  uint64_t seed_;
  int64_t current_epoch_ = -1;
  std::vector<int64_t> current_;
  int64_t ready_first_ = 0;  // ready_[i] is the order of epoch ready_first_ + i
  std::deque<std::vector<int64_t>> ready_;
  int64_t ahead_first_ = 0, ahead_count_ = 0;  // what the worker is shuffling
  std::future<std::vector<std::vector<int64_t>>> ahead_;
};

// One graph input of a batch as rows copied out of a flat source array: batch row r is elements
// [starts[r], starts[r] + row) of BatchSource::sources()[source]. The same description gathers a
// batch on the host (BatchSource::batch) or on the GPU from a copy of the sources held there.
struct RowGather {
  std::string input;           // the graph input
  std::vector<int64_t> shape;  // the batch tensor's: [starts.size(), ...]
  size_t source = 0;
  int64_t row = 0;  // elements
  std::vector<int64_t> starts;
};

// Batches by step number: next_batch() gives the batch of step() (next_rows() describes it), then
// moves on; seek(s) makes the next batch the one step s would have given, so a run resumed from a
// checkpoint of s steps continues the order it left.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  std::map<std::string, HostTensor> next_batch();  // by graph input name
  std::vector<RowGather> next_rows();
  void seek(int64_t step);
  int64_t step() const { return step_; }
  int64_t epoch() const { return step_ / batches_per_epoch(); }
  virtual int64_t batches_per_epoch() const = 0;
  virtual int64_t batch_size() const = 0;
  virtual int64_t tokens_per_sample() const { return 0; }  // token data: the sequence length

  virtual std::vector<RowGather> rows(int64_t step) = 0;
  // The arrays rows() gathers from, whole in memory and rounded to their inputs' dtypes; empty
  // when they are read a batch at a time (a .bin token file, which may exceed memory).
  virtual const std::vector<HostTensor>& sources() const = 0;
  // The batch of `step` by graph input name, gathered on the host.
  std::map<std::string, HostTensor> batch(int64_t step);

 protected:
  // batch() where sources() is empty.
  virtual std::map<std::string, HostTensor> read_batch(int64_t step);

 private:
  int64_t step_ = 0;
};

// A graph input fed from a .npy file of samples along its first dim.
struct ArrayInput {
  std::string name;  // the graph input
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // the input's bound shape; its first dim is the batch size
  std::string path;            // .npy
};

// Shuffled batches of samples from one .npy file per input, all of N samples. Throws Error naming
// the file and the input: a shape that is not [N, <the input's shape after its first dim>], a
// dtype of the other kind (integer files for i32 inputs, float files for float ones), different N
// across files, N below the batch size.
class ArrayBatches final : public BatchSource {
 public:
  ArrayBatches(const std::vector<ArrayInput>& inputs, uint64_t seed);
  int64_t samples() const { return samples_; }
  int64_t batches_per_epoch() const override { return samples_ / batch_; }
  int64_t batch_size() const override { return batch_; }
  std::vector<RowGather> rows(int64_t step) override;
  const std::vector<HostTensor>& sources() const override { return data_; }

 private:
  std::vector<ArrayInput> inputs_;
  std::vector<HostTensor> data_;  // per input, rounded to its dtype
  uint64_t seed_;
  int64_t samples_ = 0, batch_ = 0;
  std::unique_ptr<EpochOrders> orders_;  // made once samples_ is known
};

// Token ids for a language model: a .npy of a 1-D integer array, or a .bin of little-endian
// uint16 ids (nanoGPT's format), chosen by the extension.
struct TokenData {
  std::string path;
  std::string input, target;  // graph inputs, both i32 [batch, sequence]
  int64_t batch = 1, sequence = 1;
  int64_t vocab = 0;  // every id must be below it; 0: unchecked
};

// Windows of token data (the offsets above). The file is checked once when opened (fewer than
// sequence + 1 tokens, an id out of range naming its position); a .bin file is then read window
// by window, never held whole.
class TokenBatches final : public BatchSource {
 public:
  TokenBatches(const TokenData& data, uint64_t seed);
  ~TokenBatches() override;
  int64_t tokens() const { return tokens_; }
  // A pass's worth of tokens (tokens / (batch * sequence), at least 1), for progress only: windows
  // are drawn with replacement, so an epoch need not see every token.
  int64_t batches_per_epoch() const override;
  int64_t batch_size() const override { return data_.batch; }
  int64_t tokens_per_sample() const override { return data_.sequence; }
  // Both inputs gather from the one token array: the targets' rows start a token later.
  std::vector<RowGather> rows(int64_t step) override;
  const std::vector<HostTensor>& sources() const override { return ids_; }

 private:
  std::map<std::string, HostTensor> read_batch(int64_t step) override;

  TokenData data_;
  uint64_t seed_;
  int64_t tokens_ = 0;
  std::vector<HostTensor> ids_;     // a .npy file's ids: one i32 [T] array
  std::unique_ptr<InputFile> bin_;  // a .bin file
};

}  // namespace teeny
