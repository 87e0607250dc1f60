// hp_head: the head of a HetPipe train job (strategy "hetpipe"), on the
// first node: a blocking actor that
//
//   1. plans as `hetflow plan` does: profiles from the job's profile_file,
//      else measured for each cpu thread count and cuda device: here for
//      this host's devices, and by one node of every other host for its
//      own (hp_profiles.hpp); the planner
//      (topology/hetpipe_plan.hpp) groups devices into VWs, orders and cuts
//      their stages, picks Nm and places the PS shards;
//   2. sends every hpstage<k> its role (VW, stage, units, neighbours; or
//      idle) and every hpps<n> its units and the workers' wave counts;
//   3. waits for every VW's per-epoch statistics (its last stage's);
//   4. pulls every unit from the shards once every stage finished, builds
//      the whole model, evaluates it, saves it (save_weights), says bye to
//      the shards and reports.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "actors/builtin/job_profiles.hpp"
#include "actors/hetpipe/hp_profiles.hpp"
#include "actors/builtin/stream_job.hpp"
#include "actors/builtin/stream_protocol.hpp"
#include "actors/hetpipe/hp_inbox.hpp"
#include "actors/json.hpp"
#include "actors/log.hpp"
#include "actors/ps/ps_checkpoint.hpp"
#include "actors/ps/worker_report.hpp"
#include "kernels/trace.hpp"
#include "kernels/trainer.hpp"
#include "kernels/weights_io.hpp"
#include "kernels/zoo.hpp"
#include "topology/hetpipe_plan.hpp"
#include "topology/simulator.hpp"

namespace hetflow::actors::hp_job {
namespace {

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

struct vw_epoch {
  double loss_sum = 0, seconds = 0;
  int64_t correct = 0, samples = 0, minibatches = 0;
};

// The plan's cuts in `checkpoint_dir/hphead.plan`, so that a resumed run
// cuts the stages as the checkpointed one did (fresh profiles could move
// them). Text: "nm D", the unit -> PS node list, then one line per VW of
// "node_index:device:first:last" per stage.
std::string plan_text(const topology::hetpipe_plan& p) {
  std::string t = std::to_string(p.nm) + " " + std::to_string(p.staleness) + "\n";
  std::vector<int64_t> ups(p.unit_ps_node.begin(), p.unit_ps_node.end());
  t += join_ints(ups) + "\n";
  for (const auto& vw : p.virtual_workers) {
    for (const auto& sp : vw.stages)
      t += std::to_string(sp.device.node_index) + ":" + std::to_string(sp.device.device) + ":" +
           std::to_string(sp.first_unit) + ":" + std::to_string(sp.last_unit) + " ";
    t += "\n";
  }
  return t;
}

// Puts the saved cuts into `p` (a plan of the same devices); errors name
// the file.
status apply_plan_text(const std::string& text, const std::string& file, const topology::cluster& c,
                       topology::hetpipe_plan& p) {
  std::istringstream in(text);
  std::string line;
  auto bad = [&](const std::string& why) {
    return make_error(errc::invalid_argument,
                      file + ": " + why + " (this run's checkpoints need the cuts it holds; to train from the start, "
                                          "run without --resume)");
  };
  if (!(in >> p.nm >> p.staleness) || p.nm < 1) return bad("no 'nm D' line");
  std::getline(in, line);
  if (!std::getline(in, line)) return bad("no unit list");
  p.unit_ps_node.clear();
  for (int64_t u : split_ints(line)) p.unit_ps_node.push_back(int(u));
  p.virtual_workers.clear();
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string st;
    topology::virtual_worker_plan vw;
    while (ls >> st) {
      int n = 0;
      long long d = 0, f = 0, l = 0;
      if (std::sscanf(st.c_str(), "%d:%lld:%lld:%lld", &n, &d, &f, &l) != 4 || n < 0 || n >= int(c.nodes.size()) ||
          d < 0 || std::size_t(d) >= c.nodes[std::size_t(n)].devices.size())
        return bad("a stage '" + st + "' that is not a device of this topology");
      topology::stage_plan sp;
      sp.device.node = c.nodes[std::size_t(n)].name;
      sp.device.node_index = n;
      sp.device.device = std::size_t(d);
      sp.device.kind = c.nodes[std::size_t(n)].devices[std::size_t(d)].profile;  // as profiled (the report)
      sp.first_unit = std::size_t(f);
      sp.last_unit = std::size_t(l);
      vw.stages.push_back(sp);
    }
    if (!vw.stages.empty()) p.virtual_workers.push_back(std::move(vw));
  }
  if (p.virtual_workers.empty()) return bad("no virtual worker");
  return {};
}

status run_head(const std::string& me, const actor_env& env, inbox& ib, json_writer& j, std::string& summary) {
  const auto t_start = clock_type::now();
  topology::cluster c = env.cluster;
  const auto& p = c.job.params;
  HF_ASSIGN_OR_RETURN(kernels::train_config cfg, builtin::train_config_of(c, c.nodes[0].name, 0));
  HF_ASSIGN_OR_RETURN(kernels::zoo_options zo, kernels::model_options_for(cfg));
  HF_ASSIGN_OR_RETURN(kernels::model_spec spec, kernels::make_model_spec(cfg.model, zo));
  // 1. the plan
  // Without a profile_file: measured on every machine (hp_profiles.hpp).
  HF_ASSIGN_OR_RETURN(topology::profile_db db,
                      p.contains("profile_file") ? profiles_at(c, p.get_int("batch_size", 64))
                                                 : hp_job::cluster_profiles(ib, c, p.get_int("batch_size", 64)));
  apply_speeds(c, db);  // (after profiles_at, which applied them, it changes nothing)
  {
    // What the plan rests on: each kind's whole model per minibatch.
    std::string kinds;
    for (const auto& [kind, d] : db.devices) {
      double ms = 0;
      for (const auto& u : db.units)
        if (auto it = u.devices.find(kind); it != u.devices.end()) ms += it->second.fwd_ms + it->second.bwd_ms;
      char buf[200];
      std::snprintf(buf, sizeof buf, "%s%s %.3f ms (+ step %.3f, waves' copies %.3f / sum %.3f / add %.3f)",
                    kinds.empty() ? "" : "; ", kind.c_str(), ms, d.update_ms, d.wave_copy_ms, d.wave_sum_ms,
                    d.wave_add_ms);
      kinds += buf;
    }
    log_info("hetpipe: profiles (" + db.source + ", " +
             std::to_string(std::chrono::duration<double>(clock_type::now() - t_start).count()).substr(0, 5) +
             " s), the whole model per minibatch: " + kinds);
  }
  if (db.units.size() != spec.layers.size())
    return make_error(errc::invalid_argument, "hetpipe: the profiles have " + std::to_string(db.units.size()) +
                                                  " units, model " + cfg.model + " has " +
                                                  std::to_string(spec.layers.size()) +
                                                  " (a profile_file must profile the job's model)");
  HF_ASSIGN_OR_RETURN(auto devices, topology::plan_devices(c, db));
  HF_ASSIGN_OR_RETURN(auto opts, topology::hetpipe_options_of(c));
  std::vector<std::string> node_names;
  for (const auto& n : c.nodes) node_names.push_back(n.name);
  HF_ASSIGN_OR_RETURN(topology::hetpipe_plan plan, topology::plan_hetpipe(devices, node_names, db, opts));
  const std::string ckpt_dir = p.get_string("checkpoint_dir", "");
  const bool resume = p.get_bool("resume", false);
  const std::string plan_file = ckpt_dir.empty() ? "" : (std::filesystem::path(ckpt_dir) / "hphead.plan").string();
  bool plan_restored = false;
  if (resume && !plan_file.empty() && std::filesystem::exists(plan_file)) {
    std::ifstream in(plan_file);
    std::stringstream text;
    text << in.rdbuf();
    HF_RETURN_IF_ERROR(apply_plan_text(text.str(), plan_file, c, plan));
    plan_restored = true;
    log_info("--resume: the stages as cut by the checkpointed run (" + plan_file + ")");
  } else if (!plan_file.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(ckpt_dir, ec);
    const std::string tmp = plan_file + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << plan_text(plan);
      if (!out.flush()) return make_error(errc::io_error, me + ": cannot write " + tmp);
    }
    std::filesystem::rename(tmp, plan_file, ec);
    if (ec) return make_error(errc::io_error, me + ": cannot write " + plan_file + ": " + ec.message());
  }
  // The simulator's prediction for this very plan and these profiles, with
  // the waves as this runtime does them (bench/simulate/validate.sh compares
  // it with the measured throughput).
  // Overlapped waves (hp_core.hpp) unless the job drains them.
  std::string why_drained;
  const bool overlap = !topology::runtime_drains_waves(c, &why_drained);
  if (!why_drained.empty()) log_info("hetpipe: waves drained (" + why_drained + ")");
  topology::simulation_options so;
  so.drain_waves = !overlap;
  auto sim = plan_restored ? expected<topology::simulation_result>(make_error(errc::unsupported, "restored plan"))
                           : topology::simulate_hetpipe(plan, db, so);
  const double simulated = sim ? sim->samples_per_s : -1.0;
  const double plan_seconds = since(t_start);
  const int V = int(plan.virtual_workers.size());
  // The stage actor of each (node, device).
  std::map<std::pair<int, std::size_t>, int> stage_of;
  int k = 0;
  for (std::size_t n = 0; n < c.nodes.size(); ++n)
    for (std::size_t d = 0; d < c.nodes[n].devices.size(); ++d) stage_of[{int(n), d}] = k++;
  const int stage_actors = k;

  // The test set, and the training set's size for the plan of every epoch.
  // input = "stream": the stream shards read the training set; the head
  // loads it only if it has to recompute batch-norm statistics.
  const bool streamed = p.get_string("input", "memory") == "stream";
  std::optional<kernels::training_data> train_data;  // memory: loaded here; stream: when needed
  kernels::image_dataset test_set;
  int64_t train_rows = 0;
  if (streamed) {
    HF_ASSIGN_OR_RETURN(builtin::stream_trainer_data sd, builtin::load_stream_trainer_data(cfg, /*with_test=*/true));
    train_rows = sd.train_rows;
    test_set = std::move(sd.test);
  } else {
    HF_ASSIGN_OR_RETURN(kernels::training_data d, kernels::load_training_data(cfg, true, /*with_test=*/true));
    train_rows = d.train.size();
    test_set = std::move(d.test);
    train_data = std::move(d);
  }
  HF_ASSIGN_OR_RETURN(kernels::epoch_plan eplan, kernels::make_epoch_plan(train_rows, cfg.batch_size, cfg.drop_last,
                                                                          cfg.max_steps_per_epoch));
  {
    std::string line = "HetPipe: " + std::to_string(V) + " virtual worker(s) (" + to_string(plan.policy) +
                       "), Nm = " + std::to_string(plan.nm) + ", D = " + std::to_string(plan.staleness) + ", batch " +
                       std::to_string(cfg.batch_size) + " per VW, " + cfg.model + " for " +
                       std::to_string(cfg.epochs) + " epochs; predicted " +
                       std::to_string(int64_t(plan.predicted_samples_per_s)) + " samples/s (planner), " +
                       std::to_string(int64_t(simulated)) + " (simulated as run: waves " +
                       (overlap ? "overlapped" : "drained") + ")";
    log_info(line);
    for (int v = 0; v < V; ++v) {
      std::string s = "  VW " + std::to_string(v) + ":";
      for (const auto& sp : plan.virtual_workers[std::size_t(v)].stages)
        s += " [" + sp.device.node + " dev " + std::to_string(sp.device.device) + ": units " +
             std::to_string(sp.first_unit) + ".." + std::to_string(sp.last_unit) + "]";
      log_info(s);
    }
  }
  // 2. roles
  const double timeout = p.get_number("ps_timeout", 30.0) + 10.0;
  // Checkpoints every checkpoint_every waves; 0: about one epoch's (VW 0's).
  int64_t ckpt_every = 0;
  if (!ckpt_dir.empty()) {
    ckpt_every = p.get_int("checkpoint_every", 0);
    if (ckpt_every <= 0)
      ckpt_every = std::max<int64_t>(1, (vw_minibatches(eplan.steps, 1, 0, V) + plan.nm - 1) / plan.nm);
  }
  // eval_each_epoch: the shards send the weights after every epoch's waves
  // (about one epoch of VW 0's, as the default checkpoints) and the head
  // evaluates them (batch norm: with running statistics recomputed for
  // those weights, as for the final weights of several VWs).
  HF_ASSIGN_OR_RETURN(kernels::model whole, kernels::build_model(spec, cfg.where, {cfg.threads, cfg.seed}));
  const int64_t epoch_waves = std::max<int64_t>(1, (vw_minibatches(eplan.steps, 1, 0, V) + plan.nm - 1) / plan.nm);
  const int64_t eval_every = cfg.eval_each_epoch && cfg.epochs > 1 ? epoch_waves : 0;
  // Batch-norm running statistics for the weights in `whole`: forward passes
  // in train mode (no update) over up to 100 training batches, from the
  // values it holds.
  auto recompute_stats = [&](const std::string& what) -> status {
    const auto t_bn = clock_type::now();
    if (!train_data) {
      HF_ASSIGN_OR_RETURN(kernels::training_data d, kernels::load_training_data(cfg, true, /*with_test=*/false));
      train_data = std::move(d);
    }
    HF_ASSIGN_OR_RETURN(auto src, kernels::make_memory_source(train_data->train, cfg));
    HF_RETURN_IF_ERROR(src->begin_epoch(0));
    const int64_t n = std::min<int64_t>(100, src->plan().steps);
    status st;
    whole.context().run([&] {
      for (int64_t k = 0; k < n && st.ok(); ++k) {
        auto b = src->next(0, k);
        if (!b) {
          st = b.error();
          break;
        }
        auto out = whole.forward(b->images, kernels::mode::train);
        if (!out) st = out.error();
      }
    });
    HF_RETURN_IF_ERROR(st);
    log_info("batch-norm statistics of " + what + ": recomputed over " + std::to_string(n) + " training batches in " +
             std::to_string(int(since(t_bn) * 1000)) + " ms");
    return {};
  };
  std::vector<int64_t> unit_ps(plan.unit_ps_node.begin(), plan.unit_ps_node.end());
  // input = "stream": every VW's stage 0 consumes (VW v takes the steps j
  // with j % V == v, as from memory); the shards learn who from the head.
  std::string consumers_text;
  if (streamed) {
    HF_ASSIGN_OR_RETURN(builtin::stream_options so, builtin::stream_options_of(c));
    std::vector<std::string> consumers;
    for (const auto& vw : plan.virtual_workers)
      consumers.push_back(stage_name(stage_of.at({vw.stages[0].device.node_index, vw.stages[0].device.device})));
    HF_RETURN_IF_ERROR(builtin::check_stream_shards(so.shards(), V, "virtual workers (the plan's)"));
    for (int s = 0; s < so.shards(); ++s)
      HF_RETURN_IF_ERROR(ib.services().send_wire(builtin::stream::shard_name(s),
                                       builtin::stream::make_assign(head_name, builtin::stream::shard_name(s), consumers)));
    for (std::size_t i = 0; i < consumers.size(); ++i) consumers_text += (i ? "," : "") + consumers[i];
    log_info("input = \"stream\": " + std::to_string(so.shards()) + " stream shard(s) feed the stage 0 of " +
             std::to_string(V) + " VW(s): " + consumers_text);
  }
  std::vector<int64_t> waves;       // per worker
  std::vector<std::string> names;   // per worker
  std::vector<bool> used(std::size_t(stage_actors), false);
  for (int v = 0; v < V; ++v) {
    const auto& vw = plan.virtual_workers[std::size_t(v)];
    const int S = int(vw.stages.size());
    const int64_t mbs = vw_minibatches(eplan.steps, cfg.epochs, v, V);
    const int64_t w_count = (mbs + plan.nm - 1) / plan.nm;
    std::vector<std::string> sn;
    for (const auto& sp : vw.stages) sn.push_back(stage_name(stage_of.at({sp.device.node_index, sp.device.device})));
    for (int s = 0; s < S; ++s) {
      const auto& sp = vw.stages[std::size_t(s)];
      std::map<std::string, std::string> kv{
          {"vw", std::to_string(v)},          {"vws", std::to_string(V)},
          {"stage", std::to_string(s)},       {"stages", std::to_string(S)},
          {"worker", std::to_string(names.size())},
          {"nm", std::to_string(plan.nm)},    {"first", std::to_string(sp.first_unit)},
          {"last", std::to_string(sp.last_unit)}, {"unit_ps", join_ints(unit_ps)},
          {"minibatches", std::to_string(mbs)}, {"timeout", std::to_string(timeout)},
          {"jitter", std::to_string(p.get_number("hetpipe_drill_jitter", 0.0))},
          {"ckpt_every", std::to_string(ckpt_every)},
          {"resume", resume ? "1" : "0"},     {"overlap", overlap ? "1" : "0"},
          {"staleness", std::to_string(plan.staleness)}};
      if (s == 0 && streamed) kv["stream_consumers"] = consumers_text;
      if (s > 0) kv["prev"] = sn[std::size_t(s - 1)];
      if (s + 1 < S) kv["next"] = sn[std::size_t(s + 1)];
      HF_RETURN_IF_ERROR(ib.send(sn[std::size_t(s)], kind_role, {}, {}, {}, encode_role(kv)));
      used[std::size_t(stage_of.at({sp.device.node_index, sp.device.device}))] = true;
      names.push_back(sn[std::size_t(s)]);
      waves.push_back(w_count);
    }
  }
  for (int s = 0; s < stage_actors; ++s)
    if (!used[std::size_t(s)]) HF_RETURN_IF_ERROR(ib.send(stage_name(s), kind_role, {}, {}, {}, "idle=1\n"));
  std::string all_names;
  for (std::size_t i = 0; i < names.size(); ++i) all_names += (i ? "," : "") + names[i];
  std::vector<int> shard_nodes;  // nodes holding units
  for (std::size_t n = 0; n < c.nodes.size(); ++n) {
    std::vector<int64_t> mine;
    for (std::size_t u = 0; u < unit_ps.size(); ++u)
      if (unit_ps[u] == int64_t(n)) mine.push_back(int64_t(u));
    if (!mine.empty()) shard_nodes.push_back(int(n));
    std::map<std::string, std::string> kv{{"units", join_ints(mine)},
                                          {"waves", join_ints(waves)},
                                          {"names", all_names},
                                          {"staleness", std::to_string(plan.staleness)},
                                          {"ckpt_every", std::to_string(ckpt_every)},
                                          {"eval_every", std::to_string(eval_every)},
                                          {"resume", resume ? "1" : "0"},
                                          {"overlap", overlap ? "1" : "0"}};
    HF_RETURN_IF_ERROR(ib.send(ps_name(int(n)), kind_role, {}, {}, {}, encode_role(kv)));
  }
  // --resume: the newest checkpoint every used stage and every shard can read.
  int64_t resumed = -1;
  if (resume) {
    std::map<std::string, std::vector<int64_t>> lists;
    const std::size_t want = names.size() + c.nodes.size();
    while (lists.size() < want) {
      HF_ASSIGN_OR_RETURN(auto m, ib.next([](const ralp::ralp_message& x) { return x.kind == kind_labels; }, timeout,
                                          "the stages and shards", "their checkpoint labels"));
      lists[m.sender] = split_ints(m.text);
    }
    std::vector<std::vector<int64_t>> all;
    for (auto& [n, l] : lists) all.push_back(l);
    resumed = ckpt_every > 0 ? ps::newest_common_label(all) : -1;
    ralp::ralp_info info;
    info.clock = resumed;
    for (auto& [n, l] : lists) HF_RETURN_IF_ERROR(ib.send(n, kind_restore, info));
    log_info(resumed >= 0 ? "--resume: every stage and shard restores checkpoint " + std::to_string(resumed) +
                                " (waves 0.." + std::to_string(resumed - 1) + " done)"
                          : std::string("--resume: no checkpoint every stage and shard has; training from the start"));
  }
  // 3. every VW's statistics (the training runs now)
  const auto t_train = clock_type::now();
  std::map<int, std::map<int, vw_epoch>> stats;  // vw -> epoch -> numbers
  // eval_each_epoch: the waves whose weights come (epoch e's last: e *
  // eval_every, before the end of the shortest VW and after a restored
  // checkpoint), the shards' parts of each, and the metrics.
  std::set<int64_t> eval_labels;
  if (eval_every > 0)
    for (int e = 1; e < cfg.epochs; ++e)
      if (const int64_t l = e * eval_every; l < *std::min_element(waves.begin(), waves.end()) && l > resumed)
        eval_labels.insert(l);
  std::map<int64_t, std::map<std::string, ralp::ralp_message>> eval_parts;
  std::map<int64_t, kernels::epoch_report> eval_done;
  // Shard n's units, in unit order, from its message into `whole`.
  auto load_units = [&](int n, const ralp::ralp_message& m, const std::string& what) -> status {
    std::size_t t = 0;
    for (std::size_t u = 0; u < unit_ps.size(); ++u) {
      if (unit_ps[u] != n) continue;
      std::vector<kernels::parameter*> ps;
      whole.at(u).parameters(ps);
      for (auto* prm : ps) {
        HF_ASSIGN_OR_RETURN(auto v, f32_view(m, t++));
        if (v.byte_size() != prm->value.view().byte_size())
          return make_error(errc::internal, me + ": " + m.sender + " sent " + std::to_string(v.byte_size()) +
                                                " bytes for " + prm->name + what);
        std::memcpy(prm->value.f32(), v.f32(), v.byte_size());
        ++prm->version;
      }
    }
    return {};
  };
  auto take_eval = [&](ralp::ralp_message m) -> status {
    const int64_t l = m.info.clock;
    if (!eval_labels.count(l) || eval_done.count(l)) return {};
    auto& parts = eval_parts[l];
    parts[m.sender] = std::move(m);
    if (parts.size() < shard_nodes.size()) return {};
    for (int n : shard_nodes) {
      auto it = parts.find(ps_name(n));
      if (it == parts.end()) return {};
      HF_RETURN_IF_ERROR(load_units(n, it->second, " (wave " + std::to_string(l) + ")"));
    }
    eval_parts.erase(l);
    if (!whole.state().empty()) HF_RETURN_IF_ERROR(recompute_stats("the weights after wave " + std::to_string(l - 1)));
    kernels::epoch_report er;
    const int64_t eval_batch = cfg.eval_batch_size > 0 ? cfg.eval_batch_size : cfg.batch_size;
    HF_RETURN_IF_ERROR(ps_job::evaluate_into(whole, test_set, eval_batch, er));
    log_info("epoch " + std::to_string(l / eval_every) + "/" + std::to_string(cfg.epochs) +
             " (the weights after wave " + std::to_string(l - 1) + " of every VW): test accuracy " +
             ps_job::metrics_text(er));
    eval_done[l] = er;
    return {};
  };
  while (int(stats.size()) < V) {
    auto m = ib.next([](const ralp::ralp_message& x) { return x.kind == kind_stats || x.kind == kind_eval; }, 1.0,
                     "the last stages", "statistics");
    if (!m) {
      if (m.error().code() == errc::timeout) continue;
      return m.error();
    }
    if (m->kind == kind_eval) {
      HF_RETURN_IF_ERROR(take_eval(std::move(*m)));
      continue;
    }
    auto& per = stats[m->info.worker];
    std::istringstream in(m->text);
    int e = 0;
    vw_epoch ve;
    long long correct = 0, samples = 0, mbs = 0;
    while (in >> e >> ve.loss_sum >> correct >> samples >> mbs >> ve.seconds) {
      ve.correct = correct;
      ve.samples = samples;
      ve.minibatches = mbs;
      per[e] = ve;
    }
  }
  // Epoch weights still on their way (a shard sends them before the last
  // stage's statistics, but the two travel apart).
  while (eval_done.size() < eval_labels.size()) {
    HF_ASSIGN_OR_RETURN(auto m, ib.next([](const ralp::ralp_message& x) { return x.kind == kind_eval; }, timeout,
                                        "the PS shards", "the weights after an epoch (eval_each_epoch)"));
    HF_RETURN_IF_ERROR(take_eval(std::move(m)));
  }
  const double train_seconds = since(t_train);
  // 4. the final weights: every unit from its shard once every stage finished
  for (int n : shard_nodes) {
    ralp::ralp_info info;
    info.flags = ralp::flag_final;
    info.aux = 0;
    info.reserved = int32_t(unit_ps.size() - 1);
    HF_RETURN_IF_ERROR(ib.send(ps_name(n), kind_pull, info));
    const std::string from = ps_name(n);
    HF_ASSIGN_OR_RETURN(auto wm, ib.next([&](const ralp::ralp_message& x) { return x.kind == kind_weights && x.sender == from; },
                                         timeout, "the PS shard " + ib.who(from), "final weights"));
    HF_RETURN_IF_ERROR(load_units(n, wm, ""));
  }
  for (std::size_t n = 0; n < c.nodes.size(); ++n) (void)ib.send(ps_name(int(n)), kind_bye, {});
  // Batch-norm running statistics: from every stage whose units have them,
  // each averaged over the VWs (each VW saw its own share of the data).
  if (!whole.state().empty()) {
    int want = 0;
    for (const auto& vw : plan.virtual_workers)
      for (const auto& sp : vw.stages)
        for (std::size_t u = sp.first_unit; u <= sp.last_unit; ++u) {
          std::vector<kernels::state_tensor*> st;
          whole.at(u).state(st);
          if (!st.empty()) {
            ++want;
            break;
          }
        }
    std::map<std::string, std::pair<std::vector<double>, int>> sums;  // name -> (sum, count)
    for (int got = 0; got < want; ++got) {
      HF_ASSIGN_OR_RETURN(auto m, ib.next([](const ralp::ralp_message& x) { return x.kind == kind_state; }, timeout,
                                          "the stages", "their batch-norm running statistics"));
      std::istringstream names(m.text);
      std::string name;
      for (std::size_t t = 0; std::getline(names, name); ++t) {
        HF_ASSIGN_OR_RETURN(auto v, f32_view(m, t));
        auto& [sum, count] = sums[name];
        if (sum.empty()) sum.assign(std::size_t(v.numel()), 0.0);
        if (sum.size() != std::size_t(v.numel()))
          return make_error(errc::internal, me + ": " + m.sender + " sent " + name + " of another size");
        for (std::size_t k = 0; k < sum.size(); ++k) sum[k] += double(v.f32()[k]);
        ++count;
      }
    }
    for (kernels::state_tensor* t : whole.state()) {
      auto it = sums.find(t->name);
      if (it == sums.end()) return make_error(errc::internal, me + ": no stage sent " + t->name);
      auto& [sum, count] = it->second;
      if (sum.size() != std::size_t(t->value.numel()))
        return make_error(errc::internal, me + ": " + t->name + " has another size at the stages");
      float* d = t->value.f32();
      for (std::size_t k = 0; k < sum.size(); ++k) d[k] = float(sum[k] / double(count));
    }
    // Several VWs: the shards' weights are the sum of every VW's updates,
    // not the weights any VW's statistics were taken with (measured: a
    // ResNet-18 whose VWs trained to loss 0.04-0.12 evaluated at 0.16-0.44
    // with the averaged statistics), so they are recomputed for the final
    // weights: forward passes in train mode (no update) over up to 100
    // training batches, from the averaged values.
    if (V > 1) HF_RETURN_IF_ERROR(recompute_stats("the final weights"));
  }
  // Epochs: every VW's minibatches of that epoch.
  std::map<int, vw_epoch> total;
  for (auto& [v, per] : stats)
    for (auto& [e, ve] : per) {
      auto& t = total[e];
      t.loss_sum += ve.loss_sum;
      t.correct += ve.correct;
      t.samples += ve.samples;
      t.minibatches += ve.minibatches;
      t.seconds = std::max(t.seconds, ve.seconds);
    }
  std::vector<kernels::epoch_report> epochs;
  int64_t samples = 0;
  for (auto& [e, t] : total) {
    kernels::epoch_report er;
    er.epoch = e + 1;
    er.loss = t.minibatches > 0 ? t.loss_sum / double(t.minibatches) : 0;
    er.train_accuracy = t.samples > 0 ? double(t.correct) / double(t.samples) : 0;
    er.samples = t.samples;
    er.train_seconds = t.seconds;
    er.samples_per_s = t.seconds > 0 ? double(t.samples) / t.seconds : 0;
    samples += t.samples;
    epochs.push_back(er);
  }
  kernels::epoch_report fin;
  const int64_t eval_batch = cfg.eval_batch_size > 0 ? cfg.eval_batch_size : cfg.batch_size;
  HF_RETURN_IF_ERROR(ps_job::evaluate_into(whole, test_set, eval_batch, fin));
  if (!epochs.empty()) {
    epochs.back().test_accuracy = fin.test_accuracy;
    epochs.back().test_logloss = fin.test_logloss;
    epochs.back().test_auc = fin.test_auc;
  }
  for (const auto& [l, m] : eval_done)  // eval_each_epoch: the weights after epoch l / eval_every's waves
    for (auto& er : epochs)
      if (er.epoch == int(l / eval_every) && er.epoch != cfg.epochs) {
        er.test_accuracy = m.test_accuracy;
        er.test_logloss = m.test_logloss;
        er.test_auc = m.test_auc;
      }
  for (auto& er : epochs) {
    const bool tested = er.epoch == cfg.epochs || eval_done.count(int64_t(er.epoch) * eval_every) > 0;
    char line[200];
    std::snprintf(line, sizeof line, "epoch %d/%d (every VW): loss %.4f, train accuracy %.4f, %.0f samples/s%s",
                  er.epoch, cfg.epochs, er.loss, er.train_accuracy, er.samples_per_s, tested ? ", test accuracy " : "");
    log_info(std::string(line) + (tested ? ps_job::metrics_text(er) : ""));
  }
  HF_ASSIGN_OR_RETURN(uint64_t checksum, kernels::weights_checksum(whole));
  if (!cfg.save_weights.empty()) HF_RETURN_IF_ERROR(kernels::save_weights(whole, cfg.save_weights));
  log_info("final weights (every virtual worker finished): test accuracy " + ps_job::metrics_text(fin));

  j.field("model", cfg.model).field("strategy", "hetpipe").field("device", cfg.where.to_string());
  j.field("allocation", to_string(plan.policy)).field("nm", int64_t{plan.nm});
  j.field("staleness", int64_t{plan.staleness}).field("ps_placement", plan.ps_local ? "local" : "spread");
  j.field("batch_size", cfg.batch_size);
  j.key("virtual_workers").begin_array();
  for (std::size_t v = 0; v < plan.virtual_workers.size(); ++v) {
    const auto& vw = plan.virtual_workers[v];
    j.begin_object();
    // This VW's own epochs (its last stage's numbers): loss, accuracy, samples/s.
    j.key("epochs").begin_array();
    for (auto& [e, ve] : stats[int(v)]) {
      j.begin_object().field("epoch", int64_t{e + 1});
      j.field("loss", ve.minibatches > 0 ? ve.loss_sum / double(ve.minibatches) : 0.0);
      j.field("train_accuracy", ve.samples > 0 ? double(ve.correct) / double(ve.samples) : 0.0);
      j.field("samples", ve.samples).field("samples_per_s", ve.seconds > 0 ? double(ve.samples) / ve.seconds : 0.0);
      j.end_object();
    }
    j.end_array();
    j.key("stages").begin_array();
    for (const auto& sp : vw.stages) {
      j.begin_object().field("node", sp.device.node).field("device", int64_t(sp.device.device));
      j.field("actor", stage_name(stage_of.at({sp.device.node_index, sp.device.device})));
      j.field("kind", sp.device.kind);  // the device's profile kind
      j.field("first_unit", int64_t(sp.first_unit)).field("last_unit", int64_t(sp.last_unit));
      j.field("stage_ms", sp.stage_ms).field("memory_bytes", int64_t(sp.memory_bytes));
      j.field("device_memory_bytes", int64_t(sp.device.memory_bytes)).end_object();
    }
    j.end_array().end_object();
  }
  j.end_array();
  j.field("predicted_samples_per_s", plan.predicted_samples_per_s);
  j.field("simulated_samples_per_s", simulated);
  j.field("hetpipe_waves", overlap ? "overlap" : "drain");
  j.field("samples_per_s", train_seconds > 0 ? double(samples) / train_seconds : 0.0);
  j.field("plan_seconds", plan_seconds).field("train_seconds", train_seconds);
  j.field("resumed_wave", resumed);
  j.field("input", streamed ? "stream" : "memory");
  j.field("profile_source", db.source);
  j.field("test_accuracy", fin.test_accuracy);
  j.field("weights_checksum", ps_job::hex64(checksum));
  ps_job::write_epochs(j, epochs);
  summary = std::to_string(V) + " virtual worker(s), Nm " + std::to_string(plan.nm) + ", test accuracy " +
            std::to_string(fin.test_accuracy).substr(0, 6);
  return {};
}

void hp_head(caf::blocking_actor* self, actor_env env) {
  auto svc = env.services;
  const std::string me = env.spec.name;
  if (!builtin::await_start(self, *svc)) return;
  inbox ib(self, svc, me);
  // Its waits, and its profiles' and evaluations' unit spans (the
  // co-located step's copies have tracks of their own: job_profiles.cpp).
  ib.tk = kernels::trace::track(me);
  kernels::trace::track_scope on_track(ib.tk);
  json_writer j;
  j.begin_object();
  std::string summary;
  auto s = run_head(me, env, ib, j, summary);
  if (!s.ok()) return svc->report_done(me, false, s.to_string(), {});
  j.end_object();
  svc->report_done(me, true, summary, j.str());
}

}  // namespace

void add_hp_head(registry& reg) {
  topology::type_spec t{"hp_head", "the head of a HetPipe train job: plans, hands out roles, gathers (strategy hetpipe)",
                        {}};
  (void)reg.add_actor_type(t, [](caf::actor_system& sys, const actor_env& env) -> caf::actor {
    return sys.spawn(hp_head, env);
  });
}

}  // namespace hetflow::actors::hp_job
