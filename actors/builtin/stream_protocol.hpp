// The wire protocol between pre-processing shards and the trainer of a
// streamed `train` job (input = "stream"). Plain C++ over schemas/ (no CAF).
//
//   shard k (of S)                                 trainer
//   owns the steps j of every epoch with j % S == k
//      |-- batch (epoch e, step j) ----------------->|  buffered by (e, j)
//      |-- batch (e, j + S) ------------------------>|  at most `prefetch`
//      |   ... (one credit spent per batch)          |  per shard in flight
//      |<------------------------ credit (n = 1) ----|  when (e, j) is taken
//      |-- batch (e, j + 2S) ----------------------->|  for training
//
//      ...                                           |
//   shard t (when k's node is lost)                  |  steps of k after the last
//      |<------------- takeover (k, e', j', books) --|  one received
//      |-- batch of k (e', j'), sender t ----------->|  fresh credits, which come
//      |<------------------ credit (n = 1, k) -------|  back naming stream k
//      ...                                           |
//      |<---------------------------------- release -|  at the end (every shard)
//
// The trainer consumes steps strictly in order (e, 0), (e, 1), ..., so the
// training sequence does not depend on S or on arrival order, and its buffer
// never holds more than S * prefetch batches. A shard starts with `prefetch`
// credits and finishes once it has sent its last batch and every credit has
// come back.
//
// batch message (Envelope kind = kind_batch, seq = step, sender = shard name):
//   tensor 0  features f32 (b, sample...) images (b, C, H, W), augmented and
//                                         normalised; criteo rows (b, 39)
//   tensor 1  labels   i32 (b)
//   tensor 2  ids      i64 (b)           the training-set rows, in order
//   payload   batch_info (little-endian, 56 bytes)
// credit message (kind_credit, seq = number of credits, no tensors).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "schemas/error.hpp"
#include "schemas/tensor_codec.hpp"
#include "schemas/wire_buffer.hpp"

namespace hetflow::actors::builtin::stream {

inline constexpr uint32_t kind_batch = 0x53540001;   // "ST" 1
inline constexpr uint32_t kind_credit = 0x53540002;  // "ST" 2
inline constexpr uint32_t kind_takeover = 0x53540003;  // "ST" 3
inline constexpr uint32_t kind_release = 0x53540004;   // "ST" 4
inline constexpr uint32_t kind_assign = 0x53540005;    // "ST" 5
// Whether an envelope kind is one of this protocol's ("ST" in its high half).
constexpr bool is_stream_kind(uint32_t kind) noexcept { return (kind >> 16) == 0x5354u; }
inline constexpr uint32_t protocol_version = 1;

// What a batch says about itself. shard_rows / shard_checksum: the shard's
// running count and sample_ledger::checksum_of over every row it has sent
// this epoch, this batch included; the trainer recomputes both from the ids
// it received and fails the job when they differ.
struct batch_info {
  uint32_t version = protocol_version;
  int32_t epoch = 0;  // 0-based
  int32_t shard = 0;
  int32_t shards = 0;
  int64_t step = 0;   // the batch's step in its epoch
  int64_t rows = 0;   // the training-set size the shard planned with
  int64_t shard_rows = 0;
  uint64_t shard_checksum = 0;
  uint64_t reserved = 0;
};
static_assert(sizeof(batch_info) == 56);

// The actor names of the stream job.
std::string shard_name(int shard);  // "stream_shard_<k>"

// A batch being built: fill images, labels and ids (all of them), then finish().
class batch_writer {
public:
  // b rows of `sample` (e.g. (C, H, W) images, (39) criteo rows; rank >= 1).
  // Throws like message_builder.
  batch_writer(const std::string& sender, const std::string& target, const batch_info& info, int64_t b,
               std::span<const int64_t> sample);
  // b rows of (c, h, w) images.
  batch_writer(const std::string& sender, const std::string& target, const batch_info& info, int64_t b,
               int64_t c, int64_t h, int64_t w)
      : batch_writer(sender, target, info, b, std::array<int64_t, 3>{c, h, w}) {}
  std::span<float> images() { return images_; }
  std::span<int32_t> labels() { return labels_; }
  std::span<int64_t> ids() { return ids_; }
  wire_buffer_ref finish() &&;

private:
  schemas::message_builder builder_;
  std::span<float> images_;
  std::span<int32_t> labels_;
  std::span<int64_t> ids_;
};

// A received batch, read in place (views into msg's buffer).
struct batch_view {
  batch_info info;
  std::span<const float> images;         // the features
  std::span<const int64_t> image_shape;  // (b, sample...)
  std::span<const int32_t> labels;
  std::span<const int64_t> ids;
};

// Checks the layout above (kinds, dtypes, ranks, equal row counts, payload
// size and version); errc::wire_corrupt naming `peer` otherwise. Checks
// nothing about the plan: the trainer does.
expected<batch_view> read_batch(const schemas::decoded_message& msg, const std::string& peer);

// credit: `credits` more batches of stream `stream` (the shard index whose
// steps they are; payload i32, absent = the receiver's own stream).
wire_buffer_ref make_credit(const std::string& sender, const std::string& target, uint64_t credits,
                            int32_t stream = -1);
// The stream a credit is for (-1: the receiver's own); errc::wire_corrupt
// for a bad payload.
expected<int32_t> credit_stream(const schemas::decoded_message& msg);

// Failover (the node of shard k went down, registry.hpp's expendable_nodes).
// The consumer asks a surviving shard of its own to build k's steps from
// (epoch, step) on, with k's books as of the last batch of k it received;
// the taker sends them as shard k's batches (batch_info::shard = k, its own
// name as sender) with `prefetch` fresh credits, which come back as credits
// for stream k. takeover message: kind_takeover, seq = k, payload:
struct takeover_info {
  uint32_t version = protocol_version;
  int32_t shard = 0;   // the lost stream
  int32_t epoch = 0;   // where it resumes
  int32_t reserved = 0;
  int64_t step = 0;
  int64_t shard_rows = 0;        // k's books in `epoch` before `step`
  uint64_t shard_checksum = 0;
};
static_assert(sizeof(takeover_info) == 40);
wire_buffer_ref make_takeover(const std::string& sender, const std::string& target, const takeover_info& t);
expected<takeover_info> read_takeover(const schemas::decoded_message& msg, const std::string& peer);
// release (kind_release, no payload): the consumer has every batch it will
// take; a shard that has sent all its streams' batches may finish. Until
// then a finished shard stays, in case a lost shard's steps come to it.
wire_buffer_ref make_release(const std::string& sender, const std::string& target);
// assign (kind_assign, payload: the consumers' actor names, one per line, in
// worker order): strategy "hetpipe" plans its virtual workers at run time,
// so its head tells every shard who consumes (the stage 0 of each VW)
// before a shard sends anything (stream_options::consumers_from_head).
wire_buffer_ref make_assign(const std::string& sender, const std::string& target,
                            const std::vector<std::string>& consumers);
// errc::wire_corrupt for an empty list or an empty name.
expected<std::vector<std::string>> read_assign(const schemas::decoded_message& msg, const std::string& peer);

}  // namespace hetflow::actors::builtin::stream
