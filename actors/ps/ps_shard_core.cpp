#include "actors/ps/ps_shard_core.hpp"

#include <algorithm>
#include <climits>

namespace hetflow::ps {

expected<std::unique_ptr<shard_core>> shard_core::make(shard_config cfg, std::vector<kernels::parameter> params) {
  if (cfg.workers < 1) return make_error(errc::invalid_argument, "ps shard " + cfg.name + ": no workers");
  for (std::size_t i = 1; i < params.size(); ++i)
    if (params[i - 1].sparse && !params[i].sparse)
      return make_error(errc::invalid_argument, "ps shard " + cfg.name + ": dense parameter " + params[i].name +
                                                    " after a sparse one");
  HF_ASSIGN_OR_RETURN(auto opt, kernels::make_optimizer(cfg.optimizer));
  if (!cfg.store && !cfg.checkpoint_dir.empty()) cfg.store = make_directory_store(cfg.checkpoint_dir);
  return std::unique_ptr<shard_core>(new shard_core(std::move(cfg), std::move(params), std::move(opt)));
}

shard_core::shard_core(shard_config cfg, std::vector<kernels::parameter> params,
                       std::unique_ptr<kernels::optimizer> opt)
    : cfg_(std::move(cfg)), params_(std::move(params)), opt_(std::move(opt)), table_(cfg_.workers, cfg_.model),
      applied_(std::size_t(cfg_.workers), 0) {
  for (auto& p : params_) {
    ptrs_.push_back(&p);
    if (!p.sparse) ++dense_;
  }
  next_checkpoint_ = cfg_.checkpoint_every;
}

status shard_core::push(int w, int64_t tag, double lr, std::vector<kernels::tensor> grads,
                        std::vector<kernels::sparse_rows> sparse, std::vector<pull_ticket>& ready) {
  const std::string from = cfg_.name + ": a push from worker " + std::to_string(w);
  if (grads.size() != dense_ || sparse.size() != params_.size() - dense_)
    return make_error(errc::invalid_argument, from + " has " + std::to_string(grads.size()) + " dense and " +
                                                  std::to_string(sparse.size()) + " sparse gradients, the shard holds " +
                                                  std::to_string(dense_) + " and " +
                                                  std::to_string(params_.size() - dense_));
  for (std::size_t i = 0; i < grads.size(); ++i)
    if (!(grads[i].shape() == params_[i].value.shape()))
      return make_error(errc::invalid_argument, cfg_.name + ": worker " + std::to_string(w) + " pushed " +
                                                    grads[i].shape().to_string() + " for " + params_[i].name +
                                                    ", which is " + params_[i].value.shape().to_string());
  for (std::size_t j = 0; j < sparse.size(); ++j) {
    const auto& p = params_[dense_ + j];
    const auto& g = sparse[j];
    const int64_t rows = p.value.shape()[0], dim = p.value.shape().inner_numel(), n = int64_t(g.rows.size());
    if (!(g.values.shape() == kernels::shape{n, dim}) && !(n == 0 && g.values.numel() == 0))
      return make_error(errc::invalid_argument, from + " has values " + g.values.shape().to_string() + " for " +
                                                    std::to_string(n) + " rows of " + p.name);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = g.rows[std::size_t(i)];
      if (r < 0 || r >= rows || (i > 0 && r <= g.rows[std::size_t(i - 1)]))
        return make_error(errc::invalid_argument, from + ": row " + std::to_string(r) + " of " + p.name +
                                                      " is out of range [0, " + std::to_string(rows) +
                                                      ") or not after the previous one");
    }
  }
  HF_ASSIGN_OR_RETURN(auto in_order, table_.on_push(w, tag));
  (void)in_order;
  pending_.emplace(std::make_pair(tag, w), pending{lr, std::move(grads), std::move(sparse)});
  HF_RETURN_IF_ERROR(drain());
  auto r = table_.released();
  ready.insert(ready.end(), r.begin(), r.end());
  return {};
}

status shard_core::done(int w, int64_t final_clock, std::vector<pull_ticket>& ready) {
  HF_RETURN_IF_ERROR(table_.finish(w, final_clock));
  HF_RETURN_IF_ERROR(drain());
  auto r = table_.released();
  ready.insert(ready.end(), r.begin(), r.end());
  return {};
}

status shard_core::apply(int w, pending& p) {
  for (std::size_t i = 0; i < dense_; ++i) std::swap(params_[i].grad, p.grads[i]);
  for (std::size_t j = 0; j < p.sparse.size(); ++j) std::swap(params_[dense_ + j].sparse_grad, p.sparse[j]);
  HF_RETURN_IF_ERROR(opt_->step(ptrs_, p.lr));
  ++applied_[std::size_t(w)];
  ++updates_;
  return {};
}

status shard_core::request_checkpoint(int64_t label, std::vector<pull_ticket>& ready) {
  const std::string me = cfg_.name + ": checkpoint at clock " + std::to_string(label);
  if (!cfg_.store) return make_error(errc::invalid_argument, me + ": the job has no checkpoint_dir");
  if (table_.all_finished()) return make_error(errc::invalid_argument, me + ": every worker has finished");
  if (label <= last_label_)
    return make_error(errc::invalid_argument, me + ": not after the last checkpoint (" + std::to_string(last_label_) + ")");
  for (std::size_t w = 0; w < applied_.size(); ++w)
    if (applied_[w] > label)
      return make_error(errc::invalid_argument, me + ": worker " + std::to_string(w) + "'s update " +
                                                    std::to_string(applied_[w] - 1) + " is applied already");
  requested_.insert(label);
  HF_RETURN_IF_ERROR(drain());
  auto r = table_.released();
  ready.insert(ready.end(), r.begin(), r.end());
  return {};
}

status shard_core::drain() {
  for (;;) {
    const bool all_done = table_.all_finished();
    const int64_t g = table_.global();
    // The next cut: the periodic label, or a requested one before it.
    int64_t next = cfg_.checkpoint_every > 0 ? next_checkpoint_ : INT64_MAX;
    if (!requested_.empty()) next = std::min(next, *requested_.begin());
    const bool deferring = next != INT64_MAX && cfg_.store && !all_done;
    // Apply every eligible push, in (tag, worker) order.
    for (auto it = pending_.begin(); it != pending_.end();) {
      const int64_t tag = it->first.first;
      const int w = it->first.second;
      const bool in_order = tag == applied_[std::size_t(w)] && tag < table_.clock(w);
      const bool bsp_ok = table_.model().kind != consistency::bsp || tag < g;
      const bool ckpt_ok = !deferring || tag < next;
      if (!(in_order && bsp_ok && ckpt_ok)) {
        // bsp and checkpoints hold back whole tags: later tags wait too.
        if (!bsp_ok || !ckpt_ok) break;
        ++it;
        continue;
      }
      HF_RETURN_IF_ERROR(apply(w, it->second));
      pending_.erase(it);
      it = pending_.begin();  // an applied push may make a held one of the same worker eligible
    }
    if (deferring && g >= next) {
      std::vector<int64_t> cut(applied_.size());
      for (std::size_t w = 0; w < cut.size(); ++w) cut[w] = std::min(applied_[w], next);
      for (std::size_t w = 0; w < cut.size(); ++w)
        if (applied_[w] != cut[w])
          return make_error(errc::internal, cfg_.name + ": checkpoint " + std::to_string(next) +
                                                " would hold update " + std::to_string(applied_[w]) + " of worker " +
                                                std::to_string(w));
      HF_RETURN_IF_ERROR(checkpoint(next, cut));
      if (cfg_.checkpoint_every > 0 && next == next_checkpoint_) next_checkpoint_ += cfg_.checkpoint_every;
      requested_.erase(next);
      continue;  // pushes held for this checkpoint may go now
    }
    if (all_done && !final_written_) {
      if (!pending_.empty())
        return make_error(errc::internal, cfg_.name + ": " + std::to_string(pending_.size()) +
                                              " pushes left after every worker finished");
      final_written_ = true;
      requested_.clear();  // the final cut below holds them all
      if (cfg_.store) {
        int64_t label = 0;
        for (auto c : applied_) label = std::max(label, c);
        HF_RETURN_IF_ERROR(checkpoint(label, applied_));
      }
    }
    return {};
  }
}

status shard_core::checkpoint(int64_t label, const std::vector<int64_t>& clocks) {
  checkpoint_meta meta;
  meta.shard_name = cfg_.name;
  meta.shard = cfg_.shard;
  meta.shards = cfg_.shards;
  meta.label = label;
  meta.clocks = clocks;
  meta.optimizer_steps = opt_->steps();
  std::vector<named_tensor> tensors;
  for (auto& p : params_) tensors.push_back({p.name, &p.value});
  auto state = opt_->steps() > 0 ? opt_->state() : std::vector<kernels::state_tensor*>{};
  meta.state_tensors = int64_t(state.size());
  for (auto* s : state) tensors.push_back({s->name, &s->value});
  HF_RETURN_IF_ERROR(write_checkpoint(*cfg_.store, meta, tensors));
  ++written_;
  last_label_ = label;
  return {};
}

std::vector<int64_t> shard_core::checkpoints_on_disk(std::vector<std::string>* problems) const {
  if (!cfg_.store) return {};
  std::vector<int64_t> good;
  for (int64_t label : list_checkpoints(*cfg_.store, cfg_.name)) {
    auto ck = read_checkpoint(*cfg_.store, cfg_.name, label);
    if (ck) {
      good.push_back(label);
    } else if (problems) {
      problems->push_back(ck.error().message());
    }
  }
  return good;
}

status shard_core::restore(int64_t label) {
  if (updates_ > 0 || !pending_.empty())
    return make_error(errc::internal, cfg_.name + ": restore after training started");
  if (!cfg_.store) return make_error(errc::invalid_argument, cfg_.name + ": no checkpoint_dir to restore from");
  const std::string path = cfg_.store->describe(checkpoint_name(cfg_.name, label));
  HF_ASSIGN_OR_RETURN(loaded_checkpoint ck, read_checkpoint(*cfg_.store, cfg_.name, label));
  const auto& m = ck.meta;
  if (m.shard_name != cfg_.name || m.shard != cfg_.shard || m.shards != cfg_.shards ||
      int(m.clocks.size()) != cfg_.workers)
    return make_error(errc::invalid_argument,
                      path + ": written by shard " + std::to_string(m.shard) + " of " + std::to_string(m.shards) +
                          " with " + std::to_string(m.clocks.size()) + " workers; this job has shard " +
                          std::to_string(cfg_.shard) + " of " + std::to_string(cfg_.shards) + " with " +
                          std::to_string(cfg_.workers) + " workers (the topology changed since the checkpoint)");
  const std::size_t np = params_.size();
  if (ck.tensors.size() != np + std::size_t(m.state_tensors))
    return make_error(errc::invalid_argument, path + ": holds " + std::to_string(ck.tensors.size() - std::size_t(m.state_tensors)) +
                                                  " parameters, the shard " + std::to_string(np));
  for (std::size_t i = 0; i < np; ++i)
    if (ck.names[i] != params_[i].name || !(ck.tensors[i].shape() == params_[i].value.shape()))
      return make_error(errc::invalid_argument, path + ": tensor " + std::to_string(i) + " is " + ck.names[i] +
                                                    " " + ck.tensors[i].shape().to_string() + ", the model has " +
                                                    params_[i].name + " " + params_[i].value.shape().to_string());
  HF_RETURN_IF_ERROR(kernels::restore_optimizer(
      *opt_, cfg_.optimizer.kind, ptrs_, m.optimizer_steps,
      std::span<const kernels::tensor>(ck.tensors).subspan(np, std::size_t(m.state_tensors)),
      std::span<const std::string>(ck.names).subspan(np, std::size_t(m.state_tensors)), path));
  for (std::size_t i = 0; i < np; ++i) {
    std::copy(ck.tensors[i].f32(), ck.tensors[i].f32() + ck.tensors[i].numel(), params_[i].value.f32());
    ++params_[i].version;
  }
  table_.restore(m.clocks);
  applied_ = m.clocks;
  if (cfg_.checkpoint_every > 0) next_checkpoint_ = (label / cfg_.checkpoint_every + 1) * cfg_.checkpoint_every;
  last_label_ = label;
  return {};
}

}  // namespace hetflow::ps
