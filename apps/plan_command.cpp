#include "apps/plan_command.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <thread>

#include "actors/json.hpp"
#include "actors/registry.hpp"
#include "apps/profile_command.hpp"
#include "apps/simulate_command.hpp"
#include "kernels/model.hpp"
#include "kernels/step_cost.hpp"
#include "kernels/profile.hpp"
#include "actors/builtin/stream_job.hpp"
#include "actors/ps/ps_options.hpp"
#include "actors/ralp/ralp_options.hpp"
#include "topology/data_parallel.hpp"
#include "topology/parser.hpp"
#include "topology/ralp_cost.hpp"

namespace hetflow::apps {
namespace {

constexpr const char* usage = "usage: hetflow plan FILE [--json] [--no-measure]\n";

struct replica_row {
  topology::dp_replica r;
  int threads = 0;      // what the cpu device gets (0 in the file: every core)
  double speed = 0.0;   // samples/s at its equal share
  double fixed_s = 0.0;     // measured: seconds a step whatever its rows
  double per_row_s = 0.0;   // measured: seconds a row (0: not measured)
  int64_t rows = 0;     // of one global batch
};

// Seconds of forward + backward of `spec` on `where` (cpu: `threads`
// threads) at `batch`, measured here with the planner's unit profile.
expected<double> measure_seconds(const kernels::model_spec& spec, kernels::device where, int threads, int64_t batch) {
  HF_ASSIGN_OR_RETURN(kernels::model m, kernels::build_model(spec, where, {threads, 1}));
  kernels::profile_options po;
  po.batch = batch;
  HF_ASSIGN_OR_RETURN(kernels::model_profile prof, kernels::profile_model(m, po));
  double s = 0;
  for (const auto& u : prof.units) s += u.forward_s + u.backward_s;
  return s;
}

// The job's step cost model (kernels/trainer.cpp's speed probe,
// kernels/step_cost.hpp): the time at its equal share and at a quarter of
// it fit fixed + rows * per_row.
struct step_cost {
  double speed = 0, fixed_s = 0, per_row_s = 0;
};
expected<step_cost> measure_cost(const kernels::model_spec& spec, kernels::device where, int threads, int64_t share) {
  // The job's order: the quarter first, then the share (its speed).
  kernels::step_cost_fit fit;
  if (share >= 4) {
    HF_ASSIGN_OR_RETURN(double t2, measure_seconds(spec, where, threads, share / 4));
    fit.observe(double(share / 4), t2, /*probe=*/true);
  }
  HF_ASSIGN_OR_RETURN(double t1, measure_seconds(spec, where, threads, share));
  fit.observe(double(share), t1, /*probe=*/true);
  step_cost c;
  c.speed = t1 > 0 ? double(share) / t1 : 0.0;
  c.fixed_s = fit.fixed;
  c.per_row_s = fit.per_row;
  return c;
}


// Strategy "ralp": the cost model's table of cuts (topology/ralp_cost.hpp)
// from the job's profiles (profile_file, else measured here).
struct ralp_table {
  topology::ralp_estimate e;
  std::string profiles, link;
  int64_t fixed_cut = 0;  // ralp_cut (0: the cost model chooses at run time)
  std::size_t units = 0;
};

expected<ralp_table> ralp_plan(const topology::cluster& c_in) {
  topology::cluster c = c_in;
  HF_ASSIGN_OR_RETURN(auto o, actors::ralp_job::options_of(c));
  HF_ASSIGN_OR_RETURN(topology::profile_db db, job_profiles(c));
  ralp_table t;
  t.profiles = db.source;
  t.fixed_cut = o.cut;
  t.units = db.units.size();
  const std::string fallback = db.devices.empty() ? std::string() : db.devices.begin()->first;
  auto in = actors::ralp_job::cost_inputs(c, db, o, fallback);
  char link[96];
  std::snprintf(link, sizeof link, "%.3g Gb/s, %.3g us a message, %d worker(s) of batch %lld", in.gbps, in.latency_us,
                in.workers, static_cast<long long>(in.batch));
  t.link = link;
  HF_ASSIGN_OR_RETURN(t.e, topology::estimate_ralp(db, in));
  return t;
}

struct ps_shard_row {
  struct rows {
    std::string tensor;
    int64_t row_begin = 0, row_end = 0;
  };
  std::string name, node;
  int64_t bytes = 0;
  std::vector<std::string> dense;
  std::vector<rows> sparse;
};

// What each PS shard holds: the placement every worker and shard computes
// (ps_job::placement_of over the model built as they build it: on cpu, so a
// model with large embedding tables allocates them here too).
expected<std::vector<ps_shard_row>> ps_shard_rows(const topology::cluster& c) {
  HF_ASSIGN_OR_RETURN(auto o, actors::ps_job::options_of(c));
  HF_ASSIGN_OR_RETURN(auto cfg, actors::builtin::train_config_of(c, o.shard_nodes.front(), 0));
  HF_ASSIGN_OR_RETURN(auto m, actors::ps_job::build_model_for(cfg, kernels::device::cpu(), 1));
  const auto params = m.parameters();
  const ps::placement pl = actors::ps_job::placement_of(m, o.shards);
  std::vector<ps_shard_row> rows;
  for (int k = 0; k < o.shards; ++k) {
    ps_shard_row r;
    r.name = actors::ps_job::shard_name(k);
    r.node = o.shard_nodes[std::size_t(k)];
    r.bytes = pl.bytes_of[std::size_t(k)];
    for (int t : pl.tensors_of[std::size_t(k)]) r.dense.push_back(params[std::size_t(t)]->name);
    for (const auto& pc : pl.pieces_of[std::size_t(k)])
      r.sparse.push_back({params[std::size_t(pc.tensor)]->name, pc.row_begin, pc.row_end});
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace

int plan_command(const std::vector<std::string>& args, const actors::registry& reg) {
  std::string file;
  bool json = false, measure = true;
  for (const auto& a : args) {
    if (a == "--json")
      json = true;
    else if (a == "--no-measure")
      measure = false;
    else if (file.empty() && !a.empty() && a[0] != '-')
      file = a;
    else {
      std::fprintf(stderr, "hetflow plan: unexpected argument '%s'\n%s", a.c_str(), usage);
      return 2;
    }
  }
  if (file.empty()) {
    std::fprintf(stderr, "%s", usage);
    return 2;
  }
  auto loaded = load_or_report(file, reg);
  if (!loaded) return 2;
  const auto& c = *loaded;
  auto actors = actors::job_actors(c, reg);
  if (!actors) {  // as `validate` reports it: at the [job] table
    std::fprintf(stderr, "%s:%u:%u: error: %s\n", file.c_str(), unsigned(c.job.where.line),
                 unsigned(c.job.where.column), actors.error().message().c_str());
    return 2;
  }

  // HetPipe (and "auto", which compares it with the others): the planner.
  if (c.job.kind == "train") {
    const auto strategy = c.job.params.get_string("strategy", "single");
    if (strategy == "hetpipe" || strategy == "auto") return plan_hetpipe_command(c, file, json);
  }

  // Data parallelism: replicas, ring, split.
  const auto& p = c.job.params;
  const bool dp = c.job.kind == "train" && p.get_string("strategy", "single") == "dp";
  std::vector<replica_row> rows;
  std::vector<std::size_t> ring;
  std::string speed_source;
  bool timed = false;  // split by the measured step cost (dp_split "measured")
  const int64_t batch = p.get_int("batch_size", 64);
  if (dp) {
    auto reps = topology::dp_replicas(c, p.get_strings("dp_nodes"));
    if (!reps) {
      std::fprintf(stderr, "%s: error: %s\n", file.c_str(), reps.error().message().c_str());
      return 2;
    }
    std::vector<std::string> hosts;
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    for (auto& r : *reps) {
      hosts.push_back(r.host);
      // threads = 0: the node's CPUs (its `cpus`), else the machine's
      // (`hetflow run` may pin local nodes to fewer: it prints what it does).
      const auto* node = c.find_node(r.node);
      const int all = node != nullptr && !node->cpus.empty() ? int(node->cpus.size()) : cores;
      rows.push_back(replica_row{r, r.spec.threads > 0 ? r.spec.threads : all, 0.0, 0});
    }
    ring = topology::ring_order(hosts);
    const bool equal = p.get_string("dp_split", "measured") == "equal";
    if (equal) {
      speed_source = "dp_split = \"equal\": equal shares";
      for (auto& r : rows) r.speed = 1.0;
    } else if (measure) {
      auto spec = train_model_spec(c);
      if (!spec) {
        std::fprintf(stderr, "hetflow plan: %s\n", spec.error().to_string().c_str());
        return 2;
      }
      const int64_t share = std::max<int64_t>(1, batch / int64_t(rows.size()));
      // One measurement per cpu thread count and per cuda device; a cuda
      // device this machine cannot run gets the mean of the others.
      std::map<std::pair<int, int>, step_cost> measured;  // (cuda index or -1, threads)
      std::string cuda_note;
      std::vector<replica_row*> unmeasured;
      for (auto& r : rows) {
        const bool cuda = r.r.spec.kind == topology::device_kind::cuda;
        const std::pair<int, int> key{cuda ? r.r.spec.index : -1, cuda ? 0 : r.threads};
        auto it = measured.find(key);
        if (it == measured.end()) {
          auto s = measure_cost(*spec, cuda ? kernels::device::cuda(r.r.spec.index) : kernels::device::cpu(),
                                r.threads, share);
          if (!s && cuda) {
            cuda_note = "; cuda:" + std::to_string(r.r.spec.index) + " is not measured here (" +
                        s.error().message() + "): the mean of the others until the job measures it";
            unmeasured.push_back(&r);
            continue;
          }
          if (!s) {
            std::fprintf(stderr, "hetflow plan: %s\n", s.error().to_string().c_str());
            return 1;
          }
          it = measured.emplace(key, *s).first;
        }
        r.speed = it->second.speed;
        r.fixed_s = it->second.fixed_s;
        r.per_row_s = it->second.per_row_s;
      }
      step_cost mean;
      for (auto& [k, v] : measured) {
        mean.speed += v.speed / double(measured.size());
        mean.fixed_s += v.fixed_s / double(measured.size());
        mean.per_row_s += v.per_row_s / double(measured.size());
      }
      for (auto* r : unmeasured) {
        r->speed = mean.speed > 0 ? mean.speed : 1.0;
        r->fixed_s = mean.fixed_s;
        r->per_row_s = mean.per_row_s;
      }
      timed = p.get_string("dp_split", "measured") == "measured";
      speed_source = "measured on this machine (forward + backward of " + spec->name + " at " +
                     std::to_string(share) + (share >= 4 ? " and " + std::to_string(share / 4) : std::string()) +
                     " samples, per thread count and cuda device" +
                     (timed ? "; split by fixed + per-row cost" : "; split by speed (dp_split = \"speed\")") + ")" +
                     cuda_note + "; the job measures again on its nodes before training and after every epoch, and re-splits";
    } else {
      speed_source = "--no-measure: proportional to cpu threads; the job measures on its nodes";
      for (auto& r : rows) r.speed = double(r.threads);
    }
    std::vector<double> speeds, fixed, per_row;
    for (auto& r : rows) {
      speeds.push_back(r.speed);
      fixed.push_back(r.fixed_s);
      per_row.push_back(r.per_row_s);
    }
    auto split = timed ? topology::split_rows_timed(batch, fixed, per_row) : topology::split_rows(batch, speeds);
    for (std::size_t i = 0; i < rows.size(); ++i) rows[i].rows = split[i];
  }

  // RALP: the table of cuts.
  const bool ralp = c.job.kind == "train" && p.get_string("strategy", "single") == "ralp";
  std::optional<ralp_table> rt;
  std::string ralp_note;
  if (ralp) {
    if (!measure && !p.contains("profile_file")) {
      ralp_note = "--no-measure and no profile_file: no table of cuts";
    } else {
      auto t = ralp_plan(c);
      if (!t) {
        std::fprintf(stderr, "hetflow plan: %s: %s\n", file.c_str(), t.error().message().c_str());
        return 2;
      }
      rt = std::move(*t);
    }
  }

  // Parameter servers: which shard holds which parameters (ps_placement.hpp,
  // computed as every worker and shard computes it).
  const bool ps = c.job.kind == "train" && p.get_string("strategy", "single") == "ps";
  std::vector<ps_shard_row> shards;
  std::string ps_note;
  if (ps) {
    auto listed = ps_shard_rows(c);
    if (listed)
      shards = std::move(*listed);
    else  // the rest of the plan still stands
      ps_note = "the shards' parameters are not listed: " + listed.error().message();
  }

  if (json) {
    actors::json_writer w;
    w.begin_object().field("topology", file).field("cluster", c.name).field("job", c.job.kind);
    w.key("actors").begin_array();
    for (const auto& a : *actors) w.begin_object().field("name", a.name).field("type", a.type).field("node", a.node).end_object();
    w.end_array();
    if (dp) {
      w.key("dp").begin_object().field("batch_size", batch).field("speeds_from", speed_source);
      w.key("ring").begin_array();
      for (std::size_t i : ring) w.value("ring" + std::to_string(i));
      w.end_array().key("replicas").begin_array();
      for (std::size_t i = 0; i < rows.size(); ++i) {
        const auto& r = rows[i];
        w.begin_object().field("rank", int64_t(i)).field("node", r.r.node).field("host", r.r.host);
        w.field("device", int64_t(r.r.device)).field("kind", topology::to_string(r.r.spec.kind));
        w.field("threads", int64_t{r.r.spec.kind == topology::device_kind::cuda ? 0 : r.threads});
        w.field("speed", r.speed).field("fixed_ms", r.fixed_s * 1e3).field("row_ms", r.per_row_s * 1e3);
        w.field("rows", r.rows).end_object();
      }
      w.end_array().end_object();
    }
    if (rt) {
      w.key("ralp").begin_object().field("profiles", rt->profiles).field("link", rt->link);
      w.field("ralp_cut", rt->fixed_cut).field("chosen_cut", int64_t(rt->e.best().cut));
      w.field("chosen_unit", rt->e.best().unit).field("why", rt->e.why);
      w.field("runs_cut", rt->fixed_cut > 0 ? rt->fixed_cut : int64_t(rt->e.best().cut));
      w.key("candidates").begin_array();
      for (const auto& k : rt->e.candidates) {
        w.begin_object().field("cut", int64_t(k.cut)).field("unit", k.unit);
        w.field("lower_params_bytes", int64_t(k.lower_params_bytes)).field("activation_bytes", int64_t(k.activation_bytes));
        w.field("bytes_per_step", int64_t(k.bytes_per_step)).field("worker_ms", k.worker_ms);
        w.field("transfer_ms", k.transfer_ms).field("server_ms", k.server_ms).field("step_ms", k.step_ms).end_object();
      }
      w.end_array().end_object();
    } else if (ralp) {
      w.key("ralp").begin_object().field("note", ralp_note).end_object();
    }
    if (ps) {
      w.key("ps").begin_object();
      if (!ps_note.empty()) w.field("note", ps_note);
      w.key("shards").begin_array();
      for (const auto& r : shards) {
        w.begin_object().field("name", r.name).field("node", r.node).field("bytes", r.bytes);
        w.key("dense").begin_array();
        for (const auto& t : r.dense) w.value(t);
        w.end_array().key("sparse").begin_array();
        for (const auto& sp : r.sparse)
          w.begin_object().field("tensor", sp.tensor).field("row_begin", sp.row_begin).field("row_end", sp.row_end).end_object();
        w.end_array().end_object();
      }
      w.end_array().end_object();
    }
    w.end_object();
    std::printf("%s\n", w.str().c_str());
    return 0;
  }

  std::printf("plan for %s: cluster '%s', job '%s'%s\n", file.c_str(), c.name.c_str(), c.job.kind.c_str(),
              dp ? " (strategy dp)" : ralp ? " (strategy ralp)" : ps ? " (strategy ps)" : "");
  std::printf("actors (%zu):\n", actors->size());
  for (const auto& a : *actors) std::printf("  %-24s %-16s on node %s\n", a.name.c_str(), a.type.c_str(), a.node.c_str());
  if (dp) {
    std::printf("data parallel: %zu replicas; ring", rows.size());
    for (std::size_t i : ring) std::printf(" ring%zu ->", i);
    std::printf(" ring%zu (grouped by host)\n", ring.empty() ? 0 : ring.front());
    std::printf("  %-5s %-12s %-16s %-10s %14s %22s %12s\n", "rank", "node", "host", "device", "speed",
                "step ms (fixed + row)", ("rows of " + std::to_string(batch)).c_str());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      std::string dev = r.r.spec.kind == topology::device_kind::cuda ? "cuda:" + std::to_string(r.r.spec.index)
                                                                    : "cpu x" + std::to_string(r.threads);
      char cost[48] = "-";
      if (r.per_row_s > 0) std::snprintf(cost, sizeof cost, "%.3f + %.4f r", r.fixed_s * 1e3, r.per_row_s * 1e3);
      std::printf("  %-5zu %-12s %-16s %-10s %14.0f %22s %12lld\n", i, r.r.node.c_str(), r.r.host.c_str(), dev.c_str(),
                  r.speed, cost, static_cast<long long>(r.rows));
    }
    std::printf("  speeds: %s\n", speed_source.c_str());
  }
  if (ps && !ps_note.empty()) std::printf("parameter servers: %s\n", ps_note.c_str());
  if (ps && ps_note.empty()) {
    int64_t total = 0, most = 0;
    for (const auto& r : shards) {
      total += r.bytes;
      most = std::max(most, r.bytes);
    }
    std::printf("parameter servers: %zu shards, %.2f MB of parameters (dense tensors whole, largest first onto the "
                "shard with the fewest bytes; embedding tables split by rows over every shard); the largest shard "
                "holds %.2fx the mean\n",
                shards.size(), double(total) / 1e6,
                total > 0 ? double(most) * double(shards.size()) / double(total) : 0.0);
    for (const auto& r : shards) {
      std::string what;
      for (const auto& t : r.dense) what += (what.empty() ? "" : ", ") + t;
      for (const auto& sp : r.sparse)
        what += (what.empty() ? "" : ", ") + sp.tensor + " rows [" + std::to_string(sp.row_begin) + ", " +
                std::to_string(sp.row_end) + ")";
      std::printf("  %-6s on %-10s %12.3f MB  %s\n", r.name.c_str(), r.node.c_str(), double(r.bytes) / 1e6,
                  what.empty() ? "(nothing: fewer tensors than shards)" : what.c_str());
    }
  }
  if (ralp && !rt) std::printf("ralp: %s\n", ralp_note.c_str());
  if (rt) {
    const auto& e = rt->e;
    std::printf("ralp: cuts of the model (server runs units [cut, end) for every worker; %s)\n", rt->link.c_str());
    std::printf("  profiles: %s\n", rt->profiles.c_str());
    std::printf("  %-4s %-16s %14s %14s %11s %11s %11s %11s\n", "cut", "first on server", "lower params",
                "bytes/step", "worker ms", "xfer ms", "server ms", "step ms");
    for (std::size_t i = 0; i < e.candidates.size(); ++i) {
      const auto& k = e.candidates[i];
      std::printf("  %-4zu %-16s %14llu %14llu %11.2f %11.2f %11.2f %11.2f%s\n", k.cut, k.unit.c_str(),
                  static_cast<unsigned long long>(k.lower_params_bytes),
                  static_cast<unsigned long long>(k.bytes_per_step), k.worker_ms, k.transfer_ms, k.server_ms,
                  k.step_ms, i == e.chosen ? "  <- chosen" : "");
    }
    std::printf("  why: %s\n", e.why.c_str());
    if (rt->fixed_cut > 0)
      std::printf("  ralp_cut = %lld is set: the job runs that cut\n", static_cast<long long>(rt->fixed_cut));
    else
      std::printf("  ralp_cut = 0: the RALP server profiles the model on its node before training and takes the "
                  "cut this model chooses there\n");
  }
  return 0;
}

}  // namespace hetflow::apps
