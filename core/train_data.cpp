#include "core/train_data.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/expr.h"
#include "core/input_file.h"
#include "core/npy.h"

namespace teeny {

namespace {

uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const char* kind_of(DType dtype) { return is_float(dtype) ? "floats" : "integers"; }

// The batch size every input shares: their first dim.
int64_t common_batch_size(const std::vector<ArrayInput>& inputs) {
  if (inputs.empty()) throw Error("array data needs at least one input");
  for (const ArrayInput& input : inputs) {
    if (input.shape.empty() || input.shape[0] < 1) {
      throw Error(fmt::format("input '{}' {} has no batch dim: array data is batched along the first dim", input.name,
                              shape_text(input.shape)));
    }
    if (input.shape[0] != inputs[0].shape[0]) {
      throw Error(fmt::format("input '{}' has batch size {}, but input '{}' has {}: array data needs one batch size",
                              input.name, input.shape[0], inputs[0].name, inputs[0].shape[0]));
    }
  }
  return inputs[0].shape[0];
}

// The input's samples from its file, rounded to its dtype.
HostTensor read_samples(const ArrayInput& input) {
  HostTensor values = read_npy(input.path);
  const bool fits = values.shape.size() == input.shape.size() &&
                    std::equal(values.shape.begin() + 1, values.shape.end(), input.shape.begin() + 1);
  if (!fits) {
    std::vector<std::string> wanted{"N"};
    for (size_t d = 1; d < input.shape.size(); ++d) wanted.push_back(std::to_string(input.shape[d]));
    throw Error(fmt::format("{}: the file's shape {} does not fit input '{}' {}: it must be [{}] for N samples",
                            input.path, shape_text(values.shape), input.name, shape_text(input.shape),
                            fmt::join(wanted, ", ")));
  }
  if (is_float(values.dtype) != is_float(input.dtype)) {
    throw Error(fmt::format("{}: the file holds {}, but input '{}' is {}", input.path, kind_of(values.dtype),
                            input.name, dtype_name(input.dtype)));
  }
  for (double& value : values.data) value = round_to_dtype(value, input.dtype);
  values.dtype = input.dtype;
  return values;
}

}  // namespace

SplitMix64::SplitMix64(uint64_t seed, uint64_t stream) : state_(seed ^ mix(stream)) {}

uint64_t SplitMix64::next() { return mix(state_ += 0x9E3779B97F4A7C15ull); }

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  SplitMix64 draws(seed, static_cast<uint64_t>(epoch));
  for (int64_t i = n - 1; i >= 1; --i) {
    const auto j = static_cast<int64_t>(draws.next() % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

EpochOrders::EpochOrders(int64_t samples, uint64_t seed) : samples_(samples), seed_(seed) {}

EpochOrders::~EpochOrders() {
  if (ahead_.valid()) ahead_.wait();
}

bool EpochOrders::ahead_holds(int64_t epoch) const {
  return ahead_.valid() && epoch >= ahead_first_ && epoch < ahead_first_ + ahead_count_;
}

const std::vector<int64_t>& EpochOrders::of(int64_t epoch) {
  if (epoch == current_epoch_) return current_;
  if (ahead_holds(epoch)) {
    std::vector<std::vector<int64_t>> orders = ahead_.get();
    ready_.assign(std::make_move_iterator(orders.begin()), std::make_move_iterator(orders.end()));
    ready_first_ = ahead_first_;
  }
  // Orders before this epoch's are not needed again unless a seek goes back, which shuffles anew.
  while (!ready_.empty() && ready_first_ < epoch) {
    ready_.pop_front();
    ++ready_first_;
  }
  if (!ready_.empty() && ready_first_ == epoch) {
    current_ = std::move(ready_.front());
    ready_.pop_front();
    ++ready_first_;
  } else {
    ready_.clear();
    current_ = epoch_order(samples_, seed_, epoch);
  }
  current_epoch_ = epoch;
  const int64_t next = epoch + 1;
  if ((ready_.empty() || ready_first_ != next) && !ahead_holds(next)) {
    if (ahead_.valid()) ahead_.wait();  // shuffling epochs a seek skipped
    ahead_first_ = next;
    ahead_count_ = std::max<int64_t>(1, (65536 + samples_ - 1) / samples_);
    ahead_ = std::async(std::launch::async, [n = samples_, seed = seed_, first = next, count = ahead_count_] {
      std::vector<std::vector<int64_t>> orders;
      for (int64_t e = first; e < first + count; ++e) orders.push_back(epoch_order(n, seed, e));
      return orders;
    });
  }
  return current_;
}

std::map<std::string, HostTensor> BatchSource::next_batch() { return batch(step_++); }

std::vector<RowGather> BatchSource::next_rows() { return rows(step_++); }

std::map<std::string, HostTensor> BatchSource::batch(int64_t step) {
  if (sources().empty()) return read_batch(step);
  std::map<std::string, HostTensor> batch;
  for (const RowGather& gather : rows(step)) {
    const HostTensor& source = sources().at(gather.source);
    HostTensor tensor{source.dtype, gather.shape, {}};
    tensor.data.reserve(gather.starts.size() * static_cast<size_t>(gather.row));
    for (int64_t start : gather.starts) {
      const auto begin = source.data.begin() + static_cast<std::ptrdiff_t>(start);
      tensor.data.insert(tensor.data.end(), begin, begin + static_cast<std::ptrdiff_t>(gather.row));
    }
    batch[gather.input] = std::move(tensor);
  }
  return batch;
}

std::map<std::string, HostTensor> BatchSource::read_batch(int64_t) {
  throw Error("internal: a batch source without sources must read its batches");
}

void BatchSource::seek(int64_t step) {
  if (step < 0) throw Error(fmt::format("cannot continue from step {}: steps count from 0", step));
  step_ = step;
}

ArrayBatches::ArrayBatches(const std::vector<ArrayInput>& inputs, uint64_t seed)
    : inputs_(inputs), seed_(seed), batch_(common_batch_size(inputs)) {
  for (const ArrayInput& input : inputs_) {
    data_.push_back(read_samples(input));
    const int64_t samples = data_.back().shape[0];
    if (data_.size() == 1) {
      samples_ = samples;
    } else if (samples != samples_) {
      throw Error(
          fmt::format("{}: {} samples for input '{}', but {} has {} for input '{}': every input needs the "
                      "same number of samples (the first dim)",
                      input.path, samples, input.name, inputs_[0].path, samples_, inputs_[0].name));
    }
  }
  if (samples_ < batch_) {
    throw Error(fmt::format("{}: {} samples for input '{}', fewer than one batch of {} (partial batches are dropped)",
                            inputs_[0].path, samples_, inputs_[0].name, batch_));
  }
  orders_ = std::make_unique<EpochOrders>(samples_, seed_);
}

std::vector<RowGather> ArrayBatches::rows(int64_t step) {
  const std::vector<int64_t>& order = orders_->of(step / batches_per_epoch());
  const int64_t first = step % batches_per_epoch() * batch_;
  std::vector<RowGather> gathers;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    RowGather gather{inputs_[i].name, inputs_[i].shape, i, data_[i].numel() / samples_, {}};
    gather.starts.reserve(static_cast<size_t>(batch_));
    for (int64_t k = first; k < first + batch_; ++k) gather.starts.push_back(order[k] * gather.row);
    gathers.push_back(std::move(gather));
  }
  return gathers;
}

namespace {

void check_token(const TokenData& data, int64_t id, int64_t position) {
  if (id < 0) throw Error(fmt::format("{}: token {} at position {} is negative", data.path, id, position));
  if (data.vocab > 0 && id >= data.vocab) {
    throw Error(
        fmt::format("{}: token {} at position {} is not below the vocab size {}", data.path, id, position, data.vocab));
  }
}

void check_enough_tokens(const TokenData& data, int64_t tokens) {
  if (tokens < data.sequence + 1) {
    throw Error(
        fmt::format("{}: {} tokens, but a window of sequence length {} needs {} (its inputs and the token "
                    "after them)",
                    data.path, tokens, data.sequence, data.sequence + 1));
  }
}

HostTensor read_npy_ids(const TokenData& data) {
  HostTensor values = read_npy(data.path);
  if (values.shape.size() != 1) {
    throw Error(fmt::format("{}: token ids must be a 1-D array, but the file's shape is {}", data.path,
                            shape_text(values.shape)));
  }
  if (is_float(values.dtype))
    throw Error(fmt::format("{}: token ids must be integers, but the file holds floats", data.path));
  check_enough_tokens(data, values.shape[0]);
  for (size_t i = 0; i < values.data.size(); ++i)
    check_token(data, static_cast<int64_t>(values.data[i]), static_cast<int64_t>(i));
  values.dtype = DType::kI32;
  return values;
}

std::vector<int32_t> decode_uint16(const std::string& bytes) {
  std::vector<int32_t> ids(bytes.size() / 2);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<unsigned char>(bytes[2 * i]) | static_cast<unsigned char>(bytes[2 * i + 1]) << 8;
  }
  return ids;
}

// Every id of a .bin file against the vocab, a chunk at a time: the file may be far larger than
// memory.
void check_bin_ids(const TokenData& data, const InputFile& file) {
  constexpr int64_t kChunk = int64_t{1} << 20;
  const auto tokens = static_cast<int64_t>(file.size() / 2);
  for (int64_t start = 0; start < tokens; start += kChunk) {
    const int64_t count = std::min(kChunk, tokens - start);
    const std::vector<int32_t> ids = decode_uint16(file.read(static_cast<uint64_t>(start) * 2, count * 2));
    for (int64_t i = 0; i < count; ++i) check_token(data, ids[i], start + i);
  }
}

}  // namespace

TokenBatches::TokenBatches(const TokenData& data, uint64_t seed) : data_(data), seed_(seed) {
  if (ends_with(data.path, ".npy")) {
    ids_.push_back(read_npy_ids(data));
    tokens_ = ids_[0].numel();
  } else if (ends_with(data.path, ".bin")) {
    bin_ = std::make_unique<InputFile>(data.path, "token file");
    if (bin_->size() % 2 != 0) {
      throw Error(
          fmt::format("{}: a .bin token file holds little-endian uint16 ids, but its {} bytes are an odd "
                      "count",
                      data.path, bin_->size()));
    }
    tokens_ = static_cast<int64_t>(bin_->size() / 2);
    check_enough_tokens(data, tokens_);
    if (data.vocab > 0) check_bin_ids(data, *bin_);
  } else {
    throw Error(
        fmt::format("{}: token data is a .npy file (a 1-D integer array) or a .bin file (little-endian "
                    "uint16 ids, as nanoGPT writes)",
                    data.path));
  }
}

TokenBatches::~TokenBatches() = default;

int64_t TokenBatches::batches_per_epoch() const {
  return std::max<int64_t>(1, tokens_ / (data_.batch * data_.sequence));
}

std::vector<RowGather> TokenBatches::rows(int64_t step) {
  const int64_t batch = data_.batch, sequence = data_.sequence;
  RowGather inputs{data_.input, {batch, sequence}, 0, sequence, {}};
  SplitMix64 draws(seed_, static_cast<uint64_t>(step));
  for (int64_t row = 0; row < batch; ++row)
    inputs.starts.push_back(static_cast<int64_t>(draws.next() % static_cast<uint64_t>(tokens_ - sequence)));
  RowGather targets = inputs;
  targets.input = data_.target;
  for (int64_t& start : targets.starts) ++start;
  return {std::move(inputs), std::move(targets)};
}

// A .bin file's windows, read from the file: each row's tokens and the one after them.
std::map<std::string, HostTensor> TokenBatches::read_batch(int64_t step) {
  std::map<std::string, HostTensor> batch;
  for (const RowGather& gather : rows(step)) {
    HostTensor tensor{DType::kI32, gather.shape, {}};
    for (int64_t start : gather.starts) {
      const std::vector<int32_t> ids =
          decode_uint16(bin_->read(static_cast<uint64_t>(start) * 2, static_cast<uint64_t>(gather.row) * 2));
      tensor.data.insert(tensor.data.end(), ids.begin(), ids.end());
    }
    batch[gather.input] = std::move(tensor);
  }
  return batch;
}

}  // namespace teeny
