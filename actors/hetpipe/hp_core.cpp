#include "actors/hetpipe/hp_core.hpp"

#include <cstring>

namespace hetflow::hetpipe {

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
                                                       const kernels::optimizer_config& opt) {
  if (slots.empty()) return make_error(errc::invalid_argument, "hetpipe stage: no slots");
  std::unique_ptr<stage_core> sc(new stage_core());
  auto ref = slots[0].parameters();
  for (auto& m : slots) {
    auto ps = m.parameters();
    if (ps.size() != ref.size())
      return make_error(errc::invalid_argument, "hetpipe stage: slots with different parameters");
    for (std::size_t i = 0; i < ps.size(); ++i)
      if (!(ps[i]->value.shape() == ref[i]->value.shape()) || ps[i]->sparse)
        return make_error(errc::invalid_argument, "hetpipe stage: slots with different (or sparse) parameters");
    if (!m.state().empty())
      return make_error(errc::unsupported, "hetpipe: model units with saved state (batch norm running statistics) "
                                           "are not supported yet: the slots and the PS keep parameters only");
  }
  for (auto* p : ref) {
    kernels::parameter q;
    q.name = p->name;
    q.value = kernels::tensor::from(p->value.view());
    q.grad = kernels::tensor::zeros(p->value.shape());
    sc->local_.push_back(std::move(q));
    sc->base_.push_back(kernels::tensor::from(p->value.view()));
  }
  HF_ASSIGN_OR_RETURN(sc->opt_, kernels::make_optimizer(opt));
  sc->slot_mb_.assign(slots.size(), -1);
  sc->slot_in_.resize(slots.size());
  sc->slots_ = std::move(slots);
  sc->last_ = last;
  return sc;
}

int64_t stage_core::parameter_bytes() {
  int64_t n = 0;
  for (auto& t : base_) n += int64_t(t.view().byte_size());
  return n;
}

status stage_core::install(std::span<const kernels::tensor_view> values) {
  if (values.size() != local_.size())
    return make_error(errc::internal, "hetpipe stage: got " + std::to_string(values.size()) + " weight tensors, want " +
                                          std::to_string(local_.size()));
  for (std::size_t i = 0; i < local_.size(); ++i)
    if (values[i].type() != dtype::f32 || values[i].byte_size() != local_[i].value.view().byte_size())
      return make_error(errc::internal, "hetpipe stage: got " + std::to_string(values[i].byte_size()) + " bytes for " +
                                            local_[i].name + ", want " +
                                            std::to_string(local_[i].value.view().byte_size()));
  for (std::size_t i = 0; i < local_.size(); ++i) {
    const std::size_t n = values[i].byte_size();
    std::memcpy(local_[i].value.f32(), values[i].f32(), n);
    ++local_[i].version;
    std::memcpy(base_[i].f32(), values[i].f32(), n);
  }
  for (auto& m : slots_) {
    auto ps = m.parameters();
    for (std::size_t i = 0; i < ps.size(); ++i) {
      std::memcpy(ps[i]->value.f32(), values[i].f32(), values[i].byte_size());
      ++ps[i]->version;
    }
  }
  return {};
}

expected<kernels::tensor_view> stage_core::forward(int64_t p, kernels::tensor_view input) {
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
  // The slot keeps its own copy: units may keep a view of their input for
  // the backward pass, and the caller's buffer (a batch, a message) moves on.
  if (slot_in_[s].empty() || !(slot_in_[s].shape() == input.shape())) slot_in_[s] = kernels::tensor::empty(input.shape());
  std::memcpy(slot_in_[s].f32(), input.f32(), input.byte_size());
  return slots_[s].forward(slot_in_[s].view(), kernels::mode::train);
}

expected<stage_core::last_result> stage_core::forward_backward_last(int64_t p, kernels::tensor_view input,
                                                                    std::span<const int32_t> labels,
                                                                    bool need_input_grad) {
  if (!last_) return make_error(errc::internal, "hetpipe stage: the loss belongs to the last stage");
  HF_ASSIGN_OR_RETURN(kernels::tensor_view logits, forward(p, input));
  if (loss_grad_.empty() || !(loss_grad_.shape() == logits.shape())) loss_grad_ = kernels::tensor::empty(logits.shape());
  HF_ASSIGN_OR_RETURN(kernels::loss_result r, kernels::softmax_cross_entropy(logits, labels, loss_grad_.mutable_view()));
  HF_ASSIGN_OR_RETURN(kernels::tensor_view g, backward(p, loss_grad_.view(), need_input_grad));
  return last_result{r, g};
}

expected<kernels::tensor_view> stage_core::backward(int64_t p, kernels::tensor_view grad_output, bool need_input_grad) {
  const std::size_t s = std::size_t(p % int64_t(slots_.size()));
  if (slot_mb_[s] != p)
    return make_error(errc::internal, "hetpipe stage: backward of minibatch " + std::to_string(p) +
                                          " but its slot holds " + std::to_string(slot_mb_[s]));
  return slots_[s].backward(grad_output, need_input_grad);
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
  std::vector<kernels::parameter*> targets;
  for (std::size_t i = 0; i < local_.size(); ++i) {
    std::memcpy(local_[i].grad.f32(), ps[i]->grad.f32(), local_[i].grad.view().byte_size());
    targets.push_back(&local_[i]);
  }
  HF_RETURN_IF_ERROR(opt_->step(targets, lr));
  slot_mb_[s] = -1;
  ++next_update_;
  return {};
}

status stage_core::restore(kernels::optimizer_kind kind, int64_t steps, std::span<const kernels::tensor> state,
                           std::span<const std::string> names, int64_t next, const std::string& where) {
  std::vector<kernels::parameter*> targets;
  for (auto& p : local_) targets.push_back(&p);
  HF_RETURN_IF_ERROR(kernels::restore_optimizer(*opt_, kind, targets, steps, state, names, where));
  next_update_ = next;
  std::fill(slot_mb_.begin(), slot_mb_.end(), -1);
  return {};
}

std::vector<kernels::tensor> stage_core::wave_update() const {
  std::vector<kernels::tensor> u;
  for (std::size_t i = 0; i < local_.size(); ++i) {
    kernels::tensor d = kernels::tensor::empty(local_[i].value.shape());
    const float* a = local_[i].value.f32();
    const float* b = base_[i].f32();
    float* o = d.f32();
    const int64_t n = d.numel();
    for (int64_t k = 0; k < n; ++k) o[k] = a[k] - b[k];
    u.push_back(std::move(d));
  }
  return u;
}

ps_core::ps_core(std::map<std::size_t, std::vector<kernels::tensor>> units, int workers, int64_t staleness)
    : units_(std::move(units)), table_(workers, ps::consistency_model::ssp(staleness)), staleness_(staleness) {}

std::vector<std::size_t> ps_core::units_in(std::size_t first, std::size_t last) const {
  std::vector<std::size_t> v;
  for (auto it = units_.lower_bound(first); it != units_.end() && it->first <= last; ++it) v.push_back(it->first);
  return v;
}

status ps_core::push(int w, int64_t tag, std::size_t first, std::size_t last, std::vector<kernels::tensor> update,
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
  HF_RETURN_IF_ERROR(table_.on_push(w, tag).error());
  held_[{tag, w}] = held{first, last, std::move(update)};
  ++pushes_;
  apply_ready();
  for (auto& t : table_.released()) released.push_back(t);
  return {};
}

void ps_core::add(const held& h) {
  std::size_t k = 0;
  for (std::size_t u : units_in(h.first, h.last))
    for (auto& t : units_.at(u)) {
      float* dst = t.f32();
      const float* src = h.update[k++].f32();
      const int64_t n = t.numel();
      for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
    }
}

void ps_core::apply_ready() {
  const int64_t g = table_.global();
  const int64_t limit = barrier_ >= 0 ? std::min(g, barrier_) : g;
  if (staleness_ == 0) {  // waves < g in (wave, worker) order
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
      it = held_.erase(it);
    } else {
      ++it;
    }
  }
  applied_below_ = limit;
}

std::vector<ps::pull_ticket> ps_core::set_staleness(int64_t d) {
  staleness_ = d;
  table_.set_model(ps::consistency_model::ssp(d));
  apply_ready();
  return table_.released();
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
  return {};
}

}  // namespace hetflow::hetpipe
