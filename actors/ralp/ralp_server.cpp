// ralp_server: the RALP server of the train job (strategy "ralp"): a
// detached event-based actor around a ralp::server_core
// (ralp_server_core.hpp), speaking ralp_protocol.hpp with the ralp_worker
// actors. At start it builds the model from the job's seed and, with
// ralp_cut = 0, profiles it on its own device and takes the cut the cost
// model (topology/ralp_cost.hpp) chooses. A tick every 250 ms fails pulls
// that waited longer than ps_timeout, naming the slowest worker. It reports
// and quits when worker 0 says bye (after the final pull).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "actors/buffer_pool.hpp"
#include "actors/builtin/job_actor.hpp"
#include "actors/builtin/stream_job.hpp"
#include "actors/control_board.hpp"
#include "actors/json.hpp"
#include "actors/link_probe.hpp"
#include "actors/log.hpp"
#include "actors/ralp/ralp_job.hpp"
#include "actors/ralp/ralp_options.hpp"
#include "actors/ralp/ralp_protocol.hpp"
#include "actors/ps/clock_gauges.hpp"
#include "actors/ralp/ralp_server_core.hpp"
#include "kernels/profile.hpp"
#include "kernels/trace.hpp"
#include "kernels/waits.hpp"
#include "kernels/zoo.hpp"
#include "topology/ralp_cost.hpp"

namespace hetflow::actors::ralp_job {
namespace {

using clock_type = std::chrono::steady_clock;

double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

std::string who_worker(const std::shared_ptr<node_services>& svc, int w) {
  std::string n = svc->node_of(worker_name(w));
  return "worker '" + worker_name(w) + "'" + (n.empty() ? "" : " on node '" + n + "'");
}

struct server_state : builtin::job_actor_state {
  kernels::trace::track_id tk = 0;  // trace track (0: not tracing)
  ralp_options opts;
  kernels::train_config cfg;
  std::unique_ptr<ralp::server_core> core;
  std::string cut_source, cut_why;
  double predicted_step_ms = -1;
  double cost_gbps = 0, cost_latency_us = 0;  // the link the cost model priced (with predicted_step_ms)
  uint64_t predicted_bytes = 0;  // per step (every worker one batch), cost-model formula
  // The weights and activation gradients sent come from here and come back
  // once delivered: a fresh buffer costs a page fault per 4 KiB page (on a
  // VM ~7-11 us each, ~0.3 ms for LeNet-5's 170 KB of weights).
  std::shared_ptr<buffer_pool> pool = buffer_pool::create(std::size_t{64} << 10, std::size_t{256} << 20);
  schemas::message_builder::allocator allocate = [p = pool](std::size_t bytes) { return p->allocate(bytes); };
  struct waiting {
    int worker = 0;
    int64_t clock = 0;
    int32_t flags = 0;  // ralp::flag_full / flag_final
    clock_type::time_point since;
    std::shared_ptr<kernels::waits::scope> open;  // while held (the watchdog's view)
  };
  std::map<uint64_t, waiting> waits;  // lower pulls held by the clock table, by ticket id
  std::vector<waiting> full_waits;    // pulls of every weight (evaluation, final)
  std::unique_ptr<kernels::waits::scope> acts_wait;  // held activations wait for the missing workers
  uint64_t next_id = 1;
  int64_t pulls = 0, pulls_waited = 0, pulls_with_push = 0, activations = 0, pushes = 0;
  int64_t bytes_in = 0, bytes_out = 0;
  int64_t step_bytes = 0;  // of the training steps: lower pulls, weights, activations, act_grads, pushes
  double wait_seconds = 0;
  clock_type::time_point t0;
  bool over = false;
  // Checkpoints (ralp_server_core.hpp): where, the next label due, what was
  // written and restored.
  std::shared_ptr<ps::checkpoint_store> store;
  int64_t every = 0, next_checkpoint = -1, checkpoints = 0, last_checkpoint = -1, resumed_from = -1;
  std::set<int64_t> asked;           // labels a shell asked for (`checkpoint`), not written yet
  int64_t checkpoint_generation = 0;  // the shell's last request taken (control_board.hpp)
  // The link to a worker on another node, timed before the cost model
  // picks the cut (ralp_cut = 0, no ralp_link_gbps): round trips of a
  // tensor and of 4 bytes, as the HetPipe head times its links. The
  // workers' messages that come meanwhile wait in `stashed`.
  struct probe_state {
    int worker = -1;
    int round = 0;  // rounds done: the small ones, then the big ones (actors/link_probe.hpp)
    int64_t seq = 0;
    clock_type::time_point sent;
    std::vector<double> small_ms, big_ms, cold_ms;
    kernels::tensor small, big;
    std::vector<std::pair<std::string, wire_buffer_ref>> stashed;
    std::set<std::string> hellos;  // the workers that said hello
    std::map<int, std::vector<ralp::unit_time>> worker_times;  // their own unit times (the hello's text)
    std::optional<kernels::model> model;
    topology::profile_db db;  // profiled at the start, while the workers load their data
    topology::ralp_cost_inputs cin;
  };
  std::unique_ptr<probe_state> probe;
};
using server_actor = caf::stateful_actor<server_state>;

void server_fail(server_actor* self, const std::string& why) {
  auto& st = self->state;
  if (st.over) return;
  st.over = true;
  builtin::fail_job_actor(self, why);
}

void server_send(server_actor* self, int w, wire_buffer_ref msg, bool step = false) {
  self->state.bytes_out += int64_t(msg->size());
  if (step) self->state.step_bytes += int64_t(msg->size());
  auto s = self->state.svc->send_wire(worker_name(w), std::move(msg));
  if (!s.ok()) server_fail(self, self->state.me + ": cannot answer " + worker_name(w) + ": " + s.message());
}

void send_error(server_actor* self, int w, const std::string& why) {
  ralp::ralp_info info;
  info.worker = w;
  (void)self->state.svc->send_wire(worker_name(w),
                                   ralp::make_message(ralp::kind_error, self->state.me, worker_name(w), info, {}, {}, why));
}

// The lower weights (flags 0) or every weight (flag_full), lower first.
void answer(server_actor* self, int w, int64_t clock, int32_t flags) {
  auto& st = self->state;
  ralp::ralp_info info;
  info.worker = w;
  info.clock = clock;
  info.flags = flags & ralp::flag_full;
  info.global = st.core->clocks().global();
  std::vector<kernels::tensor_view> ts;
  for (auto* p : st.core->lower_params()) ts.push_back(p->value.view());
  if (flags & ralp::flag_full)
    for (auto* p : st.core->upper_params()) ts.push_back(p->value.view());
  server_send(self, w, ralp::make_message(ralp::kind_weights, st.me, worker_name(w), info, ts, {}, {}, &st.allocate),
              (flags & ralp::flag_full) == 0);
}

void answer_ready(server_actor* self, const std::vector<ps::pull_ticket>& ready) {
  auto& st = self->state;
  for (auto& t : ready) {
    auto it = st.waits.find(t.id);
    if (it == st.waits.end()) continue;
    st.wait_seconds += since(it->second.since);
    answer(self, t.worker, t.clock, 0);
    st.waits.erase(it);
  }
  std::vector<server_state::waiting> still;
  for (auto& f : st.full_waits) {
    const bool ok = (f.flags & ralp::flag_final) ? st.core->clocks().all_finished() : st.core->weights_ready(f.clock);
    if (ok)
      answer(self, f.worker, f.clock, f.flags);
    else
      still.push_back(f);
  }
  st.full_waits = std::move(still);
}

// Whom a held pull waits on (the watchdog's view).
std::string slowest_on(server_actor* self) {
  const auto& t = self->state.core->clocks();
  int s = t.slowest();
  if (s < 0) return "the other workers";
  return who_worker(self->state.svc, s) + " (the slowest, at clock " + std::to_string(t.clock(s)) + ")";
}

// A lower-weights pull held until its clock lets the server answer it
// (answer_ready finds it by the ticket's id).
void hold_pull(server_actor* self, const ps::pull_ticket& t) {
  auto& st = self->state;
  st.waits[t.id] = server_state::waiting{
      t.worker, t.clock, 0, clock_type::now(),
      std::make_shared<kernels::waits::scope>(st.me, slowest_on(self),
                                              "the clock that lets it answer " + worker_name(t.worker) +
                                                  "'s pull of clock " + std::to_string(t.clock) + " (bsp)")};
}

std::string slowest_text(server_actor* self) {
  const auto& t = self->state.core->clocks();
  int s = t.slowest();
  if (s < 0) return "every worker has finished";
  return who_worker(self->state.svc, s) + " is the slowest, at clock " + std::to_string(t.clock(s)) + " (bsp)";
}

// `hetflow shell`'s checkpoint (control_board.hpp): one more checkpoint at
// clock L, written when the lower clock reaches it (before any pull of
// clock L is answered); an L the workers have passed becomes the next clock.
void take_checkpoint_request(server_actor* self) {
  auto& st = self->state;
  if (!st.core) return;
  const auto taken = control::take_new_checkpoint_request(st.checkpoint_generation);
  if (!taken) return;
  const auto& req = *taken;
  const int64_t g = st.core->clocks().global();
  if (!st.store) {
    const std::string why = st.me + ": checkpoint at clock " + std::to_string(req.label) + ": the job has no checkpoint_dir";
    log_warn("shell: " + why);
    control::answer_checkpoint(st.me, req.generation, false, why);
    return;
  }
  // One server: no cut to agree on with others, so a clock the workers
  // have passed already becomes the next one.
  const int64_t label = std::max(req.label, g + 1);
  st.asked.insert(label);
  log_warn("shell: " + st.me + " takes a checkpoint at clock " + std::to_string(label));
  control::answer_checkpoint(st.me, req.generation, true,
                             st.me + ": checkpoint at clock " + std::to_string(label) +
                                 " when the global clock reaches it (asked for " + std::to_string(req.label) +
                                 ", now " + std::to_string(g) + ")");
}

void on_tick(server_actor* self) {
  auto& st = self->state;
  if (st.over) return;
  const auto now = clock_type::now();
  const auto limit = std::chrono::duration<double>(st.opts.timeout_s);
  auto check = [&](const server_state::waiting& w, const char* what) {
    if (now - w.since < limit) return false;
    std::string why = st.me + ": the " + what + " of " + who_worker(st.svc, w.worker) + " at clock " +
                      std::to_string(w.clock) + " waited " + std::to_string(int(st.opts.timeout_s)) +
                      " s (ps_timeout): " + slowest_text(self);
    send_error(self, w.worker, why);
    server_fail(self, why);
    return true;
  };
  for (auto& [id, w] : st.waits)
    if (check(w, "pull")) return;
  for (auto& w : st.full_waits)
    if (check(w, "pull of every weight")) return;
  take_checkpoint_request(self);
  self->delayed_send(self, std::chrono::milliseconds(250), tick_atom::value);
}

void report(server_actor* self) {
  auto& st = self->state;
  auto& core = *st.core;
  json_writer j;
  const int64_t clocks = core.has_upper() ? core.upper_clock() : 0;
  int64_t steps = 0;  // BSP clocks: the largest worker clock
  for (auto c : core.clocks().clocks()) steps = std::max(steps, c);
  auto bytes_of = [](const std::vector<kernels::parameter*>& ps) {
    int64_t b = 0;
    for (auto* p : ps) b += int64_t(p->value.byte_size());
    return b;
  };
  const std::size_t cut = core.cut();
  j.begin_object().field("node", st.svc->node_name()).field("cut", int64_t(cut));
  j.field("cut_unit", cut < core.model().size() ? core.model().at(cut).name() : std::string("(no cut)"));
  j.field("units", int64_t(core.model().size())).field("cut_source", st.cut_source);
  if (!st.cut_why.empty()) j.field("cut_why", st.cut_why);
  if (st.predicted_step_ms >= 0)
    j.field("predicted_step_ms", st.predicted_step_ms)
        .field("cost_link_gbps", st.cost_gbps)
        .field("cost_latency_us", st.cost_latency_us);
  j.field("predicted_bytes_per_step", int64_t(st.predicted_bytes));
  j.field("lower_params_bytes", bytes_of(core.lower_params())).field("upper_params_bytes", bytes_of(core.upper_params()));
  j.field("workers", int64_t{st.opts.workers}).field("steps", steps).field("upper_clocks", clocks);
  j.field("lower_updates", core.lower_updates()).field("upper_updates", core.upper_updates());
  j.field("upper_compute_seconds", core.compute_seconds());
  j.field("pulls", st.pulls).field("pulls_waited", st.pulls_waited).field("pulls_with_push", st.pulls_with_push)
      .field("pull_wait_seconds", st.wait_seconds);
  j.field("activations", st.activations).field("pushes", st.pushes);
  j.field("bytes_in", st.bytes_in).field("bytes_out", st.bytes_out);
  j.field("step_bytes", st.step_bytes);
  j.field("bytes_per_step", steps > 0 ? double(st.step_bytes) / double(steps) : 0.0);
  j.field("total_seconds", since(st.t0));
  j.field("checkpoints", st.checkpoints).field("last_checkpoint", st.last_checkpoint);
  j.field("resumed_from", st.resumed_from);
  j.end_object();
  st.svc->report_done(st.me, true,
                      "cut before unit " + std::to_string(cut) + ", " + std::to_string(core.lower_updates()) +
                          " lower and " + std::to_string(core.upper_updates()) + " upper updates",
                      j.str());
}

void on_wire(server_actor* self, const std::string& node, const wire_buffer_ref& buf) {
  auto& st = self->state;
  if (st.over) return;
  st.bytes_in += int64_t(buf->size());
  auto m = ralp::read_message(buf, st.svc->read_limits(), "node '" + node + "'");
  if (!m) return server_fail(self, st.me + ": " + m.error().to_string());
  const int w = m->info.worker;
  if (w < 0 || w >= st.opts.workers || m->sender != worker_name(w))
    return server_fail(self, st.me + ": a message from '" + m->sender + "' on node '" + node + "' says worker " +
                                 std::to_string(w) + " (the job has " + std::to_string(st.opts.workers) + ")");
  auto refuse = [&](const status& s) {
    send_error(self, w, s.message());
    server_fail(self, s.message());
  };
  const bool step_msg = m->kind == ralp::kind_activations || m->kind == ralp::kind_push ||
                        (m->kind == ralp::kind_pull && (m->info.flags & (ralp::flag_full | ralp::flag_final)) == 0);
  if (step_msg) st.step_bytes += int64_t(buf->size());
  std::vector<ps::pull_ticket> ready;
  switch (m->kind) {
    case ralp::kind_hello: {
      if (auto s = st.core->hello(w, m->info.aux, ready); !s.ok()) return refuse(s);
      ralp::ralp_info info;
      info.worker = w;
      info.aux = int64_t(st.core->cut());
      info.global = int64_t(st.core->model().size());
      info.correct = st.core->clocks().clocks()[std::size_t(w)];  // > 0 after a restore: where w resumes
      server_send(self, w, ralp::make_message(ralp::kind_welcome, st.me, worker_name(w), info));
      break;
    }
    case ralp::kind_pull: {
      ++st.pulls;
      const int32_t flags = m->info.flags;
      if (flags & (ralp::flag_full | ralp::flag_final)) {
        st.full_waits.push_back(server_state::waiting{
            w, m->info.clock, flags | ralp::flag_full, clock_type::now(),
            std::make_shared<kernels::waits::scope>(
                st.me, (flags & ralp::flag_final) ? std::string("every worker finishing") : slowest_on(self),
                "the weights of clock " + std::to_string(m->info.clock) + " that " + worker_name(w) + " pulls")});
        break;
      }
      ps::pull_ticket t{w, m->info.clock, st.next_id++};
      if (st.core->pull(t)) {
        answer(self, w, t.clock, 0);
      } else {
        ++st.pulls_waited;
        hold_pull(self, t);
      }
      break;
    }
    case ralp::kind_activations: {
      ++st.activations;
      if (m->tensors() != 2) return refuse(make_error(errc::wire_corrupt, st.me + ": activations from " +
                                                                             who_worker(st.svc, w) + " have " +
                                                                             std::to_string(m->tensors()) + " tensors, want 2"));
      auto act = ralp::f32_tensor(*m, 0);
      if (!act) return refuse(act.error());
      auto labels = ralp::i32_values(*m, 1);
      if (!labels) return refuse(labels.error());
      std::vector<ralp::upper_result> out;
      kernels::trace::scope t_upper("activations (upper pass when complete)", st.tk, "worker", w);
      if (auto s = st.core->activations(w, m->info.clock, m->info.lr, std::move(*act), std::move(*labels), out);
          !s.ok())
        return refuse(s);
      t_upper.end();
      // Held activations wait for the missing workers' (the watchdog's view).
      st.acts_wait.reset();
      if (auto miss = st.core->missing_activations(); !miss.empty()) {
        std::string on;
        for (int mw : miss) on += (on.empty() ? "" : ", ") + who_worker(st.svc, mw);
        st.acts_wait = std::make_unique<kernels::waits::scope>(
            st.me, on, "activations of clock " + std::to_string(st.core->upper_clock()) + " (bsp: the upper pass runs "
                       "once every worker's are in)");
      }
      for (auto& r : out) {
        ralp::ralp_info info;
        info.worker = r.worker;
        info.clock = r.clock;
        info.loss = r.loss.loss;
        info.correct = r.loss.correct;
        std::vector<kernels::tensor_view> ts{r.act_grad.view()};
        server_send(self, r.worker,
                    ralp::make_message(ralp::kind_act_grad, st.me, worker_name(r.worker), info, ts, {}, {}, &st.allocate),
                    true);
      }
      break;
    }
    case ralp::kind_push: {
      ++st.pushes;
      std::vector<kernels::tensor> grads;
      for (std::size_t i = 0; i < m->tensors(); ++i) {
        auto g = ralp::f32_tensor(*m, i);
        if (!g) return refuse(g.error());
        grads.push_back(std::move(*g));
      }
      {
        kernels::trace::scope t_apply("apply", st.tk, "worker", w);
        if (auto s = st.core->push(w, m->info.clock, m->info.lr, std::move(grads), ready); !s.ok()) return refuse(s);
      }
      if (m->info.flags & ralp::flag_pull_next) {
        // The pull of clock + 1 riding on the push: held like any pull and
        // answered below with `ready` (after a checkpoint that falls due).
        ++st.pulls;
        ++st.pulls_with_push;
        ps::pull_ticket t{w, m->info.clock + 1, st.next_id++};
        hold_pull(self, t);
        if (st.core->pull(t))
          ready.push_back(t);
        else
          ++st.pulls_waited;
      }
      kernels::waits::progress();
      break;
    }
    case ralp::kind_probe:
      st.bytes_in -= int64_t(buf->size());  // an answer to the link probe after it gave up: not the job's
      return;
    case ralp::kind_bye:
      st.over = true;
      report(self);
      self->quit();
      return;
    default:
      return server_fail(self, st.me + ": unexpected message kind " + std::to_string(m->kind) + " from " + m->sender);
  }
  // A checkpoint falls due when the lower clock reaches it: before any
  // pull of that clock is answered (ralp_server_core.hpp, write_checkpoint).
  const int64_t due = st.asked.empty() ? st.next_checkpoint : std::min(st.next_checkpoint, *st.asked.begin());
  if (st.store && due > 0 && st.core->clocks().global() >= due &&
      (m->kind == ralp::kind_push || m->kind == ralp::kind_hello)) {
    // Once every worker finished the global clock is unbounded: the end is
    // the largest worker clock.
    int64_t label = st.core->clocks().global();
    int64_t largest = 0;
    for (auto c : st.core->clocks().clocks()) largest = std::max(largest, c);
    label = std::min(label, largest);
    if (label > st.last_checkpoint) {
      if (auto s = st.core->write_checkpoint(*st.store, label); !s.ok())
        return server_fail(self, st.me + ": checkpoint at clock " + std::to_string(label) + ": " + s.message());
      ++st.checkpoints;
      st.last_checkpoint = label;
      log_info(st.me + ": checkpoint at clock " + std::to_string(label));
    }
    st.next_checkpoint = (label / st.every + 1) * st.every;
    st.asked.erase(st.asked.begin(), st.asked.upper_bound(label));
  }
  answer_ready(self, ready);
  // Only what moves a clock (lower pushes, a worker's hello): not per pull or activations.
  if (m->kind == ralp::kind_push || m->kind == ralp::kind_hello) ps::publish_server_clocks(st.me, st.core->clocks());
}

// The model profiled here for the cost model (on a twin: profiling
// overwrites gradients); one kind, "here", for the server and the workers.
expected<topology::profile_db> profile_for_cut(server_actor* self, const kernels::model_spec& spec) {
  auto& st = self->state;
  HF_ASSIGN_OR_RETURN(kernels::model_profile prof, profile_twin(spec, st.cfg));  // (a cpu device: checked at start)
  topology::profile_db db;
  db.batch = prof.batch;
  db.source = "measured on the RALP server";
  for (const auto& u : prof.units) {
    topology::profile_unit pu;
    pu.name = u.name;
    pu.params_bytes = u.parameter_bytes;
    pu.activation_bytes = u.activation_bytes;
    pu.output_bytes = u.output_bytes;
    pu.devices["here"] = {u.forward_s * 1e3, u.backward_s * 1e3};
    db.units.push_back(std::move(pu));
  }
  db.devices["here"] = topology::profile_device{};
  return db;
}

// The cost model's cut from `db_in` (profile_for_cut) and the link in `in`.
// A worker that sent its own unit times (`times`, by worker) is priced with
// them (kind = its name); the others, and the server, with this node's.
status cut_from_profile(server_actor* self, const topology::profile_db& db_in, topology::ralp_cost_inputs in,
                        std::size_t& cut, const std::map<int, std::vector<ralp::unit_time>>& times = {}) {
  auto& st = self->state;
  topology::profile_db db = db_in;
  in.server_kind = "here";
  in.worker_kinds.assign(std::size_t(st.opts.workers), "here");
  std::string own;  // the workers priced with their own times
  for (const auto& [w, ts] : times) {
    if (w < 0 || w >= st.opts.workers) continue;
    bool same = ts.size() == db.units.size();
    for (std::size_t i = 0; same && i < ts.size(); ++i) same = ts[i].name == db.units[i].name;
    if (!same) {
      log_warn(st.me + ": " + worker_name(w) + "'s unit times do not name this model's units; its part is priced "
                       "with this node's profile");
      continue;
    }
    const std::string kind = worker_name(w);
    for (std::size_t i = 0; i < ts.size(); ++i) db.units[i].devices[kind] = {ts[i].fwd_ms, ts[i].bwd_ms};
    db.devices[kind] = topology::profile_device{};
    in.worker_kinds[std::size_t(w)] = kind;
    own += (own.empty() ? "" : ", ") + kind;
  }
  HF_ASSIGN_OR_RETURN(topology::ralp_estimate e, topology::estimate_ralp(db, in));
  cut = e.best().cut;
  st.cut_source = "cost model";
  st.cut_why = e.why;
  if (!own.empty()) st.cut_why += "; the workers' units priced with their own times (" + own + ")";
  st.predicted_step_ms = e.best().step_ms;
  st.cost_gbps = in.gbps;
  st.cost_latency_us = in.latency_us;
  return {};
}

// The cut: ralp_cut, or the cost model's choice from a profile of the model
// measured here. Workers and server are taken to be alike (one profile
// kind); `in` has the link.
status choose_cut(server_actor* self, const kernels::model_spec& spec, std::size_t units,
                  topology::ralp_cost_inputs in, std::size_t& cut) {
  auto& st = self->state;
  if (st.opts.cut > 0) {
    if (std::size_t(st.opts.cut) > units)
      return make_error(errc::invalid_argument, "[job] ralp_cut = " + std::to_string(st.opts.cut) + ": model " +
                                                    st.cfg.model + " has " + std::to_string(units) +
                                                    " units (cuts 1.." + std::to_string(units - 1) + ", " +
                                                    std::to_string(units) + " for no cut)");
    cut = std::size_t(st.opts.cut);
    st.cut_source = "ralp_cut";
    return {};
  }
  HF_ASSIGN_OR_RETURN(topology::profile_db db, profile_for_cut(self, spec));
  return cut_from_profile(self, db, in, cut);
}

// The link probe's timeout (a sequence number: ignored unless its round is
// still unanswered).
using probe_timeout_atom = caf::atom_constant<caf::atom("ralpprobe")>;
// A cold round's send, cold_gap_ms after the last answer (a sequence number).
using probe_go_atom = caf::atom_constant<caf::atom("ralpgo")>;

// The rest of the start once the cut is known: the server core (restored
// from restore_label >= 0), then running.
void finish_start(server_actor* self, kernels::model m, std::size_t cut, int64_t restore_label) {
  auto& st = self->state;
  // The formula's bytes for the real model (what the report compares
  // with the measured traffic): W x (2 lower params + 2 activations + labels).
  {
    uint64_t lower = 0;
    for (auto* p : ralp::unit_parameters(m, 0, cut)) lower += p->value.byte_size();
    const uint64_t b = uint64_t(st.cfg.batch_size);
    uint64_t per = 2 * lower;
    if (cut < m.size()) per += 2 * b * uint64_t(m.sample_shape(cut).numel()) * 4 + b * 4;
    st.predicted_bytes = uint64_t(st.opts.workers) * per;
  }
  ralp::server_config sc;
  sc.name = st.me;
  sc.workers = st.opts.workers;
  sc.cut = cut;
  sc.optimizer = st.cfg.optimizer;
  auto core = ralp::server_core::make(sc, std::move(m));
  if (!core) return server_fail(self, st.me + ": " + core.error().message());
  st.core = std::move(*core);
  if (st.store) {
    st.every = st.opts.checkpoint_every;  // >= 1: the train job's check (actors/builtin/train.cpp)
    if (st.every <= 0) return server_fail(self, st.me + ": checkpoint_dir without checkpoint_every");
    if (restore_label >= 0) {
      if (auto s = st.core->restore(*st.store, restore_label); !s.ok())
        return server_fail(self, st.me + ": --resume: " + s.message());
      st.resumed_from = restore_label;
      log_info(st.me + ": resumed from " + st.store->describe(ps::checkpoint_name(st.me + "-lower", restore_label)) +
               " (clock " + std::to_string(restore_label) + ")");
    }
    st.next_checkpoint = (std::max<int64_t>(restore_label, 0) / st.every + 1) * st.every;
  }
  log_info(st.me + ": RALP server, " + std::to_string(st.opts.workers) + " worker(s), units [" +
           std::to_string(cut) + ", " + std::to_string(st.core->model().size()) + ") here (" +
           (cut < st.core->model().size() ? "from '" + st.core->model().at(cut).name() + "'" : std::string("no cut")) +
           ", " + st.cut_source + ")" + (st.cut_why.empty() ? "" : ": " + st.cut_why));
  self->delayed_send(self, std::chrono::milliseconds(250), tick_atom::value);
  builtin::become_running(
      self, [self](wire_atom, const std::string& node, const wire_buffer_ref& buf) { on_wire(self, node, buf); },
      [self](tick_atom) { on_tick(self); },
      [](probe_timeout_atom, int64_t) {},  // the link probe's timers, after it ended
      [](probe_go_atom, int64_t) {});
}

constexpr int probe_small_rounds = link_probe::warmup_rounds + link_probe::small_timed;
constexpr int probe_big_rounds = link_probe::warmup_rounds + link_probe::big_timed;
constexpr int probe_cold_rounds = link_probe::cold_warmup + link_probe::cold_timed;
constexpr int probe_rounds = probe_small_rounds + probe_big_rounds + probe_cold_rounds;

// The worker to time the link to: one on another machine, else one on
// another node of this one; -1: every worker is on the server's node.
int probe_target(const server_actor* self, const topology::cluster& c) {
  const auto& st = self->state;
  const auto* me = c.find_node(st.svc->node_name());
  int other_node = -1;
  for (int w = 0; w < st.opts.workers; ++w) {
    const auto* n = c.find_node(st.svc->node_of(worker_name(w)));
    if (me == nullptr || n == nullptr || n == me) continue;
    if (n->host != me->host) return w;
    if (other_node < 0) other_node = w;
  }
  return other_node;
}

// Ends the probe: the cut from the cost model (with the measured link when
// `gbps` > 0, and the measured latency of a message to an idle receiver
// when `latency_us` > 0), the start finished, the stashed messages handled.
void end_probe(server_actor* self, double gbps, const std::string& said, double latency_us = 0) {
  auto& st = self->state;
  std::unique_ptr<server_state::probe_state> p = std::move(st.probe);
  if (latency_us > 0) p->cin.latency_us = latency_us;
  if (gbps > 0) {
    p->cin.gbps = gbps;
    log_info(st.me + ": link to " + who_worker(st.svc, p->worker) + ": " + said);
  } else {
    char buf[96];
    std::snprintf(buf, sizeof buf, "; the assumed %.2f Gb/s kept", p->cin.gbps);
    log_warn(st.me + ": link to " + who_worker(st.svc, p->worker) + ": " + said + buf);
  }
  std::size_t cut = 0;
  if (auto s = cut_from_profile(self, p->db, p->cin, cut, p->worker_times); !s.ok())
    return server_fail(self, st.me + ": " + s.message());
  if (gbps > 0) st.cut_why += (st.cut_why.empty() ? "" : "; ") + std::string("link measured: ") + said;
  finish_start(self, std::move(*p->model), cut, -1);
  for (auto& [node, buf] : p->stashed) {
    if (st.over) break;
    on_wire(self, node, buf);
  }
}

void send_probe(server_actor* self) {
  auto& st = self->state;
  auto& p = *st.probe;
  ralp::ralp_info info;
  info.worker = p.worker;
  info.aux = ++p.seq;
  const bool big = p.round >= probe_small_rounds && p.round < probe_small_rounds + probe_big_rounds;
  if (p.round >= probe_small_rounds + probe_big_rounds) info.lr = link_probe::cold_gap_ms;  // held that long
  const kernels::tensor_view v = (big ? p.big : p.small).view();
  p.sent = clock_type::now();
  auto s = st.svc->send_wire(worker_name(p.worker), ralp::make_message(ralp::kind_probe, st.me, worker_name(p.worker),
                                                                       info, std::span<const kernels::tensor_view>(&v, 1)));
  if (!s.ok()) return end_probe(self, 0, "not timed (" + s.message() + ")");
  self->delayed_send(self, std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::duration<double>(link_probe::answer_timeout_s)),
                     probe_timeout_atom::value, p.seq);
}

void on_probe_wire(server_actor* self, const std::string& node, const wire_buffer_ref& buf) {
  auto& st = self->state;
  auto& p = *st.probe;
  auto m = ralp::read_message(buf, st.svc->read_limits(), "node '" + node + "'");
  if (!m || m->kind != ralp::kind_probe) {
    p.stashed.emplace_back(node, buf);  // read (and refused, if bad) once the server runs
    // The probe starts once every worker said hello: each then waits for
    // its welcome, answering probes; before, a worker may still be loading
    // its data on the server's or the probed worker's cores (one such
    // probe read 0.29 ms for 4 bytes against 0.02-0.03 ms).
    if (m && m->kind == ralp::kind_hello && m->info.worker >= 0 && m->info.worker < st.opts.workers &&
        m->sender == worker_name(m->info.worker)) {
      p.hellos.insert(m->sender);
      if (auto t = ralp::decode_unit_times(m->text, m->sender); !t)
        log_warn(st.me + ": " + t.error().message() + " (its part is priced with this node's profile)");
      else if (!t->empty())
        p.worker_times[m->info.worker] = std::move(*t);
    }
    if (p.seq == 0 && int(p.hellos.size()) == st.opts.workers) send_probe(self);
    return;
  }
  if (m->sender != worker_name(p.worker) || m->info.aux != p.seq) return;  // a late answer
  const double ms = std::chrono::duration<double, std::milli>(clock_type::now() - p.sent).count();
  if (p.round < probe_small_rounds) {
    if (p.round >= link_probe::warmup_rounds) p.small_ms.push_back(ms);
  } else if (p.round < probe_small_rounds + probe_big_rounds) {
    if (p.round - probe_small_rounds >= link_probe::warmup_rounds) p.big_ms.push_back(ms);
  } else if (p.round - probe_small_rounds - probe_big_rounds >= link_probe::cold_warmup) {
    const double cold = ms - m->info.loss;  // less the time the worker held its answer
    if (m->info.loss > 0 && cold > 0) p.cold_ms.push_back(cold);
  }
  if (++p.round < probe_rounds) {
    if (p.round < probe_small_rounds + probe_big_rounds) return send_probe(self);
    // A cold round: the worker has been idle cold_gap_ms when it arrives.
    self->delayed_send(self, std::chrono::microseconds(int64_t(link_probe::cold_gap_ms * 1e3)), probe_go_atom::value,
                       p.seq);
    return;
  }
  link_probe::result r;
  r.bytes = uint64_t(p.big.numel()) * sizeof(float);
  r.small_ms = link_probe::median(p.small_ms);
  r.big_ms = link_probe::median(p.big_ms);
  r.cold_ms = link_probe::median(p.cold_ms);  // 0: an older worker that does not hold its answer
  const double gbps = r.gbps();
  if (gbps <= 0) return end_probe(self, 0, r.describe() + ", not resolved", r.latency_us());
  char g[48];
  std::snprintf(g, sizeof g, ": %.2f Gb/s", gbps);
  end_probe(self, gbps, r.describe() + g, r.latency_us());
}

caf::behavior ralp_server(server_actor* self, actor_env env) {
  builtin::init_job_actor(self, env);
  self->state.tk = kernels::trace::track(self->state.me);
  auto cfg = builtin::train_config_of(env.cluster, env.spec.node, 0);
  auto opts = options_of(env.cluster);
  // The link for the cost model: as `hetflow plan` assumes for measured
  // profiles (nodes of one host: 100 Gb/s; latency 20 us), unless timed
  // below.
  topology::ralp_cost_inputs cin;
  if (opts) {
    topology::profile_db links;
    links.links.intra_node_gbps = 100;
    links.links.latency_us = 20;
    cin = cost_inputs(env.cluster, links, *opts, "here");
  }
  return {
    [self, cfg, opts, cin, cluster = env.cluster](start_atom) {
      auto& st = self->state;
      st.t0 = clock_type::now();
      if (!cfg) return server_fail(self, cfg.error().message());
      if (!opts) return server_fail(self, opts.error().message());
      st.opts = *opts;
      st.cfg = *cfg;
      if (st.cfg.where.kind != kernels::device_kind::cpu)
        return server_fail(self, st.me + ": strategy \"ralp\" runs on cpu devices only for now");
      auto zo = kernels::model_options_for(st.cfg);
      if (!zo) return server_fail(self, st.me + ": " + zo.error().message());
      auto spec = kernels::make_model_spec(st.cfg.model, *zo);
      if (!spec) return server_fail(self, st.me + ": " + spec.error().message());
      auto m = kernels::build_model(*spec, kernels::device::cpu(), {st.cfg.threads, st.cfg.seed});
      if (!m) return server_fail(self, st.me + ": " + m.error().message());
      std::size_t cut = 0;
      int64_t restore_label = -1;
      if (!st.opts.checkpoint_dir.empty()) {
        st.store = ps::make_directory_store(st.opts.checkpoint_dir);
        if (st.opts.resume) {
          std::vector<std::string> problems;
          auto labels = ralp::server_core::checkpoints_on_disk(*st.store, st.me, &problems);
          for (auto& p : problems) log_warn(st.me + ": --resume passes over a checkpoint: " + p);
          if (labels.empty()) {
            log_warn(st.me + ": --resume: no complete checkpoint in " + st.opts.checkpoint_dir +
                     "; training from the start");
          } else {
            restore_label = labels.back();
            auto c = ralp::server_core::checkpoint_cut(*st.store, st.me, restore_label);
            if (!c) return server_fail(self, st.me + ": " + c.error().message());
            if (*c > m->size())
              return server_fail(self, st.me + ": the checkpoint's cut " + std::to_string(*c) + " is beyond model " +
                                           st.cfg.model + "'s " + std::to_string(m->size()) + " units");
            cut = *c;
            st.cut_source = "checkpoint";
          }
        }
      }
      // The cost model's cut with the link timed to a worker on another
      // node first (the workers answer while they wait for their welcome).
      if (restore_label < 0 && st.opts.cut <= 0 && st.opts.link_gbps <= 0) {
        if (const int w = probe_target(self, cluster); w >= 0) {
          auto p = std::make_unique<server_state::probe_state>();
          p->worker = w;
          p->cin = cin;
          auto db = profile_for_cut(self, *spec);
          if (!db) return server_fail(self, st.me + ": " + db.error().message());
          p->db = std::move(*db);
          uint64_t largest = 0;  // the largest unit output of a batch
          for (const auto& u : p->db.units) largest = std::max(largest, u.output_bytes);
          const uint64_t bytes = link_probe::probe_bytes(largest, st.svc->read_limits().max_message_bytes);
          p->big = kernels::tensor::empty({int64_t(bytes / 4)});
          for (float& x : p->big.f32_span()) x = 0.f;
          p->small = kernels::tensor::empty({1});
          p->small.f32_span()[0] = 0.f;
          p->model.emplace(std::move(*m));
          st.probe = std::move(p);
          self->become(
              [self](wire_atom, const std::string& node, const wire_buffer_ref& buf) { on_probe_wire(self, node, buf); },
              [self](probe_go_atom, int64_t seq) {
                if (self->state.probe && self->state.probe->seq == seq) send_probe(self);
              },
              [self](probe_timeout_atom, int64_t seq) {
                if (!self->state.probe || self->state.probe->seq != seq) return;
                end_probe(self, 0, seq == 0 ? std::string("not every worker said hello within ps_timeout")
                                            : "no answer within " + std::to_string(int(link_probe::answer_timeout_s)) + " s");
              });
          // Until every worker's hello (on_probe_wire); a worker that
          // never says it leaves the link assumed.
          self->delayed_send(self, std::chrono::duration_cast<std::chrono::milliseconds>(
                                       std::chrono::duration<double>(st.opts.timeout_s)),
                             probe_timeout_atom::value, int64_t{0});
          return;
        }
      }
      if (restore_label < 0)
        if (auto s = choose_cut(self, *spec, m->size(), cin, cut); !s.ok()) return server_fail(self, st.me + ": " + s.message());
      finish_start(self, std::move(*m), cut, restore_label);
    },
  };
}

}  // namespace

void add_ralp_server(registry& reg) {
  topology::type_spec s{"ralp_server", "the RALP server of the train job (strategy ralp)", {}};
  (void)reg.add_actor_type(s, [](caf::actor_system& sys, const actor_env& env) -> caf::actor {
    return sys.spawn<caf::detached>(ralp_server, env);
  });
}

}  // namespace hetflow::actors::ralp_job
