// hp_core: the state machines of HetPipe's runtime (strategy "hetpipe"), in
// plain C++ (the hp_stage and hp_ps actors wrap them; tests drive them
// directly, with no actor system).
//
// Semantics (WSP, DESIGN.md; issue 7). A virtual worker (VW) is a chain of
// stages 0..S-1, stage j holding units [first_j, last_j] of the model. The
// VW's minibatches 0, 1, 2, ... (its steps of every epoch, in order) form
// waves of Nm consecutive minibatches (the last wave may be shorter):
//
//   - every minibatch of wave c runs forward AND backward with W(c), the
//     weights the VW pulled at the start of wave c. So minibatch p starts
//     with weights that include every local update of minibatches up to
//     p - Nm (all of wave c - 1) and a minibatch's backward uses the weights
//     of its forward; local staleness is at most Nm - 1;
//   - each stage applies its minibatches' gradients to its local copy, in
//     minibatch order, with the job's optimizer (local momentum/Adam state);
//   - at the end of wave c each stage pushes u(c) = local - W(c) (one
//     aggregated update per stage per wave) to the PS shards of its units,
//     tagged c, and then pulls W(c + 1) from them with clock c + 1;
//   - a PS shard's clock table has one "worker" per stage of every VW; a VW
//     has pushed wave c when every one of its stages has. A pull at clock c
//     is answered once the global clock g >= c - D, i.e. every VW pushed
//     waves <= c - 1 - D (ps_clock.hpp's ssp(D)); D = 0 synchronises the VWs
//     every wave;
//   - D = 0: a shard adds the updates of wave t in worker order once every
//     worker pushed t (t < g), so the weights are a deterministic function
//     of the pushes and a run is reproducible. D > 0: it adds each update on
//     arrival (in each worker's wave order), so a VW's pull always sees its
//     own pushes (a VW never computes without its own last wave), whatever
//     the other VWs did; the order of additions across VWs then varies.
//
// Pipelining inside a wave (1F1B): stage j of S keeps at most
// min(Nm, S - j) minibatches between forward and backward, each in its own
// slot, a copy of its units (a model of units [first, last]) holding that
// minibatch's activations, so forwards of later minibatches do not
// overwrite what an earlier minibatch's backward needs.
//
// Two ways to cross a wave boundary (the job's `hetpipe_waves`):
//
//   drain (above): the pipeline drains at every wave boundary (the pull of
//     W(c + 1) needs the wave's last update): a bubble of about S - 1 stage
//     times per wave. A pull of wave c sees every VW's waves <= c - 1 - D.
//   overlap (HetPipe's; the default): the pipeline never
//     drains. Each stage runs one strict 1F1B schedule over all its
//     minibatches (forward p when fewer than `slots` wait for their
//     backward, else the backward of the oldest), so the order of its
//     updates and forwards - and with D = 0 the whole run - is a function of
//     the plan alone. Minibatch p's forward and backward use the stage's
//     local weights as they are when p's forward starts (copied into p's
//     slot: weight stashing): every local update through p - slots (>= p -
//     Nm) and no later one. At the first forward of wave w the stage pulls
//     G(w) and rebases: local = G(w) + its own updates G(w) does not hold
//     yet (the shard says which: every wave of this worker below X). A pull
//     of wave w waits for every VW's waves <= w - 2 - D (DESIGN.md's bound:
//     wave w - 1 overlaps it). With D = 0 the shard answers it with exactly
//     those waves: it adds wave t (in worker order) only once every worker
//     pushed t and pulled t + 1, so a pull's weights never depend on timing.
//     The update pushed for wave t is the sum of the local optimizer's steps
//     of t's minibatches (kept per wave: wave_delta). Checkpoint waves
//     (multiples of checkpoint_every) are drained boundaries: every stage
//     finishes its backwards first, the pull of that wave waits for every
//     VW's waves below it (the consistent cut a resumed run starts from),
//     and a resumed run crosses them the same way. On a cuda stage the
//     local weights, the copies into slots and the per-wave sums stay on
//     the device (slot 0's stream); only the pull's G comes in and the
//     pushed sum goes out through the host, once per wave.
//
// Thread affinity: one owner thread; stage_core's forward/backward run the
// slot models, inside their device context (the caller's job).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "actors/ps/ps_clock.hpp"
#include "kernels/loss.hpp"
#include "kernels/model.hpp"
#include "kernels/optimizer.hpp"
#include "schemas/error.hpp"
#include "topology/cluster.hpp"

namespace hetflow::hetpipe {

// A cpu stage's copy of its weights (split over the calling cpu context's
// threads): into a minibatch's slot at its forward, per minibatch. The
// profiler times the same pass (job_profiles.cpp, time_weight_passes); the
// step summed into the wave's update is the optimizer's step_summed.
void copy_floats(float* dst, const float* src, int64_t n);

// The spec of units [first, last] of `whole` as a model of its own; `input`:
// one sample's shape entering unit `first` (model::sample_shape(first)).
expected<kernels::model_spec> slice_spec(const kernels::model_spec& whole, std::size_t first, std::size_t last,
                                         const kernels::shape& input);

// Minibatch bookkeeping of one VW: minibatches in order, waves of nm.
struct wave_plan {
  int64_t minibatches = 0;  // in all epochs
  int nm = 1;
  int64_t waves() const noexcept { return nm > 0 ? (minibatches + nm - 1) / nm : 0; }
  int64_t wave_of(int64_t p) const noexcept { return p / nm; }
  int64_t first_of(int64_t c) const noexcept { return c * nm; }
  int64_t size_of(int64_t c) const noexcept {
    const int64_t f = first_of(c);
    return f >= minibatches ? 0 : std::min<int64_t>(nm, minibatches - f);
  }
};

class stage_core {
public:
  // `slots`: min(Nm, S - j) copies of the stage's units (built from slice_spec, any
  // seed: install() overwrites their weights). `last`: the stage computes
  // the loss. errc::invalid_argument for no slots or slots that differ.
  // `overlap_nm` > 0: overlapped waves of that Nm (above), 0: drained waves
  // (install / wave_update).
  static expected<std::unique_ptr<stage_core>> make(std::vector<kernels::model> slots, bool last,
                                                    const kernels::optimizer_config& opt, int overlap_nm = 0);
  ~stage_core();
  stage_core(const stage_core&) = delete;
  stage_core& operator=(const stage_core&) = delete;

  std::size_t slots() const noexcept { return slots_.size(); }
  kernels::model& slot(std::size_t s) noexcept { return slots_[s]; }
  // The stage's parameters (one slot's: every slot has the same shapes).
  std::vector<kernels::parameter*> params() { return slots_[0].parameters(); }
  int64_t parameter_bytes();

  // W(c): copies `values` (one per parameter, in order) into every slot and
  // into the local weights. Sizes checked. Drained waves only.
  status install(std::span<const kernels::tensor_view> values);
  // Overlapped waves: the pulled G (one per parameter, in order; on the
  // host, or on the stage's device) and, per parameter, X: G holds this
  // worker's waves < X. local = G + the kept
  // wave deltas of waves >= X (those below X are dropped). A one-slot
  // stage rebases only with its slot free (between an update and the next
  // forward): its update reads the weights before the step from the slot.
  status rebase(std::span<const kernels::tensor_view> values, std::span<const int64_t> included_below);
  // Overlapped waves: the sum of the local steps of wave t's minibatches
  // (one per parameter; t must have updates), on the host. Valid until the
  // next rebase or wave_delta (a device stage keeps the sums on the device
  // and returns host copies of them).
  expected<std::vector<kernels::tensor_view>> wave_delta(int64_t t);
  // A device stage's wave sums where they are (overlapped waves), for a
  // copy on another stream: `ready`, a point on the stage's stream after
  // the sums (cuda::context::record_point), is what that stream waits for.
  // The host does not wait. Valid until a rebase drops wave t, i.e. until
  // its shards hold the push made from them.
  struct device_delta {
    std::vector<kernels::tensor_view> update;
    std::shared_ptr<void> ready;
  };
  expected<device_delta> wave_delta_on_device(int64_t t);
  bool overlapped() const noexcept { return overlap_nm_ > 0; }
  bool on_device() const noexcept { return device_; }  // slots on a cuda device
  std::size_t kept_deltas() const noexcept { return delta_.size(); }
  // Minibatch p's forward in slot p % slots() (train mode) on a copy of `input`
  // the slot keeps. The view stays valid until the slot's next forward.
  // Slots on a cuda device: inputs and gradients may come from the host
  // (copied to the device), and what goes out (activations, dL/d(input))
  // comes back as a host copy; the local weights and their optimizer stay
  // on the device (one copy to the host per wave, for the push).
  expected<kernels::tensor_view> forward(int64_t p, kernels::tensor_view input);
  // Last stage: forward, loss and backward of p at once; returns the loss
  // and dL/d(input) (empty for a one-stage VW). A cpu stage reads a host
  // `input` in place (no copy into the slot): valid through the call.
  struct last_result {
    kernels::loss_result loss;
    kernels::tensor_view input_grad;
  };
  expected<last_result> forward_backward_last(int64_t p, kernels::tensor_view input, std::span<const int32_t> labels,
                                              bool need_input_grad);
  // p's backward from dL/d(output) in its slot; returns dL/d(input) (empty
  // when !need_input_grad: stage 0).
  expected<kernels::tensor_view> backward(int64_t p, kernels::tensor_view grad_output, bool need_input_grad);
  // p's local update: one optimizer step on the local weights with the
  // gradients of p's slot. Updates must come in minibatch order (checked).
  status local_update(int64_t p, double lr);
  // u = local - W(c), per parameter, in order (the wave's push; host).
  expected<std::vector<kernels::tensor>> wave_update();
  int64_t updates() const noexcept { return next_update_; }

  // Checkpoints: the local optimizer's state and step count, and restoring
  // them (kernels::restore_optimizer) with the minibatch counter at `next`
  // (the first minibatch of the wave the run resumes at).
  // Host copies of the local optimizer's state (it may live on a device).
  expected<std::vector<kernels::state_tensor>> optimizer_state();
  int64_t optimizer_steps() const noexcept { return opt_->steps(); }
  // Batch-norm running statistics (the units' saved state): one copy per
  // stage, which every forward's slot starts from and writes back, so they
  // advance as on one device, in forward order. Host copies (names as the
  // whole model's: "bn1.running_mean"), and restoring them by name.
  bool has_state() const noexcept { return !state_.empty(); }
  expected<std::vector<kernels::state_tensor>> state_host();
  status restore_state(std::span<const std::string> names, std::span<const kernels::tensor> values,
                       const std::string& where);
  status restore(kernels::optimizer_kind kind, int64_t steps, std::span<const kernels::tensor> state,
                 std::span<const std::string> names, int64_t next, const std::string& where);

private:
  stage_core() = default;
  // `borrow`: the caller keeps `input` alive until p's backward is done
  // (forward_backward_last), so a cpu slot reads a host input in place.
  expected<kernels::tensor_view> forward_in_slot(int64_t p, kernels::tensor_view input, bool borrow = false);
  expected<kernels::tensor_view> forward_on_device(std::size_t s, kernels::tensor_view input, bool borrow = false);
  expected<kernels::tensor_view> on_slot_device(std::size_t s, kernels::tensor_view v, kernels::tensor& buf);
  status slot_buffer(std::size_t s, kernels::tensor& buf, const kernels::shape& shape, const char* what);
  expected<kernels::tensor_view> to_host(std::size_t s, kernels::tensor_view v, kernels::tensor& buf);
  std::vector<kernels::model> slots_;
  bool last_ = false;
  bool device_ = false;                       // slots on a cuda device
  std::vector<kernels::tensor> slot_out_, slot_gin_, slot_dx_;  // device slots: host outputs, device grads in, host dx
  std::vector<kernels::parameter> local_;   // the local weights (optimizer target; on the slots' device), unless shared_slot_
  // A cpu stage with overlapped waves and one slot: the slot's parameters
  // are the local weights (each forward takes the weights of now, and the
  // one minibatch in flight is updated before the next starts), so no copy
  // of them, and no copy into the slot at each forward.
  bool shared_slot_ = false;
  std::vector<kernels::parameter*> local_ptrs_;  // the local weights: &local_[i], or the slot's with shared_slot_
  kernels::parameter& local(std::size_t i) noexcept { return *local_ptrs_[i]; }
  const kernels::parameter& local(std::size_t i) const noexcept { return *local_ptrs_[i]; }
  std::vector<kernels::tensor> base_;       // W(c) (host)
  std::unique_ptr<kernels::optimizer> opt_;
  std::vector<int64_t> slot_mb_;            // the minibatch each slot holds (-1: none)
  std::vector<kernels::tensor> slot_in_;    // each slot's input (its own copy)
  int64_t next_update_ = 0;
  std::vector<kernels::tensor> loss_grad_;  // per slot
  int overlap_nm_ = 0;
  std::vector<kernels::state_tensor> state_;  // the stage's running statistics (on the slots' device)
  std::map<int64_t, std::vector<kernels::tensor>> delta_;  // overlapped: wave -> sum of its local steps
  std::vector<kernels::tensor> before_;                    // overlapped, cuda, 2+ slots: the local weights before a step
  std::vector<kernels::tensor> spare_;                     // overlapped: a dropped wave's delta, for reuse
  kernels::tensor delta_host_;                             // overlapped, device: wave_delta's host copies, one buffer
                                                           // (the runtime's pushes copy on their own stream instead)
  bool delta_host_pinned_ = false;                         // ... page-locked (unlocked by the destructor)
  status check_values(std::span<const kernels::tensor_view> values) const;
};

// One PS shard: the parameters of some units (unit index -> its tensors, in
// the model's order) and the WSP clock table (workers: every stage of every
// VW).
class ps_core {
public:
  // `overlap`: the stages' waves overlap (stage_core above): pulls go
  // through pull_overlapped / take_ready, and a pull of wave w needs waves
  // <= w - 2 - D (<= w - 1 - D at drained waves: multiples of
  // `drained_every`, when > 0). Otherwise pull / push's `released`.
  struct options {
    bool overlap = false;
    int64_t drained_every = 0;
  };
  ps_core(std::map<std::size_t, std::vector<kernels::tensor>> units, int workers, int64_t staleness);
  ps_core(std::map<std::size_t, std::vector<kernels::tensor>> units, int workers, int64_t staleness, options o);

  const std::map<std::size_t, std::vector<kernels::tensor>>& units() const noexcept { return units_; }
  const ps::clock_table& clocks() const noexcept { return table_; }
  bool holds(std::size_t unit) const { return units_.count(unit) != 0; }
  // The units of [first, last] this shard holds, in order.
  std::vector<std::size_t> units_in(std::size_t first, std::size_t last) const;

  // Worker w will push `waves` updates in all.
  status finish(int w, int64_t waves);
  // Worker w's update of wave `tag` for its units [first, last] held here
  // (tensors in units_in order, each unit's in model order; shapes checked).
  // Appends the pulls it releases.
  status push(int w, int64_t tag, std::size_t first, std::size_t last, std::vector<kernels::tensor> update,
              std::vector<ps::pull_ticket>& released);
  // The same with views (host f32) that `owner` keeps alive until the
  // update is added (a push message's tensors, read in place: no copy of
  // tens of MB per push).
  status push(int w, int64_t tag, std::size_t first, std::size_t last, std::vector<kernels::tensor_view> update,
              std::shared_ptr<const void> owner, std::vector<ps::pull_ticket>& released);
  bool pull(const ps::pull_ticket& t) { return table_.request(t); }
  // Overlapped waves: a pull waits here; take_ready() returns the pulls to
  // answer now, with the weights as they are (call it again after
  // answering, and after a checkpoint, until it returns none: with D = 0 it
  // adds at most the waves that the answered pulls allow). None while a
  // checkpoint is due (at_barrier()).
  void pull_overlapped(const ps::pull_ticket& t);
  std::vector<ps::pull_ticket> take_ready();
  // Worker w's waves below this are in the weights (what its pull answer
  // tells the stage).
  int64_t included_below(int w) const { return included_.at(std::size_t(w)); }
  std::size_t waiting_pulls() const noexcept { return waiting_.size(); }
  // A new D from now on (`hetflow shell`'s `set staleness`); returns the
  // waiting pulls it releases. D = 0 adds later waves in worker order again.
  std::vector<ps::pull_ticket> set_staleness(int64_t d);
  int64_t staleness() const noexcept { return staleness_; }
  // Every worker's pushes of waves below this are in the weights (D > 0:
  // some later ones may be too).
  int64_t applied_below() const noexcept { return applied_below_; }
  // Past the latest wave any worker's update of is in the weights: a
  // checkpoint at a label >= this can still hold exactly the waves below it.
  int64_t applied_past() const;
  int64_t pushes() const noexcept { return pushes_; }

  // Checkpoints: updates of waves >= `label` are held (not added) until the
  // barrier moves, so the weights can hold exactly the waves < label of
  // every VW (a consistent cut). -1: no barrier.
  void set_barrier(int64_t label);
  int64_t barrier() const noexcept { return barrier_; }
  // True when the weights hold exactly every update of waves < barrier()
  // (every VW pushed them): the moment to write checkpoint barrier().
  bool at_barrier() const;
  // Each worker's clock as of the barrier: min(its clock, barrier).
  std::vector<int64_t> barrier_clocks() const;
  // A checkpoint's units (same shapes; units without parameters may be
  // missing) and clocks; held updates dropped.
  status restore(std::map<std::size_t, std::vector<kernels::tensor>> units, const std::vector<int64_t>& clocks);

private:
  struct held;
  void add(const held& h);
  void apply_ready();
  std::map<std::size_t, std::vector<kernels::tensor>> units_;
  ps::clock_table table_;
  int64_t staleness_ = 0;
  struct held {
    std::size_t first = 0, last = 0;
    int64_t wave = 0;
    std::vector<kernels::tensor_view> update;
    std::shared_ptr<const void> owner;  // what the views point into
  };
  std::map<std::pair<int64_t, int>, held> held_;  // (tag, worker)
  int64_t applied_below_ = 0, pushes_ = 0;
  int64_t barrier_ = -1;
  // Overlapped waves.
  options opt_;
  bool exact_ = false;             // D = 0 from the start: pulls see exactly waves <= w - 2 (timing-free)
  std::vector<int64_t> included_;  // per worker: its waves below this are added
  std::vector<int64_t> pulled_;    // per worker: the latest wave it pulled (-1: none)
  std::vector<int64_t> total_;     // per worker: its waves in all (finish)
  std::vector<bool> pulls_here_;   // per worker: it holds units here (it pulls here; known from its pushes)
  std::vector<ps::pull_ticket> waiting_;
  bool drained(int64_t wave) const noexcept {
    return wave == 0 || (opt_.drained_every > 0 && wave % opt_.drained_every == 0);
  }
  int64_t needs_below(int64_t wave) const noexcept {  // the waves (of every VW) a pull of `wave` needs
    return drained(wave) ? wave : wave - 1;
  }
  bool ready(const ps::pull_ticket& t) const;
  bool advance_exact();
};

// How long node `node`'s sends of activations and gradients wait for their
// bytes to go (node_services::send_wire's linger; hp_inbox). Only where
// compute threads take every CPU the node's data-plane progress thread may
// run on: `cpus` is the size of this node process's CPU mask, `pinned` says
// it is narrower than the machine (the node's `cpus`, `hetflow run`'s
// pinning of local nodes, taskset). Pinned, the node's own compute threads
// are counted; unpinned, those of every unpinned node on its host. A cpu
// device counts its threads (all its node's CPUs when unset), a cuda device
// one. There the progress thread waited for the sender's time slice to end
// (LeNet-5, 1 VW over 2 one-thread nodes on 2 cores: 27.5-29.1k samples/s
// without, 29.2-31.2k with; bench/RESULTS.md); elsewhere it has a CPU of its
// own and a wait would only hold the stage up. 0: no wait.
std::chrono::microseconds pipeline_send_linger(const topology::cluster& c, std::string_view node, int cpus,
                                               bool pinned);

}  // namespace hetflow::hetpipe
