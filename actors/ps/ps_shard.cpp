// ps_shard (ps_shard.hpp).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <optional>

#include "actors/builtin/job_actor.hpp"
#include "actors/builtin/stream_job.hpp"
#include "actors/control_board.hpp"
#include "actors/json.hpp"
#include "actors/log.hpp"
#include "actors/ps/clock_gauges.hpp"
#include "actors/ps/ps_options.hpp"
#include "actors/ps/ps_protocol.hpp"
#include "actors/ps/ps_shard.hpp"
#include "actors/ps/ps_shard_core.hpp"
#include "kernels/trace.hpp"
#include "kernels/waits.hpp"

namespace hetflow::actors::ps_job {
namespace {

using clock_type = std::chrono::steady_clock;

double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

std::string who_worker(const std::shared_ptr<node_services>& svc, int w) {
  std::string n = svc->node_of(worker_name(w));
  return "worker '" + worker_name(w) + "'" + (n.empty() ? "" : " on node '" + n + "'");
}

// ---------------------------------------------------------------- ps_shard

struct shard_state : builtin::job_actor_state {
  int index = 0;
  ps_options opts;
  std::unique_ptr<ps::shard_core> core;
  struct waiting {
    int worker = 0;
    int64_t clock = 0;
    clock_type::time_point since;
    std::vector<ps::row_request> rows;  // per sparse piece
    std::unique_ptr<kernels::waits::scope> open;  // while held (watchdog and trace)
  };
  std::map<uint64_t, waiting> waits;       // pulls held by the clock table, by ticket id
  std::vector<std::pair<int, int64_t>> finals;  // final pulls (every row): answered when every worker finished
  std::vector<int64_t> piece_rows;              // rows of each sparse piece
  clock_type::time_point finals_since;
  uint64_t next_id = 1;
  bool restored = false;
  std::optional<std::vector<int64_t>> readable_checkpoints;
  int64_t restored_label = -1;
  std::vector<int64_t> restored_clocks;
  int64_t pulls = 0, pulls_with_push = 0, pushes = 0, held = 0, max_lag = 0, rows_pulled = 0, rows_pushed = 0;
  int64_t bytes_in = 0, bytes_out = 0;
  double wait_seconds = 0, push_seconds = 0;
  bool over = false;
  kernels::trace::track_id tk = 0;  // the shard's trace track (0: not tracing)
  // Held pulls overlap one another (one per worker at most), so each
  // worker's waits get a track of their own, registered on first use.
  std::vector<kernels::trace::track_id> held_tk;
  int64_t checkpoint_generation = 0;  // the last `hetflow shell` checkpoint request taken
};
using shard_actor = caf::stateful_actor<shard_state>;

void shard_fail(shard_actor* self, const std::string& why) {
  auto& st = self->state;
  if (st.over) return;
  st.over = true;
  builtin::fail_job_actor(self, why);
}

void shard_send(shard_actor* self, const std::string& target, wire_buffer_ref msg) {
  self->state.bytes_out += int64_t(msg->size());
  auto s = self->state.svc->send_wire(target, std::move(msg));
  if (!s.ok()) shard_fail(self, self->state.me + ": cannot answer " + target + ": " + s.message());
}

// `rows`: per sparse piece, the rows asked for (null: every row).
void answer(shard_actor* self, int w, int64_t clock, const std::vector<ps::row_request>* rows = nullptr) {
  auto& st = self->state;
  kernels::trace::scope t_answer("answer pull", st.tk, "worker", w);
  const auto& table = st.core->clocks();
  ps::ps_info info;
  info.worker = w;
  info.shard = st.index;
  info.clock = clock;
  info.global = table.global();
  info.aux = st.core->updates_applied();
  if (info.global != ps::infinite_clock) st.max_lag = std::max(st.max_lag, clock - info.global);
  std::vector<const kernels::tensor*> ts;
  const auto& params = st.core->params();
  const std::size_t dense = st.core->dense_count();
  for (std::size_t i = 0; i < dense; ++i) ts.push_back(&params[i].value);
  std::vector<kernels::tensor> gathered;  // the rows asked for, one tensor per piece
  gathered.reserve(params.size() - dense);
  for (std::size_t j = 0; j + dense < params.size(); ++j) {
    const auto& table = params[dense + j].value;
    if (!rows || (*rows)[j].all) {
      ts.push_back(&table);
      st.rows_pulled += table.shape()[0];
      continue;
    }
    const auto& want = (*rows)[j].rows;
    const int64_t dim = table.shape().inner_numel();
    kernels::tensor t = kernels::tensor::empty({int64_t(want.size()), dim});
    float* out = t.f32();
    const float* in = table.f32();
    for (std::size_t i = 0; i < want.size(); ++i)
      std::memcpy(out + int64_t(i) * dim, in + want[i] * dim, std::size_t(dim) * sizeof(float));
    st.rows_pulled += int64_t(want.size());
    gathered.push_back(std::move(t));
    ts.push_back(&gathered.back());
  }
  shard_send(self, worker_name(w), ps::make_tensors(ps::kind_weights, st.me, worker_name(w), info, ts));
}

void answer_ready(shard_actor* self, const std::vector<ps::pull_ticket>& ready) {
  auto& st = self->state;
  for (auto& t : ready) {
    auto it = st.waits.find(t.id);
    if (it != st.waits.end()) {
      st.wait_seconds += since(it->second.since);
      it->second.open.reset();  // the pull waited for the slowest worker's clock (SSP bound)
    }
    answer(self, t.worker, t.clock, it != st.waits.end() ? &it->second.rows : nullptr);
    if (it != st.waits.end()) st.waits.erase(it);
  }
  if (!st.finals.empty() && st.core->clocks().all_finished()) {
    for (auto [w, c] : st.finals) answer(self, w, c);
    st.finals.clear();
  }
}

void send_error(shard_actor* self, int w, const std::string& why) {
  auto& st = self->state;
  ps::ps_info info;
  info.worker = w;
  info.shard = st.index;
  (void)st.svc->send_wire(worker_name(w), ps::make_control(ps::kind_error, st.me, worker_name(w), info, {}, why));
}

// The slowest worker, for timeout messages.
std::string slowest_text(shard_actor* self) {
  auto& st = self->state;
  const auto& t = st.core->clocks();
  int s = t.slowest();
  if (s < 0) return "every worker has finished";
  return who_worker(st.svc, s) + " is the slowest, at clock " + std::to_string(t.clock(s)) + " (global clock " +
         std::to_string(t.global()) + ", " + t.model().to_string() + ")";
}


// `hetflow shell`'s checkpoint (control_board.hpp): a new request is taken
// once, and answered on the board.
void take_checkpoint_request(shard_actor* self) {
  auto& st = self->state;
  if (!st.core) return;
  const auto taken = control::take_new_checkpoint_request(st.checkpoint_generation);
  if (!taken) return;
  const auto& req = *taken;
  std::vector<ps::pull_ticket> ready;
  const int64_t before = st.core->checkpoints_written();
  if (auto s = st.core->request_checkpoint(req.label, ready); !s.ok()) {
    log_warn("shell: " + s.message());
    control::answer_checkpoint(st.me, req.generation, false, s.message());
    return;
  }
  const bool written = st.core->checkpoints_written() > before;
  log_warn("shell: " + st.me + " takes a checkpoint at clock " + std::to_string(req.label) +
           (written ? " (written now)" : " (written when the global clock reaches it)"));
  control::answer_checkpoint(st.me, req.generation, true,
                             st.me + ": checkpoint at clock " + std::to_string(req.label) +
                                 (written ? " written (" + ps::checkpoint_path(st.opts.checkpoint_dir, st.me, req.label) + ")"
                                          : " when the global clock reaches it (now " +
                                                std::to_string(st.core->clocks().global()) + ")"));
  answer_ready(self, ready);
}

void on_tick(shard_actor* self) {
  auto& st = self->state;
  if (st.over) return;
  take_checkpoint_request(self);
  if (st.over) return;
  auto now = clock_type::now();
  const auto limit = std::chrono::duration<double>(st.opts.timeout_s);
  for (auto& [id, w] : st.waits) {
    if (now - w.since < limit) continue;
    std::string why = st.me + ": the pull of " + who_worker(st.svc, w.worker) + " at clock " +
                      std::to_string(w.clock) + " waited " + std::to_string(int(st.opts.timeout_s)) +
                      " s (ps_timeout): " + slowest_text(self);
    send_error(self, w.worker, why);
    return shard_fail(self, why);
  }
  if (!st.finals.empty() && now - st.finals_since >= limit) {
    std::string why = st.me + ": the final pull of " + who_worker(st.svc, st.finals.front().first) + " waited " +
                      std::to_string(int(st.opts.timeout_s)) + " s for every worker to finish: " + slowest_text(self);
    send_error(self, st.finals.front().first, why);
    return shard_fail(self, why);
  }
  self->delayed_send(self, std::chrono::milliseconds(250), tick_atom::value);
}

// A pull of clock `clock` by worker w: answered now when the clock table
// allows, else held until a push or done releases it (answer_ready).
void take_pull(shard_actor* self, int w, int64_t clock, std::vector<ps::row_request> rows) {
  auto& st = self->state;
  ps::pull_ticket t{w, clock, st.next_id++};
  if (st.core->pull(t)) {
    answer(self, w, t.clock, st.piece_rows.empty() ? nullptr : &rows);
  } else {
    ++st.held;
    // Held pulls overlap one another: each worker's go on a trace track
    // of their own.
    kernels::trace::track_id held_tk = 0;
    if (kernels::trace::enabled()) {
      if (st.held_tk.size() <= std::size_t(w)) st.held_tk.resize(std::size_t(w) + 1, 0);
      auto& tk = st.held_tk[std::size_t(w)];
      if (tk == 0) tk = kernels::trace::track(st.me + " held pulls of " + worker_name(w));
      held_tk = tk;
    }
    const auto& clocks = st.core->clocks();
    const int slow = clocks.slowest();
    auto open = std::make_unique<kernels::waits::scope>(
        st.me,
        slow < 0 ? std::string("the other workers")
                 : who_worker(st.svc, slow) + " (the slowest, at clock " + std::to_string(clocks.clock(slow)) + ")",
        "the clock that lets it answer " + worker_name(w) + "'s pull of clock " + std::to_string(t.clock) +
            " (" + clocks.model().to_string() + ")",
        kernels::waits::span{held_tk, held_tk ? "wait: clock (held pull)" : nullptr, "clock", t.clock});
    st.waits[t.id] = shard_state::waiting{w, t.clock, clock_type::now(), std::move(rows), std::move(open)};
  }
}

void on_shard_wire(shard_actor* self, const std::string& node, const wire_buffer_ref& buf) {
  auto& st = self->state;
  if (st.over) return;
  st.bytes_in += int64_t(buf->size());
  auto m = ps::read_ps_message(buf, st.svc->read_limits(), "node '" + node + "'");
  if (!m) return shard_fail(self, st.me + ": " + m.error().to_string());
  const int w = m->info.worker;
  if (w < 0 || w >= st.opts.workers || m->sender != worker_name(w))
    return shard_fail(self, st.me + ": a message from '" + m->sender + "' on node '" + node + "' says worker " +
                                std::to_string(w) + " (the job has " + std::to_string(st.opts.workers) + ")");
  std::vector<ps::pull_ticket> ready;
  switch (m->kind) {
    case ps::kind_pull: {
      ++st.pulls;
      if (m->info.flags & ps::flag_final) {
        if (st.finals.empty()) st.finals_since = clock_type::now();
        st.finals.emplace_back(w, m->info.clock);
        break;
      }
      std::vector<ps::row_request> rows;
      if (!st.piece_rows.empty()) {
        if (!(m->info.flags & ps::flag_rows))
          return shard_fail(self, st.me + ": a pull from " + who_worker(st.svc, w) +
                                      " lists no embedding rows, but the shard holds " +
                                      std::to_string(st.piece_rows.size()) + " table pieces");
        auto r = ps::decode_rows(m->list, st.piece_rows, true, who_worker(st.svc, w));
        if (!r) return shard_fail(self, st.me + ": " + r.error().message());
        rows = std::move(*r);
      }
      take_pull(self, w, m->info.clock, std::move(rows));
      break;
    }
    case ps::kind_push: {
      auto t0 = clock_type::now();
      kernels::trace::scope t_apply("apply", st.tk, "worker", w);
      kernels::waits::progress();
      const std::size_t dense = st.core->dense_count();
      if (m->tensors != dense + st.piece_rows.size() || (!st.piece_rows.empty() && !(m->info.flags & ps::flag_rows)))
        return shard_fail(self, st.me + ": a push from " + who_worker(st.svc, w) + " has " +
                                    std::to_string(m->tensors) + " tensors, the shard holds " + std::to_string(dense) +
                                    " dense parameters and " + std::to_string(st.piece_rows.size()) + " table pieces");
      std::vector<kernels::tensor> grads;
      for (std::size_t i = 0; i < dense; ++i) {
        auto g = ps::tensor_of(*m, i);
        if (!g) return shard_fail(self, st.me + ": " + g.error().to_string());
        grads.push_back(std::move(*g));
      }
      std::vector<kernels::sparse_rows> sparse;
      if (!st.piece_rows.empty()) {
        auto r = ps::decode_rows(m->list, st.piece_rows, false, who_worker(st.svc, w));
        if (!r) return shard_fail(self, st.me + ": " + r.error().message());
        for (std::size_t j = 0; j < r->size(); ++j) {
          auto g = ps::tensor_of(*m, dense + j);
          if (!g) return shard_fail(self, st.me + ": " + g.error().to_string());
          st.rows_pushed += int64_t((*r)[j].rows.size());
          sparse.push_back(kernels::sparse_rows{std::move((*r)[j].rows), std::move(*g)});
        }
      }
      ++st.pushes;
      if (auto s = st.core->push(w, m->info.clock, m->info.lr, std::move(grads), std::move(sparse), ready); !s.ok()) {
        send_error(self, w, s.message());
        return shard_fail(self, s.message());
      }
      st.push_seconds += since(t0);
      t_apply.end();
      if (m->info.flags & ps::flag_pull_next) {
        if (!st.piece_rows.empty())
          return shard_fail(self, st.me + ": a push from " + who_worker(st.svc, w) +
                                      " carries its next pull, but the shard holds table pieces, whose pulls list "
                                      "rows (nodes running different hetflow builds?)");
        ++st.pulls;
        ++st.pulls_with_push;
        take_pull(self, w, m->info.clock + 1, {});
      }
      break;
    }
    case ps::kind_done:
      if (auto s = st.core->done(w, m->info.clock, ready); !s.ok()) {
        send_error(self, w, s.message());
        return shard_fail(self, s.message());
      }
      break;
    case ps::kind_hello: {
      // Read (and checked) once, for the first worker's hello.
      if (!st.readable_checkpoints) {
        std::vector<std::string> problems;
        st.readable_checkpoints = st.core->checkpoints_on_disk(&problems);
        for (auto& p : problems) log_warn(st.me + ": passing over a checkpoint that does not read back: " + p);
      }
      const auto& labels = *st.readable_checkpoints;
      ps::ps_info info;
      info.worker = w;
      info.shard = st.index;
      shard_send(self, worker_name(w), ps::make_control(ps::kind_checkpoints, st.me, worker_name(w), info, labels));
      return;
    }
    case ps::kind_restore: {
      const int64_t label = m->info.clock;
      if (!st.restored) {
        if (auto s = st.core->restore(label); !s.ok()) {
          send_error(self, w, s.message());
          return shard_fail(self, st.me + ": resume: " + s.message());
        }
        st.restored = true;
        st.restored_label = label;
        st.restored_clocks = st.core->applied_clocks();
        log_info(st.me + ": restored checkpoint " + std::to_string(label) + " (" +
                 ps::checkpoint_path(st.opts.checkpoint_dir, st.me, label) + ")");
      } else if (label != st.restored_label) {
        std::string why = st.me + ": " + worker_name(w) + " asks to restore checkpoint " + std::to_string(label) +
                          ", another worker asked for " + std::to_string(st.restored_label);
        send_error(self, w, why);
        return shard_fail(self, why);
      }
      ps::ps_info info;
      info.worker = w;
      info.shard = st.index;
      info.clock = label;
      shard_send(self, worker_name(w),
                 ps::make_control(ps::kind_restored, st.me, worker_name(w), info, st.restored_clocks));
      return;
    }
    case ps::kind_bye: {
      st.over = true;
      json_writer j;
      j.begin_object().field("shard", int64_t{st.index}).field("node", st.svc->node_name());
      j.field("tensors", int64_t(st.core->params().size()));
      int64_t bytes = 0;
      for (auto& p : st.core->params()) bytes += int64_t(p.value.byte_size());
      j.field("bytes", bytes).field("updates", st.core->updates_applied());
      j.field("pulls", st.pulls).field("pulls_with_push", st.pulls_with_push).field("pulls_waited", st.held);
      j.field("pull_wait_seconds", st.wait_seconds);
      j.field("push_seconds", st.push_seconds).field("max_lag", st.max_lag);
      j.field("table_pieces", int64_t(st.piece_rows.size())).field("rows_pulled", st.rows_pulled);
      j.field("rows_pushed", st.rows_pushed).field("bytes_in", st.bytes_in).field("bytes_out", st.bytes_out);
      j.field("checkpoints_written", st.core->checkpoints_written());
      j.field("last_checkpoint", st.core->last_checkpoint());
      j.field("restored_from", st.restored_label);
      j.end_object();
      st.svc->report_done(st.me, true,
                          std::to_string(st.core->updates_applied()) + " updates, " +
                              std::to_string(st.core->checkpoints_written()) + " checkpoints",
                          j.str());
      self->quit();
      return;
    }
    default:
      return shard_fail(self, st.me + ": unexpected message kind " + std::to_string(m->kind) + " from " + m->sender);
  }
  answer_ready(self, ready);
  take_checkpoint_request(self);
  // Only what moves a clock: not per pull.
  if (m->kind == ps::kind_push || m->kind == ps::kind_done || m->kind == ps::kind_hello ||
      m->kind == ps::kind_restore)
    ps::publish_server_clocks(st.me, st.core->clocks());
}

caf::behavior ps_shard(shard_actor* self, actor_env env) {
  builtin::init_job_actor(self, env);
  self->state.index = int(env.spec.args.get_int("shard", 0));
  auto cfg = builtin::train_config_of(env.cluster, env.spec.node, 0);
  auto opts = options_of(env.cluster);
  return {
    [self, cfg, opts](start_atom) {
      auto& st = self->state;
      st.tk = kernels::trace::track(st.me);
      if (!cfg) return shard_fail(self, cfg.error().message());
      if (!opts) return shard_fail(self, opts.error().message());
      st.opts = *opts;
      // The initial weights: the model built from the job's seed, as every
      // worker builds it.
      auto m = build_model_for(*cfg, kernels::device::cpu(), 1);
      if (!m) return shard_fail(self, st.me + ": " + m.error().message());
      auto pl = placement_of(*m, st.opts.shards);
      auto all = m->parameters();
      std::vector<kernels::parameter> mine;
      for (int i : pl.tensors_of[std::size_t(st.index)]) {
        kernels::parameter p;
        p.name = all[std::size_t(i)]->name;
        p.value = std::move(all[std::size_t(i)]->value);
        mine.push_back(std::move(p));
      }
      for (const auto& pc : pl.pieces_of[std::size_t(st.index)]) {
        const auto& table = all[std::size_t(pc.tensor)]->value;
        const int64_t dim = table.shape().inner_numel();
        kernels::parameter p;
        p.name = all[std::size_t(pc.tensor)]->name + "[" + std::to_string(pc.row_begin) + ":" +
                 std::to_string(pc.row_end) + "]";
        p.sparse = true;
        p.value = kernels::tensor::empty({pc.rows(), dim});
        if (pc.rows() > 0)
          std::memcpy(p.value.f32(), table.f32() + pc.row_begin * dim, std::size_t(pc.rows() * dim) * sizeof(float));
        st.piece_rows.push_back(pc.rows());
        mine.push_back(std::move(p));
      }
      ps::shard_config sc;
      sc.name = st.me;
      sc.shard = st.index;
      sc.shards = st.opts.shards;
      sc.workers = st.opts.workers;
      sc.model = st.opts.model;
      sc.optimizer = cfg->optimizer;
      sc.checkpoint_every = st.opts.checkpoint_every;
      sc.checkpoint_dir = st.opts.checkpoint_dir;
      auto core = ps::shard_core::make(sc, std::move(mine));
      if (!core) return shard_fail(self, st.me + ": " + core.error().message());
      st.core = std::move(*core);
      self->delayed_send(self, std::chrono::milliseconds(250), tick_atom::value);
      builtin::become_running(
          self, [self](wire_atom, const std::string& node, const wire_buffer_ref& buf) { on_shard_wire(self, node, buf); },
          [self](tick_atom) { on_tick(self); });
    },
  };
}

}  // namespace

void add_ps_shard(registry& reg) {
  using topology::key_spec;
  using topology::key_type;
  topology::type_spec s{"ps_shard", "one parameter-server shard of the train job (strategy ps)", {}};
  s.keys.push_back(key_spec{"shard", key_type::integer, false, int64_t{0}, "shard index", 0.0, {}, {}});
  (void)reg.add_actor_type(s, [](caf::actor_system& sys, const actor_env& env) -> caf::actor {
    return sys.spawn<caf::detached>(ps_shard, env);
  });
}

}  // namespace hetflow::actors::ps_job
