// hp_ps: the WSP parameter-server shard of one node (strategy "hetpipe"): a
// blocking actor around a hetpipe::ps_core (hp_core.hpp).
//
//   role <- hphead: the units this node holds, the workers (every stage of
//           every VW, by table index) and their waves in all, D
//   builds the model from the job's seed and keeps its units' initial values
//   push (worker, wave, units) -> added in (wave, worker) order once every
//           worker pushed that wave; answers the pulls this releases
//   pull (worker, wave c)      -> answered once the global clock >= c - D
//   pull flag_final (head)     -> every unit held, once every worker finished
//   bye <- hphead: reports and ends
//
// A pull that waits longer than ps_timeout fails the job, naming the stage
// holding the global clock back.
#include <chrono>
#include <map>
#include <set>

#include "actors/builtin/stream_job.hpp"
#include "actors/control_board.hpp"
#include "actors/hetpipe/hp_core.hpp"
#include "actors/hetpipe/hp_inbox.hpp"
#include "actors/json.hpp"
#include "actors/log.hpp"
#include "actors/ps/clock_gauges.hpp"
#include "actors/ps/ps_checkpoint.hpp"
#include "kernels/trainer.hpp"
#include "kernels/zoo.hpp"

namespace hetflow::actors::hp_job {
namespace {

using clock_type = std::chrono::steady_clock;

struct waiting_pull {
  std::string sender;
  int worker = 0;
  int64_t clock = 0;
  std::size_t first = 0, last = 0;
  bool final = false;
  clock_type::time_point since;
};

// `max_distance`: the largest clock distance a pull was answered at, the
// puller's clock minus the global clock (WSP bounds it by D).
status answer(inbox& ib, const hetpipe::ps_core& core, const waiting_pull& w, int64_t& max_distance) {
  kernels::trace::scope t("answer pull", ib.tk, "wave", w.clock);
  const int64_t g = core.clocks().global();
  if (!w.final && g != ps::infinite_clock) max_distance = std::max(max_distance, w.clock - g);
  std::vector<kernels::tensor_view> ts;
  for (std::size_t u : core.units_in(w.first, w.last))
    for (const auto& t : core.units().at(u)) ts.push_back(t.view());
  ralp::ralp_info info;
  info.clock = w.clock;
  // Overlapped waves: the puller's own waves below this are in (it adds
  // the later ones itself).
  info.global = w.final ? core.applied_below() : core.included_below(w.worker);
  return ib.send(w.sender, kind_weights, info, ts);
}

}  // namespace

// --resume: tells the head which checkpoints this actor can read, returns
// the label the head chose (-1: none).
expected<int64_t> agree_on_label(inbox& ib, const ps::checkpoint_store* store, const std::string& me) {
  std::vector<int64_t> labels;
  if (store != nullptr)
    for (int64_t l : ps::list_checkpoints(*store, me))
      if (ps::read_checkpoint(*store, me, l)) labels.push_back(l);  // only those that read back
  HF_RETURN_IF_ERROR(ib.send(head_name, kind_labels, {}, {}, {}, join_ints(labels)));
  HF_ASSIGN_OR_RETURN(auto m, ib.next([](const ralp::ralp_message& x) { return x.kind == kind_restore; }, 120.0,
                                      "the head " + ib.who(head_name), "the checkpoint to restore"));
  return m.info.clock;
}

namespace {

status run_ps(const std::string& me, const actor_env& env, inbox& ib, const std::map<std::string, std::string>& kv,
              json_writer& report) {
  const auto& cluster = env.cluster;
  const double timeout = cluster.job.params.get_number("ps_timeout", 30.0);
  std::vector<int64_t> units, waves;
  std::vector<std::string> names;
  int64_t staleness = 0;
  try {
    units = split_ints(kv.at("units"));
    waves = split_ints(kv.at("waves"));
    staleness = std::stoll(kv.at("staleness"));
    std::string n = kv.at("names");
    std::size_t pos = 0;
    while (pos <= n.size()) {
      auto comma = n.find(',', pos);
      if (comma == std::string::npos) comma = n.size();
      names.push_back(n.substr(pos, comma - pos));
      pos = comma + 1;
    }
  } catch (const std::exception& e) {
    return make_error(errc::wire_corrupt, me + ": a malformed role from the head (" + e.what() + ")");
  }
  if (names.size() != waves.size())
    return make_error(errc::wire_corrupt, me + ": an inconsistent role from the head");
  // The initial values of its units: the whole model from the job's seed, as
  // `single` builds it.
  HF_ASSIGN_OR_RETURN(kernels::train_config c, builtin::train_config_of(cluster, env.spec.node, 0));
  HF_ASSIGN_OR_RETURN(kernels::zoo_options zo, kernels::model_options_for(c));
  HF_ASSIGN_OR_RETURN(kernels::model_spec spec, kernels::make_model_spec(c.model, zo));
  std::map<std::size_t, std::vector<kernels::tensor>> held;
  int64_t bytes = 0;
  {
    HF_ASSIGN_OR_RETURN(kernels::model m, kernels::build_model(spec, kernels::device::cpu(), {1, c.seed}));
    for (int64_t u : units) {
      if (u < 0 || std::size_t(u) >= m.size()) return make_error(errc::wire_corrupt, me + ": unit out of range");
      std::vector<kernels::parameter*> ps;
      m.at(std::size_t(u)).parameters(ps);
      auto& v = held[std::size_t(u)];
      for (auto* p : ps) {
        v.push_back(kernels::tensor::from(p->value.view()));
        bytes += int64_t(p->value.view().byte_size());
      }
    }
  }
  // Checkpoints and --resume.
  const int64_t every = kv.count("ckpt_every") ? std::stoll(kv.at("ckpt_every")) : 0;
  // eval_each_epoch: the weights at every multiple of this go to the head.
  const int64_t eval_every = kv.count("eval_every") ? std::stoll(kv.at("eval_every")) : 0;
  const bool overlap = kv.count("overlap") && kv.at("overlap") == "1";
  hetpipe::ps_core core(std::move(held), int(waves.size()), staleness, {overlap, every});
  const std::string ckpt_dir = cluster.job.params.get_string("checkpoint_dir", "");
  // A store whenever the job has a checkpoint_dir: `hetflow shell`'s
  // checkpoint asks for one at a wave of its choosing.
  std::shared_ptr<ps::checkpoint_store> store;
  if (!ckpt_dir.empty()) store = ps::make_directory_store(ckpt_dir);
  int64_t restored = -1;
  if (kv.count("resume") && kv.at("resume") == "1") {
    HF_ASSIGN_OR_RETURN(restored, agree_on_label(ib, store.get(), me));
    if (restored >= 0) {
      HF_ASSIGN_OR_RETURN(ps::loaded_checkpoint ck, ps::read_checkpoint(*store, me, restored));
      std::map<std::size_t, std::vector<kernels::tensor>> units_ck;
      for (std::size_t i = 0; i < ck.names.size() && i < ck.tensors.size(); ++i) {
        const auto& n = ck.names[i];  // "u<unit>.<i>"
        auto dot = n.find('.');
        if (n.size() < 2 || n[0] != 'u' || dot == std::string::npos)
          return make_error(errc::wire_corrupt, me + ": checkpoint " + std::to_string(restored) + " has tensor '" + n +
                                                    "', not a unit's");
        units_ck[std::size_t(std::stoll(n.substr(1, dot - 1)))].push_back(std::move(ck.tensors[i]));
      }
      HF_RETURN_IF_ERROR(core.restore(std::move(units_ck), ck.meta.clocks));
      log_info(me + ": restored checkpoint " + std::to_string(restored) + " (" +
               ps::checkpoint_path(ckpt_dir, me, restored) + ")");
    }
  }
  for (std::size_t w = 0; w < waves.size(); ++w) HF_RETURN_IF_ERROR(core.finish(int(w), waves[w]));
  // Checkpoint labels: the multiples of checkpoint_every (the stages cut at
  // the same waves) and the labels `hetflow shell` asked for.
  std::set<int64_t> requested;
  auto next_barrier = [&](int64_t after) -> int64_t {
    int64_t n = every > 0 ? (after / every + 1) * every : -1;
    if (auto it = requested.upper_bound(after); it != requested.end() && (n < 0 || *it < n)) n = *it;
    if (eval_every > 0 && (n < 0 || (after / eval_every + 1) * eval_every < n)) n = (after / eval_every + 1) * eval_every;
    return n;
  };
  if (every > 0 || eval_every > 0) core.set_barrier(next_barrier(std::max<int64_t>(restored, 0)));
  int64_t checkpoints = 0, last_label = restored;
  // Writes every checkpoint the pushes so far completed (before any pull is
  // answered: a pull past the barrier needs the updates held behind it).
  auto checkpoint_due = [&]() -> status {
    while (core.at_barrier()) {
      const int64_t label = core.barrier();
      if (eval_every > 0 && label % eval_every == 0) {  // the epoch's weights to the head
        std::vector<kernels::tensor_view> ts;
        for (const auto& [u, v] : core.units())
          for (const auto& t : v) ts.push_back(t.view());
        ralp::ralp_info info;
        info.clock = label;
        HF_RETURN_IF_ERROR(ib.send(head_name, kind_eval, info, ts));
      }
      if (!store || !((every > 0 && label % every == 0) || requested.count(label) > 0)) {
        core.set_barrier(next_barrier(label));
        continue;
      }
      ps::checkpoint_meta meta;
      meta.shard_name = me;
      meta.shard = env.services->node_index();
      meta.shards = int(cluster.nodes.size());
      meta.label = label;
      meta.clocks = core.barrier_clocks();
      std::vector<ps::named_tensor> ts;
      for (const auto& [u, v] : core.units())
        for (std::size_t i = 0; i < v.size(); ++i)
          ts.push_back({"u" + std::to_string(u) + "." + std::to_string(i), &v[i]});
      HF_RETURN_IF_ERROR(ps::write_checkpoint(*store, meta, ts));
      ++checkpoints;
      last_label = label;
      if (requested.erase(label) > 0)
        log_warn("shell: " + me + " wrote the checkpoint asked for at wave " + std::to_string(label) + " (" +
                 ps::checkpoint_path(ckpt_dir, me, label) + ")");
      core.set_barrier(next_barrier(label));
    }
    return {};
  };
  // `hetflow shell`'s checkpoint (control_board.hpp): a new request is taken
  // once and answered on the board; true when it set a new barrier.
  int64_t checkpoint_generation = 0;
  auto take_checkpoint_request = [&]() -> bool {
    const auto taken = control::take_new_checkpoint_request(checkpoint_generation);
    if (!taken) return false;
    const auto& req = *taken;
    const std::string what = me + ": checkpoint at wave " + std::to_string(req.label);
    std::string refused;
    if (!store)
      refused = what + ": the job has no checkpoint_dir";
    else if (core.clocks().all_finished())
      refused = what + ": every virtual worker has finished";
    else if (req.label <= last_label)
      refused = what + ": not after the last checkpoint (" + std::to_string(last_label) + ")";
    else if (core.applied_past() > req.label)
      refused = what + ": updates of wave " + std::to_string(core.applied_past() - 1) + " are in the weights already";
    if (!refused.empty()) {
      log_warn("shell: " + refused);
      control::answer_checkpoint(me, req.generation, false, refused);
      return false;
    }
    requested.insert(req.label);
    const int64_t b = core.barrier();
    if (b < 0 || req.label < b) core.set_barrier(req.label);
    log_warn("shell: " + what + " (written when every virtual worker has pushed wave " +
             std::to_string(req.label - 1) + ")");
    control::answer_checkpoint(me, req.generation, true,
                               what + ": written when every virtual worker has pushed wave " +
                                   std::to_string(req.label - 1) + " (global clock now " +
                                   std::to_string(core.clocks().global()) + ")");
    return true;
  };
  std::map<uint64_t, waiting_pull> waits;
  std::vector<waiting_pull> finals;
  uint64_t next_id = 1;
  int64_t pulls = 0, pulls_waited = 0, max_distance = 0;
  auto release = [&](const std::vector<ps::pull_ticket>& ready) -> status {
    for (const auto& t : ready) {
      auto it = waits.find(t.id);
      if (it == waits.end()) continue;
      HF_RETURN_IF_ERROR(answer(ib, core, it->second, max_distance));
      waits.erase(it);
    }
    if (core.clocks().all_finished()) {
      for (auto& f : finals) HF_RETURN_IF_ERROR(answer(ib, core, f, max_distance));
      finals.clear();
    }
    return {};
  };
  // Overlapped waves: checkpoints due, then the pulls the shard may answer
  // now, until neither (with D = 0 each round may add one wave).
  auto settle = [&]() -> status {
    for (;;) {
      HF_RETURN_IF_ERROR(checkpoint_due());
      auto ready = core.take_ready();
      if (ready.empty() && !core.at_barrier()) return release({});  // (at the barrier: write it, go on)
      HF_RETURN_IF_ERROR(release(ready));
    }
  };
  for (;;) {
    // Waits past ps_timeout: name the stage holding the global clock back.
    for (auto& [id, w] : waits)
      if (std::chrono::duration<double>(clock_type::now() - w.since).count() > timeout) {
        const int slow = core.clocks().slowest();
        return make_error(errc::timeout, me + ": a pull of wave " + std::to_string(w.clock) + " from '" + w.sender +
                                             "' waited more than " + std::to_string(int(timeout)) + " s for " +
                                             (slow >= 0 ? "stage " + ib.who(names[std::size_t(slow)]) +
                                                              " (its wave " + std::to_string(core.clocks().clock(slow)) +
                                                              " update has not come)"
                                                        : std::string("the other stages")));
      }
    if (take_checkpoint_request()) {
      if (overlap) {
        HF_RETURN_IF_ERROR(settle());
      } else {
        HF_RETURN_IF_ERROR(checkpoint_due());
        HF_RETURN_IF_ERROR(release({}));
      }
    }
    // `hetflow shell`'s `set staleness D`.
    if (const int64_t d = control::staleness(); d >= 0 && d != core.staleness()) {
      log_info(me + ": staleness D = " + std::to_string(d) + " from now on (was " + std::to_string(core.staleness()) +
               ", set by `hetflow shell`)");
      auto ready = core.set_staleness(d);
      ps::publish_server_clocks(me, core.clocks());
      HF_RETURN_IF_ERROR(overlap ? settle() : release(ready));
    }
    auto m = ib.next([](const ralp::ralp_message&) { return true; }, 0.25, "the stages", "pushes or pulls");
    if (!m) {
      if (m.error().code() == errc::timeout) continue;
      return m.error();
    }
    if (m->kind == kind_bye) break;
    if (m->kind == kind_push) {
      const int w = m->info.worker;
      if (w < 0 || w >= int(waves.size())) return make_error(errc::wire_corrupt, me + ": push from an unknown worker");
      kernels::trace::scope t("push", ib.tk, "wave", m->info.clock);
      // The update is read in place: the message stays alive until it is added.
      auto msg = std::make_shared<ralp::ralp_message>(std::move(*m));
      std::vector<kernels::tensor_view> update;
      for (std::size_t i = 0; i < msg->tensors(); ++i) {
        HF_ASSIGN_OR_RETURN(auto t, f32_view(*msg, i));
        update.push_back(t);
      }
      std::vector<ps::pull_ticket> ready;
      HF_RETURN_IF_ERROR(core.push(w, msg->info.clock, std::size_t(msg->info.aux), std::size_t(msg->info.reserved),
                                   std::move(update), msg, ready));
      ps::publish_server_clocks(me, core.clocks());
      if (overlap) {
        HF_RETURN_IF_ERROR(settle());
      } else {
        HF_RETURN_IF_ERROR(checkpoint_due());
        HF_RETURN_IF_ERROR(release(ready));
      }
    } else if (m->kind == kind_pull) {
      ++pulls;
      waiting_pull wp{m->sender, m->info.worker, m->info.clock, std::size_t(m->info.aux),
                      std::size_t(m->info.reserved), (m->info.flags & ralp::flag_final) != 0, clock_type::now()};
      if (wp.final) {
        if (core.clocks().all_finished())
          HF_RETURN_IF_ERROR(answer(ib, core, wp, max_distance));
        else
          finals.push_back(wp);
        continue;
      }
      if (wp.worker < 0 || wp.worker >= int(waves.size()))
        return make_error(errc::wire_corrupt, me + ": pull from an unknown worker");
      ps::pull_ticket t{m->info.worker, m->info.clock, next_id++};
      if (overlap) {
        core.pull_overlapped(t);
        ++pulls_waited;  // counted back below when answered at once
        waits[t.id] = wp;
        HF_RETURN_IF_ERROR(settle());
        if (!waits.count(t.id)) --pulls_waited;
      } else if (core.pull(t)) {
        HF_RETURN_IF_ERROR(answer(ib, core, wp, max_distance));
      } else {
        ++pulls_waited;
        waits[t.id] = wp;
      }
    } else {
      return make_error(errc::internal, me + ": unexpected message kind " + std::to_string(m->kind) + " from '" +
                                            m->sender + "'");
    }
  }
  report.field("units", int64_t(units.size())).field("parameter_bytes", bytes).field("pushes", core.pushes());
  report.field("pulls", pulls).field("pulls_waited", pulls_waited).field("max_clock_distance", max_distance);
  report.field("checkpoints", checkpoints).field("restored_label", restored);
  report.field("bytes_sent", ib.bytes_sent.load()).field("bytes_received", ib.bytes_received);
  return {};
}

void hp_ps(caf::blocking_actor* self, actor_env env) {
  auto svc = env.services;
  const std::string me = env.spec.name;
  if (!builtin::await_start(self, *svc)) return;
  inbox ib(self, svc, me);
  // From the start: its wait for the role and the head's profile requests
  // it answers meanwhile record here too (spans on one track must nest).
  ib.tk = kernels::trace::track(me);
  kernels::trace::track_scope on_track(ib.tk);  // ps_core's adds record here too
  auto role = await_role(ib, env.cluster);
  if (!role) return svc->report_done(me, false, role.error().to_string(), {});
  // The report's bytes are the job's: not the head's link probe and profile
  // requests before the role (hp_profiles.cpp).
  ib.bytes_sent = 0;
  ib.bytes_received = 0;
  json_writer j;
  j.begin_object();
  auto s = run_ps(me, env, ib, *role, j);
  if (!s.ok()) {
    ralp::ralp_info info;
    (void)ib.send(head_name, kind_error, info, {}, {}, s.to_string());
    return svc->report_done(me, false, s.to_string(), {});
  }
  j.end_object();
  svc->report_done(me, true, "PS shard", j.str());
}

}  // namespace

void add_hp_ps(registry& reg) {
  topology::type_spec t{"hp_ps", "the HetPipe (WSP) parameter-server shard of one node (strategy hetpipe)", {}};
  (void)reg.add_actor_type(t, [](caf::actor_system& sys, const actor_env& env) -> caf::actor {
    return sys.spawn(hp_ps, env);
  });
}

}  // namespace hetflow::actors::hp_job
