// The wire protocol between RALP workers and the RALP server (plain C++ over
// schemas/: the Envelope's kind, seq, tensors and a fixed payload; no new
// schema). Kinds 0x5241xxxx ("RA"), distinct from the PS protocol's.
//
//   worker w                                    server (PS node)
//      |-- hello (aux = its clocks in all) ----->|  the server learns every
//          [text: its own unit times, below]
//      |<------------ probe (aux = seq, tensor) -|  ralp_cut = 0: once every worker
//      |-- probe (aux = seq) -------------------->|  said hello, round trips to one
//      |   ... (28 rounds; the last 8 held 1 ms)  |  worker on another node time the link
//      |<------------ welcome (aux = the cut) ---|  worker's final clock (and
//                                                   correct = the clock to resume at)
//   [each step, clock c]
//      |-- pull (c) ----------------------------->|  bsp: waits until every lower
//      |<------------ weights (lower params) -----|  push of clocks < c is applied
//      |   forward units [0, cut)                  |
//      |-- activations (c, lr, act, labels) ----->|  waits for every unfinished
//      |                                           |  worker's clock-c activations,
//      |                                           |  runs units [cut, end) + loss
//      |                                           |  for each with the same upper
//      |<---- act_grad (c, dL/dact, loss) --------|  weights, then W upper updates
//      |   backward units [0, cut)                 |  in worker order
//      |-- push (c, lr, lower grads) ------------>|  applied in worker order once
//          [| flag_pull_next: the pull of c + 1]      every worker pushed clock c
//   [worker 0: evaluation and end]
//      |-- pull (c, flag_full [| flag_final]) --->|  lower + upper weights (final:
//      |<------------ weights (every param) ------|  once every worker finished)
//      |-- bye ---------------------------------->|  the server reports and stops
//   error (kind_error, text): the server refuses (bad message, a wait timed out).
//
// With cut == units (no cut: the cost model found plain parameter serving
// best) there are no activations: the worker runs the whole model and the
// loss and pushes every gradient (the lower part is the whole model).
//
// Every message carries a ralp_info payload (little-endian, 64 bytes).
// Tensors: weights/push: the lower (or all) parameters in model order, f32;
// activations: the cut's activations (f32, batch first) then the labels (i32);
// act_grad: dL/d(activations), f32.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/tensor.hpp"
#include "schemas/error.hpp"
#include "schemas/tensor_codec.hpp"
#include "schemas/wire_buffer.hpp"

namespace hetflow::ralp {

enum : uint32_t {
  kind_hello = 0x52410001,
  kind_welcome = 0x52410002,
  kind_pull = 0x52410003,
  kind_weights = 0x52410004,
  kind_activations = 0x52410005,
  kind_act_grad = 0x52410006,
  kind_push = 0x52410007,
  kind_bye = 0x52410008,
  kind_error = 0x52410009,
  kind_probe = 0x5241000a,  // server -> a worker before its welcome (aux: a sequence number, one tensor):
                            // the worker sends it back without the tensor (the link's speed); lr > 0:
                            // it holds the answer lr ms first and says in loss how long it held it
                            // (ms), the latency of a message to a thread that has been idle
};
inline constexpr uint32_t protocol_version = 2;  // 2: flag_pull_next

// ralp_info::flags
inline constexpr int32_t flag_full = 1;   // pull/weights: every parameter (lower then upper)
inline constexpr int32_t flag_final = 2;  // pull: once every worker finished
// push: also the pull of clock + 1 (the worker's next step in the epoch),
// answered as that pull would be once the push is applied: one message
// less a step, and the pull cannot wait behind the push on the way.
inline constexpr int32_t flag_pull_next = 4;

struct ralp_info {
  uint32_t version = protocol_version;
  int32_t worker = 0;
  int32_t flags = 0;
  int32_t reserved = 0;
  int64_t clock = 0;    // pull/weights/activations/act_grad/push: the worker's clock
  int64_t global = 0;   // weights: the lower clock the weights contain every update below
  double lr = 0;        // activations, push
  int64_t aux = 0;      // hello: the worker's clocks in all; welcome: the cut
  double loss = 0;      // act_grad: the batch's mean loss
  int64_t correct = 0;  // act_grad: rows whose argmax equals the label; welcome: the clock the
                        // worker resumes at (the server restored a checkpoint; else 0)
};
static_assert(sizeof(ralp_info) == 64);

// A message with `info`, the f32 `tensors` in order, then (when not empty)
// `labels` as one i32 tensor, and `text` after the info (errors).
// `allocate` (optional): where the message's bytes come from (a pool of
// recycled buffers: a fresh large buffer costs a page fault per page).
wire_buffer_ref make_message(uint32_t kind, const std::string& sender, const std::string& target,
                             const ralp_info& info, std::span<const kernels::tensor_view> tensors = {},
                             std::span<const int32_t> labels = {}, const std::string& text = {},
                             const schemas::message_builder::allocator* allocate = nullptr);

struct ralp_message {
  uint32_t kind = 0;
  std::string sender;
  ralp_info info;
  std::string text;              // kind_error; kind_hello: unit_times (may be empty)
  schemas::decoded_message msg;  // tensors (views into the buffer)
  std::size_t tensors() const { return msg.tensor_count(); }
};
// Decodes and checks the payload (size, version); errors name `peer`.
expected<ralp_message> read_message(const wire_buffer_ref& buf, const schemas::read_limits& limits,
                                    const std::string& peer);
// Tensor i as an owned f32 tensor (errc::wire_corrupt when it is not f32).
expected<kernels::tensor> f32_tensor(const ralp_message& m, std::size_t i);
// Tensor i as i32 values (labels).
expected<std::vector<int32_t>> i32_values(const ralp_message& m, std::size_t i);

// A worker's own times of the model's units, measured on its device before
// its hello (ralp_cut = 0 and the worker on another node than the server):
// the server's cost model prices the lower units with them instead of its
// own (the machines, or a VM's vCPUs, differ). The hello's text, one line
// a unit: "NAME FWD_MS BWD_MS".
struct unit_time {
  std::string name;
  double fwd_ms = 0, bwd_ms = 0;
};
std::string encode_unit_times(const std::vector<unit_time>& units);
// errc::wire_corrupt for a line that is not "NAME FWD BWD" with finite
// times >= 0 (errors name `peer`); an empty text is no units.
expected<std::vector<unit_time>> decode_unit_times(std::string_view text, const std::string& peer);

}  // namespace hetflow::ralp
