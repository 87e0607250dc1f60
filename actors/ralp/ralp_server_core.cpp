#include "actors/ralp/ralp_server_core.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

namespace hetflow::ralp {

std::vector<kernels::parameter*> unit_parameters(kernels::model& m, std::size_t first, std::size_t last) {
  std::vector<kernels::parameter*> out;
  for (std::size_t i = first; i < last && i < m.size(); ++i) m.at(i).parameters(out);
  return out;
}

namespace {

// Gradient buffers the optimizer reads, for parameters whose units never run
// here (the server holds the lower weights but runs no lower unit).
void ensure_grad(kernels::parameter& p) {
  if (p.grad.empty() || !(p.grad.shape() == p.value.shape())) p.grad = kernels::tensor::empty(p.value.shape());
}

}  // namespace

expected<std::unique_ptr<server_core>> server_core::make(server_config cfg, kernels::model m) {
  if (cfg.workers < 1) return make_error(errc::invalid_argument, cfg.name + ": needs at least one worker");
  if (cfg.cut < 1 || cfg.cut > m.size())
    return make_error(errc::invalid_argument, cfg.name + ": cut " + std::to_string(cfg.cut) + " is outside [1, " +
                                                  std::to_string(m.size()) + "] for model " + m.name());
  for (auto* p : m.parameters())
    if (p->sparse)
      return make_error(errc::unsupported, cfg.name + ": model " + m.name() + " has sparse parameter " + p->name +
                                               "; strategy \"ralp\" supports dense models only");
  HF_ASSIGN_OR_RETURN(auto lower_opt, kernels::make_optimizer(cfg.optimizer));
  HF_ASSIGN_OR_RETURN(auto upper_opt, kernels::make_optimizer(cfg.optimizer));
  return std::unique_ptr<server_core>(
      new server_core(std::move(cfg), std::move(m), std::move(lower_opt), std::move(upper_opt)));
}

server_core::server_core(server_config cfg, kernels::model m, std::unique_ptr<kernels::optimizer> lower_opt,
                         std::unique_ptr<kernels::optimizer> upper_opt)
    : cfg_(std::move(cfg)), model_(std::move(m)), lower_opt_(std::move(lower_opt)), upper_opt_(std::move(upper_opt)),
      table_(cfg_.workers, ps::consistency_model::bsp()), final_(std::size_t(cfg_.workers), -1),
      act_clock_(std::size_t(cfg_.workers), 0), saved_(std::size_t(cfg_.workers)) {
  lower_ = unit_parameters(model_, 0, cfg_.cut);
  upper_ = unit_parameters(model_, cfg_.cut, model_.size());
  for (auto* p : lower_) ensure_grad(*p);
}

bool server_core::has_step(int w, int64_t c) const {
  const int64_t f = final_[std::size_t(w)];
  return f < 0 || c < f;
}

status server_core::hello(int w, int64_t final_clock, std::vector<ps::pull_ticket>& ready) {
  if (w < 0 || w >= cfg_.workers)
    return make_error(errc::invalid_argument, cfg_.name + ": hello from worker " + std::to_string(w) + " of " +
                                                  std::to_string(cfg_.workers));
  if (final_[std::size_t(w)] >= 0 && final_[std::size_t(w)] != final_clock)
    return make_error(errc::invalid_argument, cfg_.name + ": worker " + std::to_string(w) + " said " +
                                                  std::to_string(final_[std::size_t(w)]) + " steps, now " +
                                                  std::to_string(final_clock));
  HF_RETURN_IF_ERROR(table_.finish(w, final_clock));
  final_[std::size_t(w)] = final_clock;
  HF_RETURN_IF_ERROR(drain_lower());
  auto r = table_.released();
  ready.insert(ready.end(), r.begin(), r.end());
  return {};
}

status server_core::activations(int w, int64_t c, double lr, kernels::tensor act, std::vector<int32_t> labels,
                                std::vector<upper_result>& out) {
  const std::string who = cfg_.name + ": worker " + std::to_string(w);
  if (w < 0 || w >= cfg_.workers)
    return make_error(errc::invalid_argument, cfg_.name + ": activations from worker " + std::to_string(w) + " of " +
                                                  std::to_string(cfg_.workers));
  if (!has_upper()) return make_error(errc::invalid_argument, who + " sent activations, but the cut runs no unit here");
  if (c != act_clock_[std::size_t(w)])
    return make_error(errc::invalid_argument, who + " sent activations of clock " + std::to_string(c) +
                                                  ", the server expects its clock " +
                                                  std::to_string(act_clock_[std::size_t(w)]));
  if (!has_step(w, c))
    return make_error(errc::invalid_argument, who + " sent activations of clock " + std::to_string(c) +
                                                  " after announcing " + std::to_string(final_[std::size_t(w)]) +
                                                  " steps");
  const auto& want = model_.sample_shape(cfg_.cut);
  const auto& got = act.shape();
  bool fits = got.rank() == want.rank() + 1 && got[0] > 0 && got[0] == int64_t(labels.size());
  for (int i = 0; fits && i < want.rank(); ++i) fits = got[i + 1] == want[i];
  if (!fits)
    return make_error(errc::invalid_argument, who + " sent activations of shape " + got.to_string() + " with " +
                                                  std::to_string(labels.size()) + " labels; the cut at unit " +
                                                  std::to_string(cfg_.cut) + " takes (N, " + want.to_string() + ")");
  ++act_clock_[std::size_t(w)];
  acts_[c][w] = pending_act{lr, std::move(act), std::move(labels)};
  return run_upper(out);
}

status server_core::run_upper(std::vector<upper_result>& out) {
  using clock_type = std::chrono::steady_clock;
  for (;;) {
    auto it = acts_.find(next_upper_);
    if (it == acts_.end()) return {};
    auto& batch = it->second;
    for (int w = 0; w < cfg_.workers; ++w)
      if (has_step(w, next_upper_) && !batch.count(w)) return {};
    const int64_t c = next_upper_;
    const auto t0 = clock_type::now();
    status st;
    model_.context().run([&] {
      st = [&]() -> status {
        // Every worker's pass with the same weights (version c)...
        for (auto& [w, a] : batch) {
          HF_ASSIGN_OR_RETURN(kernels::tensor_view logits,
                              model_.forward(a.act.view(), kernels::mode::train, cfg_.cut, model_.size()));
          if (loss_grad_.empty()) loss_grad_ = kernels::tensor::empty(logits.shape());
          loss_grad_.resize(logits.shape());
          HF_ASSIGN_OR_RETURN(kernels::loss_result lr_res,
                              kernels::softmax_cross_entropy(logits, a.labels, loss_grad_.mutable_view()));
          if (!std::isfinite(lr_res.loss))
            return make_error(errc::internal, cfg_.name + ": the loss of worker " + std::to_string(w) +
                                                  "'s batch at clock " + std::to_string(c) + " became " +
                                                  std::to_string(lr_res.loss) + "; lower the learning rate");
          HF_ASSIGN_OR_RETURN(kernels::tensor_view dx, model_.backward(loss_grad_.view(), true, cfg_.cut, model_.size()));
          upper_result r;
          r.worker = w;
          r.clock = c;
          r.loss = lr_res;
          r.act_grad = kernels::tensor::empty(dx.shape());
          HF_RETURN_IF_ERROR(kernels::copy_into(dx, r.act_grad.mutable_view()));
          auto& saved = saved_[std::size_t(w)];
          saved.resize(upper_.size());
          for (std::size_t i = 0; i < upper_.size(); ++i) {
            const auto& g = upper_[i]->grad;
            if (saved[i].empty() || !(saved[i].shape() == g.shape())) saved[i] = kernels::tensor::empty(g.shape());
            std::memcpy(saved[i].f32(), g.f32(), g.byte_size());
          }
          out.push_back(std::move(r));
        }
        // ... then one optimizer step per worker gradient, in worker order.
        for (auto& [w, a] : batch) {
          const auto& saved = saved_[std::size_t(w)];
          for (std::size_t i = 0; i < upper_.size(); ++i)
            std::memcpy(upper_[i]->grad.f32(), saved[i].f32(), saved[i].byte_size());
          HF_RETURN_IF_ERROR(upper_opt_->step(upper_, a.lr));
          ++upper_updates_;
        }
        return {};
      }();
    });
    compute_s_ += std::chrono::duration<double>(clock_type::now() - t0).count();
    HF_RETURN_IF_ERROR(st);
    acts_.erase(it);
    ++next_upper_;
  }
}

status server_core::push(int w, int64_t c, double lr, std::vector<kernels::tensor> grads,
                         std::vector<ps::pull_ticket>& ready) {
  const std::string who = cfg_.name + ": worker " + std::to_string(w);
  if (w < 0 || w >= cfg_.workers)
    return make_error(errc::invalid_argument, cfg_.name + ": push from worker " + std::to_string(w) + " of " +
                                                  std::to_string(cfg_.workers));
  if (grads.size() != lower_.size())
    return make_error(errc::invalid_argument, who + " pushed " + std::to_string(grads.size()) +
                                                  " gradients; units [0, " + std::to_string(cfg_.cut) + ") have " +
                                                  std::to_string(lower_.size()) + " parameters");
  for (std::size_t i = 0; i < grads.size(); ++i)
    if (!(grads[i].shape() == lower_[i]->value.shape()))
      return make_error(errc::invalid_argument, who + " pushed a gradient of shape " + grads[i].shape().to_string() +
                                                    " for " + lower_[i]->name + " " +
                                                    lower_[i]->value.shape().to_string());
  if (has_upper() && c >= act_clock_[std::size_t(w)])
    return make_error(errc::invalid_argument, who + " pushed clock " + std::to_string(c) +
                                                  " before sending its activations of that clock");
  HF_ASSIGN_OR_RETURN(auto in_order, table_.on_push(w, c));
  (void)in_order;
  pushes_[{c, w}] = pending_push{lr, std::move(grads)};
  HF_RETURN_IF_ERROR(drain_lower());
  auto r = table_.released();
  ready.insert(ready.end(), r.begin(), r.end());
  return {};
}

status server_core::drain_lower() {
  // bsp: the pushes of every clock below the global clock, in (clock, worker) order.
  const int64_t g = table_.global();
  status st;
  while (st.ok() && !pushes_.empty() && pushes_.begin()->first.first < g) {
    auto node = pushes_.extract(pushes_.begin());
    auto& p = node.mapped();
    for (std::size_t i = 0; i < lower_.size(); ++i)
      std::memcpy(lower_[i]->grad.f32(), p.grads[i].f32(), p.grads[i].byte_size());
    model_.context().run([&] { st = lower_opt_->step(lower_, p.lr); });
    ++lower_updates_;
  }
  return st;
}

namespace {

std::string lower_name(const std::string& name) { return name + "-lower"; }
std::string upper_name(const std::string& name) { return name + "-upper"; }
constexpr const char* state_prefix = "state:";

}  // namespace

status server_core::write_checkpoint(ps::checkpoint_store& store, int64_t label, int keep) {
  std::vector<int64_t> clocks(std::size_t(cfg_.workers));
  for (int w = 0; w < cfg_.workers; ++w) {
    const int64_t f = final_[std::size_t(w)];
    clocks[std::size_t(w)] = f >= 0 ? std::min(label, f) : label;
  }
  auto one = [&](const std::string& file, const std::vector<kernels::parameter*>& params,
                 const std::vector<kernels::state_tensor*>& state, kernels::optimizer& opt) -> status {
    ps::checkpoint_meta meta;
    meta.shard_name = file;
    meta.shard = int(cfg_.cut);
    meta.shards = int(model_.size());
    meta.label = label;
    meta.clocks = clocks;
    meta.optimizer_steps = opt.steps();
    std::vector<ps::named_tensor> tensors;
    for (auto* p : params) tensors.push_back({p->name, &p->value});
    std::vector<std::string> names;  // the state tensors' names, kept alive
    names.reserve(state.size());
    for (auto* t : state) {
      names.push_back(state_prefix + t->name);
      tensors.push_back({names.back(), &t->value});
    }
    auto os = opt.steps() > 0 ? opt.state() : std::vector<kernels::state_tensor*>{};
    meta.state_tensors = int64_t(os.size());
    for (auto* t : os) tensors.push_back({t->name, &t->value});
    return ps::write_checkpoint(store, meta, tensors, keep);
  };
  HF_RETURN_IF_ERROR(one(lower_name(cfg_.name), lower_, {}, *lower_opt_));
  return one(upper_name(cfg_.name), upper_, model_.state(), *upper_opt_);
}

std::vector<int64_t> server_core::checkpoints_on_disk(const ps::checkpoint_store& store, const std::string& name,
                                                      std::vector<std::string>* problems) {
  std::vector<int64_t> good;
  const auto lower = ps::list_checkpoints(store, lower_name(name));
  const auto upper = ps::list_checkpoints(store, upper_name(name));
  for (int64_t label : lower) {
    if (std::find(upper.begin(), upper.end(), label) == upper.end()) continue;
    bool ok = true;
    for (const auto& file : {lower_name(name), upper_name(name)}) {
      auto ck = ps::read_checkpoint(store, file, label);
      if (!ck) {
        ok = false;
        if (problems) problems->push_back(ck.error().message());
      }
    }
    if (ok) good.push_back(label);
  }
  return good;
}

expected<std::size_t> server_core::checkpoint_cut(const ps::checkpoint_store& store, const std::string& name,
                                                  int64_t label) {
  HF_ASSIGN_OR_RETURN(ps::loaded_checkpoint ck, ps::read_checkpoint(store, lower_name(name), label));
  if (ck.meta.shard < 1) {
    return make_error(errc::invalid_argument, store.describe(ps::checkpoint_name(lower_name(name), label)) +
                                                  ": cut " + std::to_string(ck.meta.shard) + " is not a RALP cut");
  }
  return std::size_t(ck.meta.shard);
}

status server_core::restore(const ps::checkpoint_store& store, int64_t label) {
  if (lower_updates_ > 0 || upper_updates_ > 0 || next_upper_ > 0 || table_.global() > 0)
    return make_error(errc::internal, cfg_.name + ": restore after training started");
  std::vector<int64_t> clocks;
  auto one = [&](const std::string& file, const std::vector<kernels::parameter*>& params,
                 const std::vector<kernels::state_tensor*>& state, kernels::optimizer& opt) -> status {
    const std::string path = store.describe(ps::checkpoint_name(file, label));
    HF_ASSIGN_OR_RETURN(ps::loaded_checkpoint ck, ps::read_checkpoint(store, file, label));
    const auto& m = ck.meta;
    if (m.shard != int(cfg_.cut) || m.shards != int(model_.size()) || int(m.clocks.size()) != cfg_.workers)
      return make_error(errc::invalid_argument,
                        path + ": written with the cut at unit " + std::to_string(m.shard) + " of " +
                            std::to_string(m.shards) + " and " + std::to_string(m.clocks.size()) +
                            " workers; this job has the cut at " + std::to_string(cfg_.cut) + " of " +
                            std::to_string(model_.size()) + " and " + std::to_string(cfg_.workers) +
                            " workers (the model or the topology changed since the checkpoint)");
    const std::size_t n = params.size() + state.size();
    if (ck.tensors.size() != n + std::size_t(m.state_tensors))
      return make_error(errc::invalid_argument, path + ": holds " +
                                                    std::to_string(ck.tensors.size() - std::size_t(m.state_tensors)) +
                                                    " tensors, the model " + std::to_string(n) + " here");
    auto check = [&](std::size_t i, const std::string& want, const kernels::tensor& t) -> status {
      if (ck.names[i] != want || !(ck.tensors[i].shape() == t.shape()))
        return make_error(errc::invalid_argument, path + ": tensor " + std::to_string(i) + " is " + ck.names[i] + " " +
                                                      ck.tensors[i].shape().to_string() + ", the model has " + want +
                                                      " " + t.shape().to_string());
      return {};
    };
    for (std::size_t i = 0; i < params.size(); ++i) HF_RETURN_IF_ERROR(check(i, params[i]->name, params[i]->value));
    for (std::size_t i = 0; i < state.size(); ++i)
      HF_RETURN_IF_ERROR(check(params.size() + i, state_prefix + state[i]->name, state[i]->value));
    status st;
    model_.context().run([&] {
      st = kernels::restore_optimizer(opt, cfg_.optimizer.kind, params, m.optimizer_steps,
                                      std::span<const kernels::tensor>(ck.tensors).subspan(n, std::size_t(m.state_tensors)),
                                      std::span<const std::string>(ck.names).subspan(n, std::size_t(m.state_tensors)),
                                      path);
    });
    HF_RETURN_IF_ERROR(st);
    for (std::size_t i = 0; i < params.size(); ++i) {
      std::memcpy(params[i]->value.f32(), ck.tensors[i].f32(), ck.tensors[i].byte_size());
      ++params[i]->version;
    }
    for (std::size_t i = 0; i < state.size(); ++i)
      std::memcpy(state[i]->value.f32(), ck.tensors[params.size() + i].f32(), ck.tensors[params.size() + i].byte_size());
    clocks = m.clocks;
    return {};
  };
  HF_RETURN_IF_ERROR(one(lower_name(cfg_.name), lower_, {}, *lower_opt_));
  HF_RETURN_IF_ERROR(one(upper_name(cfg_.name), upper_, model_.state(), *upper_opt_));
  table_.restore(clocks);
  for (int w = 0; w < cfg_.workers; ++w) act_clock_[std::size_t(w)] = clocks[std::size_t(w)];
  next_upper_ = label;
  return {};
}

}  // namespace hetflow::ralp
