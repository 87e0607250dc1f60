// The wire protocol between PS workers and ps_shard actors (plain C++ over
// schemas/; no new schema: the Envelope's kind, seq, tensors and payload).
//
//   worker w (clock c)                         shard k
//   [resume only]
//      |-- hello ------------------------------->|
//      |<------------- checkpoints (labels i64) -|  complete files of shard k
//      |-- restore (label = max common) -------->|  loads it once
//      |<------------------ restored (clocks) ---|  w starts at clocks[w]
//   [each step]
//      |-- pull (clock c) ---------------------->|  waits while the consistency
//      |<------- weights (shard's params, g) ----|  model forbids (timeout: error
//      |   ... forward/backward ...               |  naming the slowest worker)
//      |-- push (tag c, lr, shard's grads) ----->|
//   [end]
//      |-- done (clock = pushes in all) -------->|
//      |-- pull (final) ------------------------>|  worker 0: the final weights
//      |<-------------------------------- weights|
//      |-- bye ---------------------------------->|  worker 0, after the last pull:
//                                                   shards report and stop
//   error (kind_error, text): the shard refuses (bad push, pull timed out).
//
// Every message carries a ps_info payload (little-endian, 48 bytes).
// Tensors: push = the shard's dense gradients, weights = the shard's dense
// parameters, both in the shard's tensor order (ps_placement), f32;
// checkpoints and restored carry one i64 tensor.
//
// Sparse pieces (rows of embedding tables, see ps_placement), when the
// shard holds any: a pull lists the rows it wants of each piece (flag_rows,
// the list as its one i64 tensor; encode_rows), the weights answer has one
// (rows, dim) f32 tensor per piece after the dense ones, in the order asked;
// a push has one (rows, dim) gradient per piece after the dense ones and the
// row list as its last tensor (i64, flag_rows). Rows are local to the piece
// and strictly increasing; a pull may ask for all rows of a piece (-1).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"
#include "schemas/error.hpp"
#include "schemas/tensor_codec.hpp"
#include "schemas/wire_buffer.hpp"

namespace hetflow::ps {

enum : uint32_t {
  kind_pull = 0x50530001,
  kind_weights = 0x50530002,
  kind_push = 0x50530003,
  kind_done = 0x50530004,
  kind_error = 0x50530005,
  kind_hello = 0x50530006,
  kind_checkpoints = 0x50530007,
  kind_restore = 0x50530008,
  kind_restored = 0x50530009,
  kind_bye = 0x5053000a,
};
inline constexpr uint32_t protocol_version = 3;

// ps_info::flags
inline constexpr int32_t flag_final = 1;  // pull: the final weights, once every worker finished
inline constexpr int32_t flag_rows = 2;   // pull/push: carries a row list (the last tensor)
// push (dense shards only): also the worker's pull of clock + 1, which it
// then does not send. A separate pull, sent after the push, reached a node
// whose worker had started computing meanwhile and waited there for its
// core (~1 ms a step on one-core nodes; the push itself arrived in 0.13 ms).
inline constexpr int32_t flag_pull_next = 4;

struct ps_info {
  uint32_t version = protocol_version;
  int32_t worker = 0;
  int32_t shard = 0;
  int32_t flags = 0;
  int64_t clock = 0;   // pull/push/done/weights: the worker's clock; restore: the label
  int64_t global = 0;  // weights: the shard's global clock when it answered
  double lr = 0;       // push
  int64_t aux = 0;     // weights: updates applied by the shard
};
static_assert(sizeof(ps_info) == 48);

// A control message: info, an optional i64 list (as one tensor), optional text.
wire_buffer_ref make_control(uint32_t kind, const std::string& sender, const std::string& target, const ps_info& info,
                             std::span<const int64_t> list = {}, const std::string& text = {});
// A message with f32 tensors (push: gradients, weights: parameters) and,
// with flag_rows in info.flags, the i64 `rows` list after them.
wire_buffer_ref make_tensors(uint32_t kind, const std::string& sender, const std::string& target,
                             const ps_info& info, std::span<const kernels::tensor* const> tensors,
                             std::span<const int64_t> rows = {});

// The rows of each sparse piece a pull asks for or a push carries.
struct row_request {
  bool all = false;           // pull only: every row of the piece
  std::vector<int64_t> rows;  // local to the piece, strictly increasing
};
// [n_0, rows_0..., n_1, rows_1..., ...] (n = -1: all rows).
std::vector<int64_t> encode_rows(std::span<const row_request> pieces);
// Checks the list against the pieces' row counts: one section per piece,
// rows in range and strictly increasing, -1 only when `allow_all`; errors
// (errc::wire_corrupt) name `peer`.
expected<std::vector<row_request>> decode_rows(std::span<const int64_t> list, std::span<const int64_t> piece_rows,
                                               bool allow_all, const std::string& peer);

struct ps_message {
  uint32_t kind = 0;
  std::string sender;
  ps_info info;
  std::string text;           // kind_error
  std::vector<int64_t> list;  // checkpoints, restored; pull/push with flag_rows: the row list
  std::size_t tensors = 0;    // f32 tensors (not counting the row list)
  schemas::decoded_message msg;  // tensors (views into the buffer)
};
// Decodes and checks the payload; errors name `peer`.
expected<ps_message> read_ps_message(const wire_buffer_ref& buf, const schemas::read_limits& limits,
                                     const std::string& peer);
// Tensor i of a push/weights message as an owned f32 tensor.
expected<kernels::tensor> tensor_of(const ps_message& m, std::size_t i);

}  // namespace hetflow::ps
