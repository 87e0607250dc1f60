#include "actors/hetpipe/hp_core.hpp"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cuda/cuda_api.hpp"
#include "kernels/trace.hpp"

namespace hetflow::hetpipe {

// The cpu stage's copy of its weights (the caller runs inside the stage's
// cpu context, so it splits over its threads; a large stage's weights are
// tens of MB, a pass per minibatch).
void copy_floats(float* dst, const float* src, int64_t n) {
  kernels::cpu::parallel_elements(n, [=](int64_t b, int64_t e) {
    std::memcpy(dst + b, src + b, std::size_t(e - b) * sizeof(float));
  });
}

expected<kernels::model_spec> slice_spec(const kernels::model_spec& whole, std::size_t first, std::size_t last,
                                         const kernels::shape& input) {
  if (first > last || last >= whole.layers.size())
    return make_error(errc::invalid_argument, "hetpipe: units [" + std::to_string(first) + ", " + std::to_string(last) +
                                                  "] are outside model " + whole.name + "'s " +
                                                  std::to_string(whole.layers.size()) + " units");
  kernels::model_spec s;
  s.name = whole.name + "[" + std::to_string(first) + ".." + std::to_string(last) + "]";
  s.classes = whole.classes;
  s.layers.assign(whole.layers.begin() + std::ptrdiff_t(first), whole.layers.begin() + std::ptrdiff_t(last) + 1);
  s.input = input;
  return s;
}

expected<std::unique_ptr<stage_core>> stage_core::make(std::vector<kernels::model> slots, bool last,
                                                       const kernels::optimizer_config& opt, int overlap_nm) {
  if (slots.empty()) return make_error(errc::invalid_argument, "hetpipe stage: no slots");
  if (overlap_nm < 0) return make_error(errc::invalid_argument, "hetpipe stage: a negative Nm");
  if (overlap_nm > 0 && int(slots.size()) > overlap_nm)
    return make_error(errc::invalid_argument, "hetpipe stage: more slots than Nm");
  std::unique_ptr<stage_core> sc(new stage_core());
  sc->overlap_nm_ = overlap_nm;
  auto ref = slots[0].parameters();
  for (auto& m : slots) {
    auto ps = m.parameters();
    if (ps.size() != ref.size())
      return make_error(errc::invalid_argument, "hetpipe stage: slots with different parameters");
    for (std::size_t i = 0; i < ps.size(); ++i)
      if (!(ps[i]->value.shape() == ref[i]->value.shape()) || ps[i]->sparse)
        return make_error(errc::invalid_argument, "hetpipe stage: slots with different (or sparse) parameters");
    if (m.state().size() != slots[0].state().size())
      return make_error(errc::invalid_argument, "hetpipe stage: slots with different saved state");
  }
  // The local weights and their optimizer live on the slots' device (a cuda
  // stage's minibatches never cross to the host for their updates); W(c)
  // stays on the host, where pulls arrive and pushes leave.
  sc->device_ = slots[0].where().kind != kernels::device_kind::cpu;
  sc->shared_slot_ = overlap_nm > 0 && slots.size() == 1 && !sc->device_;
  kernels::device_context& ctx = slots[0].context();
  for (auto* p : ref) {
    HF_ASSIGN_OR_RETURN(kernels::tensor base, kernels::copy_to_host(ctx, p->value.view()));
    sc->base_.push_back(std::move(base));
    if (sc->shared_slot_) continue;
    kernels::parameter q;
    q.name = p->name;
    // A cpu stage's local gradients are the slot's, lent for each step
    // (local_update): none of its own. (restore_optimizer makes some.)
    try {
      q.value = sc->device_ ? kernels::tensor::empty_on(ctx.memory(), p->value.shape())
                            : kernels::tensor::empty(p->value.shape());
      if (sc->device_) q.grad = kernels::tensor::empty_on(ctx.memory(), p->value.shape());
    } catch (const std::bad_alloc&) {
      return make_error(errc::out_of_memory, "hetpipe stage: " + ctx.where().to_string() + " has no room for " + p->name);
    }
    HF_RETURN_IF_ERROR(ctx.copy(p->value.view(), q.value.mutable_view()));
    // A cuda stage's overlapped waves copy the weights before each step
    // (local_update; one slot: the slot holds them); a cpu stage's step sums
    // its changes in its own pass (optimizer::step_summed).
    if (overlap_nm > 0 && slots.size() > 1 && sc->device_) {
      try {
        sc->before_.push_back(kernels::tensor::empty_on(ctx.memory(), p->value.shape()));
      } catch (const std::bad_alloc&) {
        return make_error(errc::out_of_memory,
                          "hetpipe stage: " + ctx.where().to_string() + " has no room for a copy of " + p->name);
      }
    }
    sc->local_.push_back(std::move(q));
  }
  for (kernels::state_tensor* t : slots[0].state()) {
    kernels::state_tensor q;
    q.name = t->name;
    try {
      q.value = sc->device_ ? kernels::tensor::empty_on(ctx.memory(), t->value.shape())
                            : kernels::tensor::empty(t->value.shape());
    } catch (const std::bad_alloc&) {
      return make_error(errc::out_of_memory, "hetpipe stage: " + ctx.where().to_string() + " has no room for " + t->name);
    }
    HF_RETURN_IF_ERROR(ctx.copy(t->value.view(), q.value.mutable_view()));
    sc->state_.push_back(std::move(q));
  }
  if (sc->device_) {
    HF_ASSIGN_OR_RETURN(sc->opt_, static_cast<kernels::cuda::context&>(ctx).make_optimizer(opt));
  } else {
    HF_ASSIGN_OR_RETURN(sc->opt_, kernels::make_optimizer(opt));
  }
  sc->slot_mb_.assign(slots.size(), -1);
  sc->slot_in_.resize(slots.size());
  sc->slot_out_.resize(slots.size());
  sc->slot_gin_.resize(slots.size());
  sc->slot_dx_.resize(slots.size());
  sc->loss_grad_.resize(slots.size());
  sc->slots_ = std::move(slots);
  sc->last_ = last;
  if (sc->shared_slot_) {
    sc->local_ptrs_ = sc->slots_[0].parameters();
  } else {
    for (auto& q : sc->local_) sc->local_ptrs_.push_back(&q);
  }
  return sc;
}

stage_core::~stage_core() {
  if (delta_host_pinned_) static_cast<kernels::cuda::context&>(slots_[0].context()).unpin_host(delta_host_.f32());
}

int64_t stage_core::parameter_bytes() {
  int64_t n = 0;
  for (auto& t : base_) n += int64_t(t.view().byte_size());
  return n;
}

status stage_core::check_values(std::span<const kernels::tensor_view> values) const {
  if (values.size() != local_ptrs_.size())
    return make_error(errc::internal, "hetpipe stage: got " + std::to_string(values.size()) + " weight tensors, want " +
                                          std::to_string(local_ptrs_.size()));
  for (std::size_t i = 0; i < local_ptrs_.size(); ++i)
    if (values[i].type() != dtype::f32 || values[i].byte_size() != local(i).value.view().byte_size())
      return make_error(errc::internal, "hetpipe stage: got " + std::to_string(values[i].byte_size()) + " bytes for " +
                                            local(i).name + ", want " +
                                            std::to_string(local(i).value.view().byte_size()));
  return {};
}

status stage_core::install(std::span<const kernels::tensor_view> values) {
  if (overlap_nm_ > 0) return make_error(errc::internal, "hetpipe stage: install() with overlapped waves");
  HF_RETURN_IF_ERROR(check_values(values));
  kernels::device_context& ctx = slots_[0].context();
  for (std::size_t i = 0; i < local_ptrs_.size(); ++i) {
    HF_RETURN_IF_ERROR(ctx.copy(values[i], local(i).value.mutable_view()));
    ++local(i).version;
    std::memcpy(base_[i].f32(), values[i].f32(), values[i].byte_size());
  }
  // Each slot has its own context (stream): the local copy must be complete
  // before the others read it.
  if (device_) HF_RETURN_IF_ERROR(ctx.synchronize());
  for (auto& m : slots_) {  // from the local copy (on a device: device to device)
    auto ps = m.parameters();
    for (std::size_t i = 0; i < ps.size(); ++i) {
      HF_RETURN_IF_ERROR(m.context().copy(local(i).value.view(), ps[i]->value.mutable_view()));
      ++ps[i]->version;
    }
  }
  // ... and those reads done before slot 0's stream steps the local copy.
  if (device_)
    for (std::size_t k = 1; k < slots_.size(); ++k) HF_RETURN_IF_ERROR(slots_[k].context().synchronize());
  return {};
}

status stage_core::rebase(std::span<const kernels::tensor_view> values, std::span<const int64_t> included_below) {
  if (overlap_nm_ == 0) return make_error(errc::internal, "hetpipe stage: rebase() with drained waves");
  HF_RETURN_IF_ERROR(check_values(values));
  if (included_below.size() != local_ptrs_.size())
    return make_error(errc::internal, "hetpipe stage: rebase with " + std::to_string(included_below.size()) +
                                          " wave marks for " + std::to_string(local_ptrs_.size()) + " tensors");
  // A one-slot stage's update takes the weights before its step from the
  // slot (local_update): they must still be the local weights.
  if (slots_.size() == 1 && slot_mb_[0] >= 0)
    return make_error(errc::internal, "hetpipe stage: rebase of a one-slot stage while minibatch " +
                                          std::to_string(slot_mb_[0]) + " is between forward and update");
  kernels::device_context& ctx = slots_[0].context();  // a device stage: local_ and the deltas live on its stream
  if (device_) {  // G (host values: a copy each; device ones: one launch), then each kept wave's deltas (a launch each)
    auto& cc = static_cast<kernels::cuda::context&>(ctx);
    std::vector<kernels::tensor_view> from;
    std::vector<kernels::mutable_tensor_view> to;
    for (std::size_t i = 0; i < local_ptrs_.size(); ++i) {
      if (values[i].where() == ctx.where()) {
        from.push_back(values[i]);
        to.push_back(local(i).value.mutable_view());
      } else {
        HF_RETURN_IF_ERROR(ctx.copy(values[i], local(i).value.mutable_view()));
      }
    }
    HF_RETURN_IF_ERROR(cc.copy_many(from, to));
    // In wave order, as the cpu path adds them (one launch holds each tensor once).
    const int64_t low = included_below.empty() ? 0 : *std::min_element(included_below.begin(), included_below.end());
    for (auto it = delta_.lower_bound(low); it != delta_.end(); ++it) {
      std::vector<kernels::mutable_tensor_view> ys;
      std::vector<kernels::tensor_view> as;
      for (std::size_t i = 0; i < local_ptrs_.size(); ++i) {
        if (it->first < included_below[i]) continue;
        ys.push_back(local(i).value.mutable_view());
        as.push_back(it->second[i].view());
      }
      HF_RETURN_IF_ERROR(cc.accumulate_many(ys, as, {}));
    }
  }
  for (std::size_t i = 0; i < local_ptrs_.size(); ++i) {
    if (!device_) {
      float* dst = local(i).value.f32();
      copy_floats(dst, values[i].f32(), local(i).value.numel());
      for (auto it = delta_.lower_bound(included_below[i]); it != delta_.end(); ++it)
        kernels::cpu::add(dst, it->second[i].f32(), dst, local(i).value.numel());
    }
    ++local(i).version;
  }
  // The caller's `values` (message buffers, maybe page-locked) move on once
  // this returns: the copies from them must be done.
  if (device_) HF_RETURN_IF_ERROR(ctx.synchronize());
  if (included_below.empty()) return {};
  // Deltas every tensor's shard holds now are not needed again (their
  // pushes are done). The stage keeps one set for the next wave's first
  // step, which overwrites it: no allocation (and on the host no fresh
  // pages) per wave.
  const int64_t low = *std::min_element(included_below.begin(), included_below.end());
  auto end = delta_.lower_bound(low);
  for (auto it = delta_.begin(); it != end; ++it)
    if (spare_.empty()) spare_ = std::move(it->second);
  delta_.erase(delta_.begin(), end);
  return {};
}

expected<std::vector<kernels::tensor_view>> stage_core::wave_delta(int64_t t) {
  auto it = delta_.find(t);
  if (it == delta_.end())
    return make_error(errc::internal, "hetpipe stage: no local updates of wave " + std::to_string(t) + " kept");
  std::vector<kernels::tensor_view> v;
  if (!device_) {
    for (auto& d : it->second) v.push_back(d.view());
    return v;
  }
  // A device stage's deltas: host copies (what the push sends), in one
  // buffer page-locked once, so the copies run at the link's speed.
  auto& cc = static_cast<kernels::cuda::context&>(slots_[0].context());
  if (delta_host_.empty()) {
    int64_t total = 0;
    for (auto* q : local_ptrs_) total += q->value.numel();
    delta_host_ = kernels::tensor::empty({std::max<int64_t>(total, 1)});
    if (cc.pin_host(delta_host_.f32(), std::size_t(total) * sizeof(float))) delta_host_pinned_ = true;
  }
  float* at = delta_host_.f32();
  for (std::size_t i = 0; i < it->second.size(); ++i) {
    const kernels::tensor& d = it->second[i];
    HF_RETURN_IF_ERROR(cc.copy(d.view(), kernels::mutable_tensor_view(at, d.shape())));
    v.push_back(kernels::tensor_view(at, d.shape()));
    at += d.numel();
  }
  return v;
}

expected<stage_core::device_delta> stage_core::wave_delta_on_device(int64_t t) {
  auto it = delta_.find(t);
  if (it == delta_.end())
    return make_error(errc::internal, "hetpipe stage: no local updates of wave " + std::to_string(t) + " kept");
  if (!device_) return make_error(errc::internal, "hetpipe stage: wave_delta_on_device() on the host");
  device_delta d;
  for (auto& x : it->second) d.update.push_back(x.view());
  HF_ASSIGN_OR_RETURN(d.ready, static_cast<kernels::cuda::context&>(slots_[0].context()).record_point());
  return d;
}

// `v` in `buf` on slot s's device (a copy; buf reallocated when its shape
// changes), or `v` itself when it is there already.
expected<kernels::tensor_view> stage_core::on_slot_device(std::size_t s, kernels::tensor_view v, kernels::tensor& buf) {
  if (!device_ || v.where() == slots_[s].where()) return v;
  HF_RETURN_IF_ERROR(slot_buffer(s, buf, v.shape(), "a gradient"));
  HF_RETURN_IF_ERROR(slots_[s].context().copy(v, buf.mutable_view()));
  return buf.view();
}

// `buf` holds `shape` on slot s's device (host for cpu slots): kept when it
// does, else allocated.
status stage_core::slot_buffer(std::size_t s, kernels::tensor& buf, const kernels::shape& shape, const char* what) {
  if (!buf.empty() && buf.shape() == shape) return {};
  try {
    buf = device_ ? kernels::tensor::empty_on(slots_[s].context().memory(), shape) : kernels::tensor::empty(shape);
  } catch (const std::bad_alloc&) {
    return make_error(errc::out_of_memory, "hetpipe stage: " + slots_[s].where().to_string() + " has no room for " +
                                               what + " of " + shape.to_string());
  }
  return {};
}

// A device result `v` of slot s copied into host `buf` (what the data plane
// sends), or `v` itself on cpu.
expected<kernels::tensor_view> stage_core::to_host(std::size_t s, kernels::tensor_view v, kernels::tensor& buf) {
  if (!device_ || v.empty() || v.where().kind == kernels::device_kind::cpu) return v;
  if (buf.empty() || !(buf.shape() == v.shape())) buf = kernels::tensor::empty(v.shape());
  HF_RETURN_IF_ERROR(slots_[s].context().copy(v, buf.mutable_view()));
  return buf.view();
}

expected<kernels::tensor_view> stage_core::forward(int64_t p, kernels::tensor_view input) {
  HF_ASSIGN_OR_RETURN(kernels::tensor_view out, forward_in_slot(p, input));
  const std::size_t s = std::size_t(p % int64_t(slots_.size()));
  return to_host(s, out, slot_out_[s]);
}

// forward's checks and the forward itself; the output stays on the slot's
// device (the last stage's logits go to its loss there).
expected<kernels::tensor_view> stage_core::forward_in_slot(int64_t p, kernels::tensor_view input, bool borrow) {
  const std::size_t s = std::size_t(p % int64_t(slots_.size()));
  if (slot_mb_[s] >= 0)
    return make_error(errc::internal, "hetpipe stage: minibatch " + std::to_string(p) + " needs slot " +
                                          std::to_string(s) + ", still held by minibatch " +
                                          std::to_string(slot_mb_[s]) + " (more in flight than the stage's slots)");
  // p starts only with every local update through p - slots (1F1B); as
  // slots <= Nm, this implies WSP's local rule (updates through p - Nm).
  if (next_update_ < p - int64_t(slots_.size()) + 1)
    return make_error(errc::internal, "hetpipe stage: minibatch " + std::to_string(p) + " would start before the " +
                                          "local update of minibatch " + std::to_string(p - int64_t(slots_.size())) +
                                          " (updates through " + std::to_string(next_update_ - 1) + " applied)");
  slot_mb_[s] = p;
  if (overlap_nm_ > 0) {  // weight stashing: p's forward and backward use the local weights of now
    auto ps = slots_[s].parameters();
    if (device_) {  // on slot 0's stream, after the local copy's last step (slot s is idle: its update synchronized it)
      std::vector<kernels::tensor_view> from;
      std::vector<kernels::mutable_tensor_view> to;
      for (std::size_t i = 0; i < ps.size(); ++i) {
        from.push_back(local(i).value.view());
        to.push_back(ps[i]->value.mutable_view());
      }
      HF_RETURN_IF_ERROR(static_cast<kernels::cuda::context&>(slots_[0].context()).copy_many(from, to));
    }
    if (!shared_slot_)  // (shared: the slot holds the local weights)
      for (std::size_t i = 0; i < ps.size(); ++i) {
        if (!device_) copy_floats(ps[i]->value.f32(), local(i).value.f32(), local(i).value.numel());
        ++ps[i]->version;
      }
    // ... and done before slot s's stream runs the forward.
    if (device_ && s != 0) HF_RETURN_IF_ERROR(slots_[0].context().synchronize());
  }
  return forward_on_device(s, input, borrow);
}

// The slot keeps its own copy of the input (on its device): units may keep
// a view of it for the backward pass, and the caller's buffer (a batch, a
// message) moves on - unless the caller lends it until the backward
// (`borrow`: forward_backward_last on a cpu stage, whose backward is done
// when it returns). The output stays on the slot's device.
expected<kernels::tensor_view> stage_core::forward_on_device(std::size_t s, kernels::tensor_view input, bool borrow) {
  kernels::tensor& in = slot_in_[s];
  kernels::device_context& ctx = slots_[s].context();
  kernels::tensor_view x = input;
  // Only host inputs on a host slot: a device slot's backward would read a
  // borrowed input asynchronously, after the call that lent it returned.
  if (!borrow || device_ || input.where().kind != kernels::device_kind::cpu) {
    HF_RETURN_IF_ERROR(slot_buffer(s, in, input.shape(), "an input"));
    HF_RETURN_IF_ERROR(ctx.copy(input, in.mutable_view()));
    x = in.view();
  }
  if (state_.empty()) return slots_[s].forward(x, kernels::mode::train);
  // The running statistics move on from the stage's copy, in forward order.
  auto st = slots_[s].state();
  for (std::size_t i = 0; i < st.size(); ++i) HF_RETURN_IF_ERROR(ctx.copy(state_[i].value.view(), st[i]->value.mutable_view()));
  HF_ASSIGN_OR_RETURN(kernels::tensor_view out, slots_[s].forward(x, kernels::mode::train));
  for (std::size_t i = 0; i < st.size(); ++i) HF_RETURN_IF_ERROR(ctx.copy(st[i]->value.view(), state_[i].value.mutable_view()));
  if (device_) HF_RETURN_IF_ERROR(ctx.synchronize());  // the next forward may be another slot's stream
  return out;
}

expected<std::vector<kernels::state_tensor>> stage_core::state_host() {
  std::vector<kernels::state_tensor> out;
  for (auto& t : state_) {
    HF_ASSIGN_OR_RETURN(kernels::tensor h, kernels::copy_to_host(slots_[0].context(), t.value.view()));
    out.push_back(kernels::state_tensor{t.name, std::move(h)});
  }
  return out;
}

status stage_core::restore_state(std::span<const std::string> names, std::span<const kernels::tensor> values,
                                 const std::string& where) {
  if (names.size() != values.size()) return make_error(errc::invalid_argument, where + ": state names and values differ");
  for (auto& t : state_) {
    std::size_t k = 0;
    while (k < names.size() && names[k] != t.name) ++k;
    if (k == names.size()) return make_error(errc::invalid_argument, where + ": no " + t.name + " in the checkpoint");
    if (values[k].view().byte_size() != t.value.view().byte_size())
      return make_error(errc::invalid_argument, where + ": " + t.name + " has another size in the checkpoint");
    HF_RETURN_IF_ERROR(slots_[0].context().copy(values[k].view(), t.value.mutable_view()));
  }
  return {};
}

expected<stage_core::last_result> stage_core::forward_backward_last(int64_t p, kernels::tensor_view input,
                                                                    std::span<const int32_t> labels,
                                                                    bool need_input_grad) {
  if (!last_) return make_error(errc::internal, "hetpipe stage: the loss belongs to the last stage");
  const std::size_t s = std::size_t(p % int64_t(slots_.size()));
  HF_ASSIGN_OR_RETURN(kernels::tensor_view logits, forward_in_slot(p, input, /*borrow=*/true));
  // One gradient buffer per slot: on a device, a slot's backward may still
  // read it (on the slot's stream) when the next slot's loss is computed.
  kernels::tensor& loss_grad = loss_grad_[s];
  HF_RETURN_IF_ERROR(slot_buffer(s, loss_grad, logits.shape(), "the loss gradient"));
  expected<kernels::loss_result> r =
      device_ ? static_cast<kernels::cuda::context&>(slots_[s].context())
                    .softmax_cross_entropy(logits, labels, loss_grad.mutable_view())
              : kernels::softmax_cross_entropy(logits, labels, loss_grad.mutable_view());
  if (!r) return r.error();
  HF_ASSIGN_OR_RETURN(kernels::tensor_view g, backward(p, loss_grad.view(), need_input_grad));
  return last_result{*r, g};
}

expected<kernels::tensor_view> stage_core::backward(int64_t p, kernels::tensor_view grad_output, bool need_input_grad) {
  const std::size_t s = std::size_t(p % int64_t(slots_.size()));
  if (slot_mb_[s] != p)
    return make_error(errc::internal, "hetpipe stage: backward of minibatch " + std::to_string(p) +
                                          " but its slot holds " + std::to_string(slot_mb_[s]));
  HF_ASSIGN_OR_RETURN(kernels::tensor_view g, on_slot_device(s, grad_output, slot_gin_[s]));
  HF_ASSIGN_OR_RETURN(kernels::tensor_view dx, slots_[s].backward(g, need_input_grad));
  return to_host(s, dx, slot_dx_[s]);
}

status stage_core::local_update(int64_t p, double lr) {
  if (p != next_update_)
    return make_error(errc::internal, "hetpipe stage: update of minibatch " + std::to_string(p) + " out of order (" +
                                          std::to_string(next_update_) + " is next): minibatches reordered");
  const std::size_t s = std::size_t(p % int64_t(slots_.size()));
  if (slot_mb_[s] != p)
    return make_error(errc::internal, "hetpipe stage: update of minibatch " + std::to_string(p) +
                                          " but its slot holds " + std::to_string(slot_mb_[s]));
  auto ps = slots_[s].parameters();
  // On a device each slot has its own stream; the local copy and its
  // optimizer live on slot 0's. Slot s's backward must be complete before
  // slot 0's stream reads its gradients.
  if (device_ && s != 0) HF_RETURN_IF_ERROR(slots_[s].context().synchronize());
  // Overlapped waves sum each step into its wave's update: local - before.
  // On a cpu stage the optimizer adds each weight's change in the step's
  // own pass (step_summed: the same floats as a copy before and a
  // difference after). On a device: with one slot, the slot holds the local
  // weights of p's forward, which no update has changed since: they are
  // `before`; else a copy.
  const bool one_slot = slots_.size() == 1;
  if (overlap_nm_ > 0 && !one_slot && device_) {
    std::vector<kernels::tensor_view> from;
    std::vector<kernels::mutable_tensor_view> to;
    for (std::size_t i = 0; i < local_ptrs_.size(); ++i) {
      from.push_back(local(i).value.view());
      to.push_back(before_[i].mutable_view());
    }
    HF_RETURN_IF_ERROR(static_cast<kernels::cuda::context&>(slots_[0].context()).copy_many(from, to));
  }
  auto before = [&](std::size_t i) { return one_slot ? ps[i]->value.view() : before_[i].view(); };
  // The step reads slot s's gradients in place: lent to the local weights
  // for it (the optimizers read each parameter's grad when they step), not
  // copied. `sums`: step_summed's.
  auto step = [&](std::span<float* const> sums = {}, bool add = true) -> status {
    struct lent {  // swapped back however the step ends (a shared slot's are the local weights' own)
      std::vector<kernels::parameter*>& local;
      std::vector<kernels::parameter*>& slot;
      bool on;
      void swap() {
        if (on)
          for (std::size_t i = 0; i < local.size(); ++i) std::swap(local[i]->grad, slot[i]->grad);
      }
      ~lent() { swap(); }
    } grads{local_ptrs_, ps, !shared_slot_};
    grads.swap();
    return sums.empty() ? opt_->step(local_ptrs_, lr) : opt_->step_summed(local_ptrs_, lr, sums, add);
  };
  if (overlap_nm_ > 0 && device_) {  // the step, summed into its wave's delta, all on slot 0's stream
    kernels::device_context& c0 = slots_[0].context();
    auto& cc = static_cast<kernels::cuda::context&>(c0);
    HF_RETURN_IF_ERROR(step());
    auto [it, fresh] = delta_.try_emplace(p / overlap_nm_);
    if (fresh) {
      if (spare_.size() == local_ptrs_.size()) {
        it->second = std::move(spare_);
        spare_.clear();
      } else {
        for (auto* q : local_ptrs_) {
          try {
            it->second.push_back(kernels::tensor::empty_on(c0.memory(), q->value.shape()));
          } catch (const std::bad_alloc&) {
            delta_.erase(it);
            return make_error(errc::out_of_memory, "hetpipe stage: " + c0.where().to_string() +
                                                       " has no room for a wave's update of " + q->name);
          }
        }
      }
    }
    // A fresh delta starts as local - before (0 + (a - b), the cpu path's rounding).
    std::vector<kernels::mutable_tensor_view> ys;
    std::vector<kernels::tensor_view> as, bs;
    for (std::size_t i = 0; i < local_ptrs_.size(); ++i) {
      ys.push_back(it->second[i].mutable_view());
      as.push_back(local(i).value.view());
      bs.push_back(before(i));
      ++local(i).version;
    }
    HF_RETURN_IF_ERROR(cc.accumulate_many(ys, as, bs, !fresh));
  } else if (overlap_nm_ > 0) {  // the step, summed into its wave's delta in the same pass
    auto [it, fresh] = delta_.try_emplace(p / overlap_nm_);
    if (fresh) {
      if (spare_.size() == local_ptrs_.size()) {
        it->second = std::move(spare_);
        spare_.clear();
      } else {
        for (auto* q : local_ptrs_) it->second.push_back(kernels::tensor::empty(q->value.shape()));
      }
    }
    std::vector<float*> sums;
    for (auto& d : it->second) sums.push_back(d.f32());
    // A wave's first step stores its changes (the buffer may be a dropped
    // wave's), the others add theirs.
    if (status st = step(sums, !fresh); !st.ok()) {
      if (fresh) delta_.erase(it);
      return st;
    }
    for (auto* q : local_ptrs_) ++q->version;
  } else {
    HF_RETURN_IF_ERROR(step());
  }
  // ... and slot s's next backward (on its stream) must not overwrite its
  // gradients before slot 0's stream has read them.
  if (device_ && s != 0) HF_RETURN_IF_ERROR(slots_[0].context().synchronize());
  slot_mb_[s] = -1;
  ++next_update_;
  return {};
}

status stage_core::restore(kernels::optimizer_kind kind, int64_t steps, std::span<const kernels::tensor> state,
                           std::span<const std::string> names, int64_t next, const std::string& where) {
  HF_RETURN_IF_ERROR(kernels::restore_optimizer(*opt_, kind, local_ptrs_, steps, state, names, where,
                                                device_ ? &slots_[0].context() : nullptr));
  next_update_ = next;
  std::fill(slot_mb_.begin(), slot_mb_.end(), -1);
  delta_.clear();  // a checkpoint is a drained boundary: every wave before it is in the shards
  return {};
}

expected<std::vector<kernels::state_tensor>> stage_core::optimizer_state() {
  std::vector<kernels::state_tensor> out;
  for (kernels::state_tensor* t : opt_->state()) {
    HF_ASSIGN_OR_RETURN(kernels::tensor h, kernels::copy_to_host(slots_[0].context(), t->value.view()));
    out.push_back(kernels::state_tensor{t->name, std::move(h)});
  }
  return out;
}

expected<std::vector<kernels::tensor>> stage_core::wave_update() {
  if (overlap_nm_ > 0) return make_error(errc::internal, "hetpipe stage: wave_update() with overlapped waves");
  std::vector<kernels::tensor> u;
  for (std::size_t i = 0; i < local_ptrs_.size(); ++i) {
    kernels::tensor d = kernels::tensor::empty(local(i).value.shape());
    HF_RETURN_IF_ERROR(slots_[0].context().copy(local(i).value.view(), d.mutable_view()));  // local, then - W(c)
    const float* a = d.f32();
    const float* b = base_[i].f32();
    float* o = d.f32();
    const int64_t n = d.numel();
    for (int64_t k = 0; k < n; ++k) o[k] = a[k] - b[k];
    u.push_back(std::move(d));
  }
  return u;
}

ps_core::ps_core(std::map<std::size_t, std::vector<kernels::tensor>> units, int workers, int64_t staleness)
    : ps_core(std::move(units), workers, staleness, options{}) {}

ps_core::ps_core(std::map<std::size_t, std::vector<kernels::tensor>> units, int workers, int64_t staleness, options o)
    : units_(std::move(units)),
      table_(workers, ps::consistency_model::ssp(staleness)),
      staleness_(staleness),
      opt_(o),
      exact_(o.overlap && staleness == 0),
      included_(std::size_t(std::max(workers, 0)), 0),
      pulled_(std::size_t(std::max(workers, 0)), -1),
      total_(std::size_t(std::max(workers, 0)), ps::infinite_clock),
      pulls_here_(std::size_t(std::max(workers, 0)), true) {}

status ps_core::finish(int w, int64_t waves) {
  HF_RETURN_IF_ERROR(table_.finish(w, waves));
  total_.at(std::size_t(w)) = waves;
  return {};
}

void ps_core::pull_overlapped(const ps::pull_ticket& t) {
  auto& p = pulled_.at(std::size_t(t.worker));
  p = std::max(p, t.clock);
  waiting_.push_back(t);
}

bool ps_core::ready(const ps::pull_ticket& t) const {
  const int64_t need = needs_below(t.clock);
  // exact: the weights hold exactly the waves below `need` (advance_exact
  // never adds wave need - 1 + 1 before every worker pulled past it).
  if (exact_) return applied_below_ >= need;
  return table_.global() >= need - staleness_;
}

// D = 0 from the start: adds the next wave t (in worker order) once every
// worker pushed it and - unless wave t + 1 is drained - every worker that
// pulls from this shard pulled wave t + 1 (or will never pull it), so a
// pull of wave t + 1 never sees wave t. Which workers pull here is known
// from their pushes (every worker pushes every wave to every shard, with
// its unit range), and all of them pushed wave t before it can go in.
bool ps_core::advance_exact() {
  const int64_t t = applied_below_;
  if (t >= table_.global()) return false;
  int64_t top = 0;  // past every worker's last wave (all finished: g is infinite)
  for (int64_t c : table_.clocks()) top = std::max(top, c);
  if (t >= top) return false;
  if (barrier_ >= 0 && t >= barrier_) return false;
  if (!drained(t + 1))
    for (std::size_t w = 0; w < pulled_.size(); ++w)
      if (pulls_here_[w] && pulled_[w] < t + 1 && total_[w] > t + 1) return false;
  while (!held_.empty() && held_.begin()->first.first == t) {
    auto node = held_.extract(held_.begin());
    add(node.mapped());
  }
  applied_below_ = t + 1;
  std::fill(included_.begin(), included_.end(), applied_below_);
  return true;
}

std::vector<ps::pull_ticket> ps_core::take_ready() {
  std::vector<ps::pull_ticket> out;
  for (;;) {
    if (at_barrier()) return out;  // the checkpoint first (it must not wait for a pull)
    for (auto it = waiting_.begin(); it != waiting_.end();)
      if (ready(*it)) {
        out.push_back(*it);
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    if (!out.empty() || !exact_ || !advance_exact()) return out;
  }
}

std::vector<std::size_t> ps_core::units_in(std::size_t first, std::size_t last) const {
  std::vector<std::size_t> v;
  for (auto it = units_.lower_bound(first); it != units_.end() && it->first <= last; ++it) v.push_back(it->first);
  return v;
}

status ps_core::push(int w, int64_t tag, std::size_t first, std::size_t last, std::vector<kernels::tensor> update,
                     std::vector<ps::pull_ticket>& released) {
  auto owned = std::make_shared<std::vector<kernels::tensor>>(std::move(update));
  std::vector<kernels::tensor_view> views;
  for (const auto& t : *owned) views.push_back(t.view());
  return push(w, tag, first, last, std::move(views), std::move(owned), released);
}

status ps_core::push(int w, int64_t tag, std::size_t first, std::size_t last,
                     std::vector<kernels::tensor_view> update, std::shared_ptr<const void> owner,
                     std::vector<ps::pull_ticket>& released) {
  std::size_t want = 0;
  for (std::size_t u : units_in(first, last)) {
    for (const auto& t : units_.at(u)) {
      if (want >= update.size())
        return make_error(errc::invalid_argument, "hetpipe ps: push of worker " + std::to_string(w) + " wave " +
                                                      std::to_string(tag) + " has " + std::to_string(update.size()) +
                                                      " tensors, too few for units [" + std::to_string(first) + ", " +
                                                      std::to_string(last) + "]");
      if (!(update[want].shape() == t.shape()))
        return make_error(errc::invalid_argument, "hetpipe ps: push of worker " + std::to_string(w) + " wave " +
                                                      std::to_string(tag) + ": tensor " + std::to_string(want) + " is " +
                                                      update[want].shape().to_string() + ", unit " + std::to_string(u) +
                                                      " holds " + t.shape().to_string());
      ++want;
    }
  }
  if (want != update.size())
    return make_error(errc::invalid_argument, "hetpipe ps: push of worker " + std::to_string(w) + " wave " +
                                                  std::to_string(tag) + " has " + std::to_string(update.size()) +
                                                  " tensors, want " + std::to_string(want));
  for (const auto& v : update)
    if (v.type() != dtype::f32 || v.where().kind != kernels::device_kind::cpu)
      return make_error(errc::invalid_argument, "hetpipe ps: push of worker " + std::to_string(w) + " wave " +
                                                    std::to_string(tag) + ": not host f32 tensors");
  HF_RETURN_IF_ERROR(table_.on_push(w, tag).error());
  pulls_here_.at(std::size_t(w)) = want > 0 || !units_in(first, last).empty();
  held_[{tag, w}] = held{first, last, tag, std::move(update), std::move(owner)};
  ++pushes_;
  apply_ready();
  for (auto& t : table_.released()) released.push_back(t);
  return {};
}

void ps_core::add(const held& h) {
  // A large stage's update is tens of MB, and a pull waits for this add
  // (D = 0: wave t goes in only when the pull of wave t + 2 may be
  // answered), so it is split over the service threads.
  kernels::trace::scope t("add update", kernels::trace::current_track(), "wave", h.wave);
  kernels::cpu::service_arena().execute([&] {
    std::size_t k = 0;
    for (std::size_t u : units_in(h.first, h.last))
      for (auto& t : units_.at(u)) {
        float* dst = t.f32();
        const float* src = h.update[k++].f32();
        kernels::cpu::parallel_elements(t.numel(), [=](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i) dst[i] += src[i];
        });
      }
  });
}

void ps_core::apply_ready() {
  const int64_t g = table_.global();
  const int64_t limit = barrier_ >= 0 ? std::min(g, barrier_) : g;
  if (exact_) return;  // take_ready adds, one wave at a time, between the answers
  if (staleness_ == 0 && !opt_.overlap) {  // waves < g in (wave, worker) order
    while (!held_.empty() && held_.begin()->first.first < limit) {
      auto node = held_.extract(held_.begin());
      add(node.mapped());
    }
    applied_below_ = limit;
    return;
  }
  // D > 0: on arrival, in each worker's wave order (below the barrier).
  for (auto it = held_.begin(); it != held_.end();) {
    const auto [tag, w] = it->first;
    if (tag < table_.clock(w) && (barrier_ < 0 || tag < barrier_)) {
      add(it->second);
      included_[std::size_t(w)] = tag + 1;
      it = held_.erase(it);
    } else {
      ++it;
    }
  }
  applied_below_ = limit;
}

std::vector<ps::pull_ticket> ps_core::set_staleness(int64_t d) {
  staleness_ = d;
  exact_ = false;  // pulls now see what has arrived (D = 0 too)
  table_.set_model(ps::consistency_model::ssp(d));
  apply_ready();
  return table_.released();
}

int64_t ps_core::applied_past() const {
  int64_t past = applied_below_;
  for (int64_t v : included_) past = std::max(past, v);
  return past;
}

void ps_core::set_barrier(int64_t label) {
  barrier_ = label;
  apply_ready();
}

bool ps_core::at_barrier() const {
  if (barrier_ < 0 || table_.global() < barrier_) return false;
  // Past the end (every VW finished below it): no more checkpoints.
  int64_t top = 0;
  for (int64_t c : table_.clocks()) top = std::max(top, c);
  if (barrier_ > top) return false;
  for (const auto& [key, h] : held_)
    if (key.first < barrier_) return false;
  return true;
}

std::vector<int64_t> ps_core::barrier_clocks() const {
  std::vector<int64_t> v;
  for (int64_t c : table_.clocks()) v.push_back(barrier_ >= 0 ? std::min(c, barrier_) : c);
  return v;
}

status ps_core::restore(std::map<std::size_t, std::vector<kernels::tensor>> units, const std::vector<int64_t>& clocks) {
  for (auto& [u, ts] : units)
    if (!units_.count(u))
      return make_error(errc::invalid_argument, "hetpipe ps: the checkpoint's unit " + std::to_string(u) +
                                                    " is not this shard's (the plan changed?)");
  // Every unit with parameters must be there, tensor for tensor; a unit
  // without (pooling, flatten) has nothing to restore.
  for (auto& [u, mine] : units_) {
    auto it = units.find(u);
    const std::size_t have = it == units.end() ? 0 : it->second.size();
    if (have != mine.size())
      return make_error(errc::invalid_argument, "hetpipe ps: the checkpoint has " + std::to_string(have) +
                                                    " tensors of unit " + std::to_string(u) + ", this shard holds " +
                                                    std::to_string(mine.size()) + " (the plan changed?)");
    for (std::size_t i = 0; i < have; ++i)
      if (!(it->second[i].shape() == mine[i].shape()))
        return make_error(errc::invalid_argument, "hetpipe ps: the checkpoint's unit " + std::to_string(u) +
                                                      " tensor " + std::to_string(i) + " is " +
                                                      it->second[i].shape().to_string() + ", here " +
                                                      mine[i].shape().to_string());
  }
  if (int(clocks.size()) != table_.workers())
    return make_error(errc::invalid_argument, "hetpipe ps: a checkpoint of " + std::to_string(clocks.size()) +
                                                  " workers, the plan has " + std::to_string(table_.workers()));
  for (auto& [u, ts] : units) units_[u] = std::move(ts);
  table_.restore(clocks);
  held_.clear();
  applied_below_ = table_.global();
  for (std::size_t w = 0; w < included_.size() && w < clocks.size(); ++w) included_[w] = clocks[w];
  std::fill(pulled_.begin(), pulled_.end(), -1);
  waiting_.clear();
  return {};
}

std::chrono::microseconds pipeline_send_linger(const topology::cluster& c, std::string_view node, int cpus,
                                               bool pinned) {
  const topology::node_spec* me = c.find_node(node);
  if (!me) return {};
  cpus = std::max(1, cpus);
  auto busy = [&](const topology::node_spec& n) {
    int t = 0;
    for (const auto& d : n.devices)
      t += d.kind == topology::device_kind::cuda ? 1 : topology::cpu_device_threads(n, d, cpus);
    return t;
  };
  int threads = 0;
  if (pinned) {
    threads = busy(*me);
  } else {
    for (const auto& n : c.nodes)
      if (n.host == me->host && n.cpus.empty()) threads += busy(n);
  }
  return threads >= cpus ? std::chrono::microseconds{2000} : std::chrono::microseconds{0};
}

}  // namespace hetflow::hetpipe
