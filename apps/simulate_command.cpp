#include "apps/simulate_command.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <thread>
#include <tuple>

#include "actors/builtin/job_profiles.hpp"
#include "actors/builtin/stream_job.hpp"
#include "actors/ps/ps_options.hpp"
#include "actors/ps/ps_placement.hpp"
#include "actors/ralp/ralp_options.hpp"
#include "actors/registry.hpp"
#include "apps/launcher.hpp"
#include "apps/profile_command.hpp"
#include "kernels/model.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/profile.hpp"
#include "topology/cost_model.hpp"
#include "topology/data_parallel.hpp"
#include "topology/hetpipe_plan.hpp"
#include "topology/parser.hpp"
#include "topology/simulator.hpp"

namespace hetflow::apps {
namespace {

using actors::cpu_threads;
using actors::profiles_at;

using json = nlohmann::json;
constexpr const char* usage = "usage: hetflow simulate FILE [--json] [--waves N] [--as-run]\n";

std::string gib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(b) / double(1ull << 30));
  return buf;
}

std::string device_name(const topology::cluster& c, const topology::plan_device& d) {
  const auto& spec = c.nodes[std::size_t(d.node_index)].devices[d.device];
  return std::string(topology::to_string(spec.kind)) + ":" + std::to_string(spec.index);
}

// Samples in one epoch of the job's dataset (time per epoch for "auto").
int64_t epoch_samples(const topology::cluster& c) {
  const auto& p = c.job.params;
  if (p.get_string("dataset", "fashion-mnist") == "synthetic") return p.get_int("train_size", 10000);
  return 60000;
}

// Devices of dp_nodes (every node when empty).
std::vector<topology::plan_device> dp_devices(const topology::cluster& c, const std::vector<topology::plan_device>& all) {
  auto nodes = c.job.params.get_strings("dp_nodes");
  if (nodes.empty()) return all;
  std::vector<topology::plan_device> out;
  for (const auto& d : all)
    if (std::find(nodes.begin(), nodes.end(), d.node) != nodes.end()) out.push_back(d);
  return out;
}

json stage_json(const topology::cluster& c, const topology::stage_plan& s) {
  return json{{"node", s.device.node},
              {"device", s.device.device},
              {"device_name", device_name(c, s.device)},
              {"kind", s.device.kind},
              {"first_unit", s.first_unit},
              {"last_unit", s.last_unit},
              {"memory_bytes", s.memory_bytes},
              {"device_memory_bytes", s.device.memory_bytes},
              {"kept_minibatches", s.kept_minibatches},
              {"compute_ms", s.compute_ms},
              {"send_ms", s.send_ms},
              {"receive_ms", s.receive_ms},
              {"stage_ms", s.stage_ms}};
}

json plan_json(const topology::cluster& c, const topology::hetpipe_plan& p, const topology::profile_db& db) {
  json vws = json::array();
  for (const auto& vw : p.virtual_workers) {
    json st = json::array();
    for (const auto& s : vw.stages) st.push_back(stage_json(c, s));
    vws.push_back(json{{"stages", st},
                       {"latency_ms", vw.latency_ms},
                       {"period_ms", vw.period_ms},
                       {"wave_ms", vw.wave_ms},
                       {"samples_per_s", vw.samples_per_s},
                       {"bottleneck", vw.bottleneck}});
  }
  json ps = json::object();
  for (std::size_t n = 0; n < p.nodes.size(); ++n) ps[p.nodes[n]] = p.ps_bytes[n];
  json units = json::array();
  for (std::size_t u = 0; u < db.units.size(); ++u)
    units.push_back(json{{"name", db.units[u].name}, {"ps_node", p.nodes[std::size_t(p.unit_ps_node[u])]}});
  return json{{"strategy", "hetpipe"},
              {"allocation", topology::to_string(p.policy)},
              {"ps_placement", p.ps_local ? "local" : "spread"},
              {"nm", p.nm},
              {"staleness", p.staleness},
              {"waves", p.drained_waves ? "drain" : "overlap"},
              {"batch", p.batch},
              {"virtual_workers", vws},
              {"ps_bytes", ps},
              {"units", units},
              {"sync_ms", p.sync_ms},
              {"predicted_samples_per_s", p.predicted_samples_per_s},
              {"bottleneck", p.bottleneck},
              {"notes", p.notes}};
}

void print_plan(const topology::cluster& c, const topology::hetpipe_plan& p, const topology::profile_db& db) {
  std::printf("hetpipe: %zu virtual workers (allocation %s), Nm = %d, D = %d, batch %lld, PS %s\n",
              p.virtual_workers.size(), topology::to_string(p.policy), p.nm, p.staleness,
              static_cast<long long>(p.batch), p.ps_local ? "local" : "spread");
  for (const auto& n : p.notes) std::printf("  note: %s\n", n.c_str());
  for (std::size_t v = 0; v < p.virtual_workers.size(); ++v) {
    const auto& vw = p.virtual_workers[v];
    std::printf("virtual worker %zu: %zu stages; minibatch latency %.2f ms, period %.2f ms, wave %.2f ms, "
                "%.1f samples/s\n",
                v, vw.stages.size(), vw.latency_ms, vw.period_ms, vw.wave_ms, vw.samples_per_s);
    std::printf("  %-5s %-10s %-8s %-14s %-28s %-24s %9s %8s %8s %9s\n", "stage", "node", "device", "kind", "units",
                "memory (kept minibatches)", "compute", "send", "receive", "stage ms");
    for (std::size_t j = 0; j < vw.stages.size(); ++j) {
      const auto& s = vw.stages[j];
      std::string units = std::to_string(s.first_unit) + "-" + std::to_string(s.last_unit) + " (" +
                          db.units[s.first_unit].name + ".." + db.units[s.last_unit].name + ")";
      std::string mem = gib(s.memory_bytes) + " / " + (s.device.memory_bytes ? gib(s.device.memory_bytes) : "-") +
                        " (" + std::to_string(s.kept_minibatches) + ")";
      std::printf("  %-5zu %-10s %-8s %-14s %-28s %-24s %9.2f %8.2f %8.2f %9.2f\n", j, s.device.node.c_str(),
                  device_name(c, s.device).c_str(), s.device.kind.c_str(), units.c_str(), mem.c_str(), s.compute_ms,
                  s.send_ms, s.receive_ms, s.stage_ms);
    }
    std::printf("  bottleneck: %s\n", vw.bottleneck.c_str());
  }
  std::printf("parameter servers (%s):", p.ps_local ? "local" : "spread");
  for (std::size_t n = 0; n < p.nodes.size(); ++n) std::printf(" %s %s;", p.nodes[n].c_str(), gib(p.ps_bytes[n]).c_str());
  std::printf(" push + pull per wave %.2f ms\n", p.sync_ms);
  std::printf("predicted: %.1f samples/s; bottleneck: %s\n", p.predicted_samples_per_s, p.bottleneck.c_str());
}

struct estimates {
  std::optional<topology::hetpipe_plan> hetpipe;
  std::string hetpipe_error;
  std::optional<topology::dp_estimate> dp;
  std::string dp_error;
  std::optional<topology::dp_estimate> single;
  std::string single_error;
  // ps and ralp: samples/s of the cost model (topology/ralp_cost.hpp) and
  // what the number stands for.
  double ps_sps = 0, ralp_sps = 0;
  std::string ps_error, ralp_error, ps_note, ralp_note;
  // What `simulate` prints for them: a BSP step's parts.
  struct step_parts {
    int workers = 0, shards = 0;  // shards: ps only
    int64_t batch = 0;
    double step_ms = 0, worker_ms = 0, transfer_ms = 0, server_ms = 0;
    uint64_t bytes_per_step = 0;  // through the busiest shard's link (ps) or the server's (ralp)
    std::string cut_unit;         // ralp: the first unit on the server
    std::size_t cut = 0;
    std::string cut_source;       // ralp: "ralp_cut" or "cost model"
    double gbps = 0, latency_us = 0;
  };
  step_parts ps_parts, ralp_parts;
};

// Strategies "ps" and "ralp" from RALP's cost model (BSP steps, every worker
// a batch of batch_size, as auto's dp and hetpipe): ralp at its ralp_cut, or
// at the best cut when that is 0 (what the server chooses); ps from the same
// profile and link, with the model's weights on the job's shards as the
// workers place them (ps_placement, by each unit's parameter bytes):
//
//   step_ms = max over workers of compute(all units)
//           + max over shards k of ( W x 2 x bytes_k / bandwidth     every worker's push and pull of k's weights
//                                   + W x update_ms x bytes_k / params  k's optimizer steps, one per push, on
//                                                                       the kind of k's node
//                                   + 2 x latency )                     the last push, then the pull's answer
//
// Each shard has a link of its own (the shards run on several nodes); the
// pulls wait for the slowest shard. No overlap of a step's parts.
void estimate_ps_ralp(const topology::cluster& c, const topology::profile_db& db, estimates& e) {
  auto ro = actors::ralp_job::options_of(c);
  if (!ro) {
    e.ps_error = e.ralp_error = ro.error().message();
    return;
  }
  const std::string fallback = db.devices.empty() ? std::string() : db.devices.begin()->first;
  const auto in = actors::ralp_job::cost_inputs(c, db, *ro, fallback);
  auto r = topology::estimate_ralp(db, in);
  if (!r) {
    e.ps_error = e.ralp_error = r.error().message();
    return;
  }
  const int64_t batch = r->batch > 0 ? r->batch : in.batch;
  const double rows = double(in.workers) * double(batch);
  const topology::ralp_candidate* best = nullptr;
  for (const auto& k : r->candidates)
    if (k.cut < db.units.size() && (best == nullptr || k.step_ms < best->step_ms)) best = &k;
  const bool fixed = ro->cut > 0;
  if (fixed) best = r->find(std::size_t(ro->cut));
  // The run's server picks its cut from plain profiles (its own kind for
  // every worker): where node speeds scaled a worker's kind (KIND@NODE,
  // actors::profiles_on_pinned_nodes), the cut is chosen on the plain kinds
  // and priced on the scaled ones.
  auto plain = [](std::string k) { return k.substr(0, k.find('@')); };
  bool scaled = plain(in.server_kind) != in.server_kind;
  for (const auto& k : in.worker_kinds) scaled |= plain(k) != k;
  if (!fixed && scaled) {
    auto in_plain = in;
    in_plain.server_kind = plain(in.server_kind);
    for (auto& k : in_plain.worker_kinds) k = plain(k);
    if (auto rp = topology::estimate_ralp(db, in_plain)) {
      const topology::ralp_candidate* chosen = nullptr;
      for (const auto& k : rp->candidates)
        if (k.cut < db.units.size() && (chosen == nullptr || k.step_ms < chosen->step_ms)) chosen = &k;
      if (chosen != nullptr) best = r->find(chosen->cut);
    }
  }
  char buf[160];
  if (best != nullptr && best->step_ms > 0) {
    e.ralp_sps = rows / best->step_ms * 1000.0;
    std::snprintf(buf, sizeof buf, "cut before %s, %d worker%s", best->unit.c_str(), in.workers,
                  in.workers == 1 ? "" : "s");
    e.ralp_note = buf;
    auto& p = e.ralp_parts;
    p.workers = in.workers;
    p.batch = batch;
    p.step_ms = best->step_ms;
    p.worker_ms = best->worker_ms;
    p.transfer_ms = best->transfer_ms;
    p.server_ms = best->server_ms;
    p.bytes_per_step = best->bytes_per_step;
    p.cut = best->cut;
    p.cut_unit = best->unit;
    p.cut_source = fixed ? "ralp_cut" : "cost model";
    p.gbps = in.gbps;
    p.latency_us = in.latency_us;
  } else {
    e.ralp_error = fixed ? "ralp_cut = " + std::to_string(ro->cut) + " is not a unit boundary of the model (1.." +
                               std::to_string(db.units.size() - 1) + ")"
                         : "the model has no unit to cut before";
  }
  auto po = actors::ps_job::options_of(c);
  if (!po) {
    e.ps_error = po.error().message();
    return;
  }
  const topology::profile_db at = db.at_batch(batch);
  std::vector<int64_t> unit_bytes;
  for (const auto& u : at.units) unit_bytes.push_back(int64_t(u.params_bytes));
  const int shards = std::max(1, po->shards);
  const auto pl = ps::place_by_bytes(unit_bytes, shards);
  const uint64_t params = at.params_bytes(0, at.units.size() - 1);
  const double W = double(in.workers);
  auto& p = e.ps_parts;
  p.workers = in.workers;
  p.shards = shards;
  p.batch = batch;
  p.gbps = in.gbps;
  p.latency_us = in.latency_us;
  for (const auto& kind : in.worker_kinds) p.worker_ms = std::max(p.worker_ms, at.compute_ms(kind, 0, at.units.size() - 1));
  // Each shard steps on its own node's device kind (the profile's kind of
  // the node's first device, as the ralp server's; the server's when none).
  auto shard_kind = [&](int k) {
    const topology::node_spec* n =
        std::size_t(k) < po->shard_nodes.size() ? c.find_node(po->shard_nodes[std::size_t(k)]) : nullptr;
    if (n != nullptr && !n->devices.empty()) {
      std::string kind = topology::device_profile_kind(n->devices.front(), at);
      if (!kind.empty() && at.devices.count(kind)) return kind;
    }
    return in.server_kind;
  };
  for (int k = 0; k < shards; ++k) {
    const double b = double(pl.bytes_of[std::size_t(k)]);
    const double update = at.update_ms(shard_kind(k), 0, at.units.size() - 1);
    const double transfer = W * 2.0 * b / (in.gbps * 1e9 / 8.0 / 1e3) + 2.0 * in.latency_us / 1e3;
    const double server = params > 0 ? W * update * b / double(params) : 0.0;
    if (transfer + server > p.transfer_ms + p.server_ms) {
      p.transfer_ms = transfer;
      p.server_ms = server;
      p.bytes_per_step = uint64_t(W * 2.0 * b);
    }
  }
  p.step_ms = p.worker_ms + p.transfer_ms + p.server_ms;
  if (p.step_ms > 0) e.ps_sps = rows / p.step_ms * 1000.0;
  std::snprintf(buf, sizeof buf, "%s, %d worker%s, %d shard%s", po->model.to_string().c_str(), in.workers,
                in.workers == 1 ? "" : "s", shards, shards == 1 ? "" : "s");
  e.ps_note = buf;
}

// Everything "auto" compares. `devices` with profile kinds.
estimates estimate_all(const topology::cluster& c, const std::vector<topology::plan_device>& devices,
                       const topology::profile_db& db) {
  estimates e;
  auto opts = topology::hetpipe_options_of(c);
  if (!opts) {
    e.hetpipe_error = opts.error().message();
  } else {
    std::vector<std::string> names;
    for (const auto& n : c.nodes) names.push_back(n.name);
    auto p = topology::plan_hetpipe(devices, names, db, *opts);
    if (p)
      e.hetpipe = std::move(*p);
    else
      e.hetpipe_error = p.error().message();
  }
  const int64_t batch = c.job.params.get_int("batch_size", db.batch);
  // Strategy dp: batch_size is the global batch (as the dp job splits it).
  // Compared with hetpipe ("auto", plan): every replica a minibatch of
  // batch_size, as a HetPipe VW gets (the HetPipe paper's DP baseline).
  const bool global = c.job.params.get_string("strategy", "single") == "dp";
  auto dp = topology::estimate_dp(dp_devices(c, devices), db.at_batch(batch), global ? batch : 0,
                                  global && c.job.params.get_string("dp_split", "measured") == "equal");
  if (dp)
    e.dp = std::move(*dp);
  else
    e.dp_error = dp.error().message();
  // single: the fastest device that holds the model
  for (const auto& d : devices) {
    auto s = topology::estimate_single(d, db.at_batch(batch), batch);
    if (s && (!e.single || s->samples_per_s > e.single->samples_per_s)) e.single = std::move(*s);
    if (!s && e.single_error.empty()) e.single_error = s.error().message();
  }
  estimate_ps_ralp(c, db, e);
  return e;
}

// "auto": the strategy with the shortest predicted epoch, and why.
std::pair<std::string, std::string> choose(const topology::cluster& c, const estimates& e) {
  const double epoch = double(epoch_samples(c));
  std::vector<std::pair<double, std::string>> v;
  std::string why;
  char buf[256];
  auto add = [&](const char* name, double sps, const std::string& err, const std::string& note = {}) {
    if (sps > 0) {
      v.push_back({sps, name});
      std::snprintf(buf, sizeof buf, "%s%s%s%s %.1f samples/s (%.1f s per epoch of %.0f samples)", name,
                    note.empty() ? "" : " (", note.c_str(), note.empty() ? "" : ")", sps, epoch / sps, epoch);
    } else {
      std::snprintf(buf, sizeof buf, "%s not possible (%s)", name, err.c_str());
    }
    why += (why.empty() ? "" : "; ") + std::string(buf);
  };
  // Streamed input reaches single, ps and hetpipe only (dp and ralp read
  // it from memory), and ps workers and hetpipe VWs need a stream shard
  // each (builtin::check_stream_shards): the others are out whatever they
  // would do.
  const auto& p = c.job.params;
  const bool streamed = p.get_string("input", "memory") == "stream";
  const std::string memory_only = "input = \"stream\": it reads input = \"memory\" only";
  // The shards the job would have (stream_options_of: hetpipe one per node
  // unless preprocess_shards says; ps one per worker unless it says).
  status hp_short, ps_short;
  if (streamed) {
    auto so = actors::builtin::stream_options_of(c);
    if (!so) {
      hp_short = ps_short = so.error();
    } else {
      const int64_t vws = e.hetpipe ? int64_t(e.hetpipe->virtual_workers.size()) : 0;
      hp_short = actors::builtin::check_stream_shards(so->shards(), vws, "virtual workers");
      if (p.get_int("preprocess_shards", 0) > 0)
        ps_short = actors::builtin::check_stream_shards(so->shards(), e.ps_parts.workers, "ps workers");
    }
  }
  add("single", e.single ? e.single->samples_per_s : 0, e.single_error);
  add("dp", e.dp && !streamed ? e.dp->samples_per_s : 0, streamed ? memory_only : e.dp_error);
  add("hetpipe", e.hetpipe && hp_short.ok() ? e.hetpipe->predicted_samples_per_s : 0,
      hp_short.ok() ? e.hetpipe_error : hp_short.message());
  add("ps", ps_short.ok() ? e.ps_sps : 0, ps_short.ok() ? e.ps_error : ps_short.message(), e.ps_note);
  add("ralp", streamed ? 0 : e.ralp_sps, streamed ? memory_only : e.ralp_error, e.ralp_note);
  if (v.empty()) return {"", why};
  std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.first > b.first; });
  std::string chosen = v.front().second;
  if (v.size() > 1) {
    std::snprintf(buf, sizeof buf, "%s: %.2fx the next best (%s)", chosen.c_str(), v[0].first / v[1].first,
                  v[1].second.c_str());
    why = std::string(buf) + ". " + why;
  }
  return {chosen, why};
}

}  // namespace

// profiles_at, with each pinned local node's CPU speed where they are
// measured here (actors::profiles_on_pinned_nodes).
expected<topology::profile_db> local_profiles(topology::cluster& c, int64_t measure_batch) {
  const local_pinning pin = local_node_pinning(c);
  return actors::profiles_on_pinned_nodes(c, measure_batch, pin.nodes, pin.cpus);
}

expected<topology::profile_db> job_profiles(topology::cluster& c) {
  return local_profiles(c, c.job.params.get_int("batch_size", 64));
}

int plan_hetpipe_command(const topology::cluster& c_in, const std::string& file, bool json_out) {
  topology::cluster c = c_in;
  auto db = job_profiles(c);
  if (!db) {
    std::fprintf(stderr, "hetflow plan: %s\n", db.error().message().c_str());
    return 2;
  }
  auto devices = topology::plan_devices(c, *db);
  if (!devices) {
    std::fprintf(stderr, "%s:%u:%u: error: %s\n", file.c_str(), unsigned(c.job.where.line),
                 unsigned(c.job.where.column), devices.error().message().c_str());
    return 2;
  }
  const bool is_auto = c.job.params.get_string("strategy") == "auto";
  auto e = estimate_all(c, *devices, *db);
  if (!is_auto && !e.hetpipe) {
    std::fprintf(stderr, "hetflow plan: %s: no HetPipe plan: %s\n", file.c_str(), e.hetpipe_error.c_str());
    return 2;
  }
  auto [chosen, why] = choose(c, e);
  const topology::profile_db at = db->at_batch(c.job.params.get_int("batch_size", db->batch));
  if (json_out) {
    json j = e.hetpipe ? plan_json(c, *e.hetpipe, at) : json{{"strategy", chosen}};
    j["topology"] = file;
    j["cluster"] = c.name;
    j["profiles"] = db->source;
    if (is_auto) {
      j["strategy"] = chosen;
      j["requested_strategy"] = "auto";
      j["why"] = why;
      if (e.dp) j["dp_predicted_samples_per_s"] = e.dp->samples_per_s;
      if (e.single) j["single_predicted_samples_per_s"] = e.single->samples_per_s;
      if (e.hetpipe) j["hetpipe_predicted_samples_per_s"] = e.hetpipe->predicted_samples_per_s;
      if (e.ps_sps > 0) j["ps_predicted_samples_per_s"] = e.ps_sps;
      if (e.ralp_sps > 0) j["ralp_predicted_samples_per_s"] = e.ralp_sps;
      if (chosen != "hetpipe") j.erase("virtual_workers");
    }
    std::printf("%s\n", j.dump(1).c_str());
    return 0;
  }
  std::printf("plan for %s: cluster '%s', job 'train' (strategy %s)\n", file.c_str(), c.name.c_str(),
              is_auto ? "auto" : "hetpipe");
  std::printf("profiles: %s (batch %lld, %zu units)\n", db->source.c_str(), static_cast<long long>(db->batch),
              db->units.size());
  if (e.hetpipe) print_plan(c, *e.hetpipe, at);
  if (is_auto) {
    std::printf("auto: %s\n", chosen.empty() ? "nothing fits" : ("chooses " + chosen).c_str());
    std::printf("  why: %s\n", why.c_str());
    if (e.dp && !e.dp->left_out.empty())
      for (const auto& l : e.dp->left_out) std::printf("  dp leaves out %s\n", l.c_str());
  } else if (e.dp) {
    std::printf("for comparison, data parallel (ring) over the %zu devices that hold the model: %.1f samples/s\n",
                e.dp->replicas.size(), e.dp->samples_per_s);
  }
  return chosen.empty() ? 2 : 0;
}

int simulate_command(const std::vector<std::string>& args, const actors::registry& reg) {
  std::string file;
  bool json_out = false;
  topology::simulation_options so;
  bool as_run = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[i];
    if (a == "--json") {
      json_out = true;
    } else if (a == "--as-run") {
      as_run = true;
    } else if (a == "--waves" && i + 1 < args.size()) {
      so.waves = std::atoi(args[++i].c_str());
      if (so.waves < 2) {
        std::fprintf(stderr, "hetflow simulate: --waves wants an integer >= 2\n");
        return 2;
      }
      so.warmup_waves = std::min(so.warmup_waves, so.waves / 4);
    } else if (file.empty() && !a.empty() && a[0] != '-') {
      file = a;
    } else {
      std::fprintf(stderr, "hetflow simulate: unexpected argument '%s'\n%s", a.c_str(), usage);
      return 2;
    }
  }
  if (file.empty()) {
    std::fprintf(stderr, "%s", usage);
    return 2;
  }
  auto loaded = load_or_report(file, reg);
  if (!loaded) return 2;
  topology::cluster c = std::move(*loaded);
  if (c.job.kind != "train") {
    std::fprintf(stderr, "hetflow simulate: %s runs a '%s' job; simulate predicts 'train' jobs\n", file.c_str(),
                 c.job.kind.c_str());
    return 2;
  }
  const std::string strategy = c.job.params.get_string("strategy", "single");
  const int64_t batch = c.job.params.get_int("batch_size", 64);
  // Without a profile file dp is measured at each replica's share of the batch.
  int64_t measure_batch = batch;
  if (strategy == "dp" && !c.job.params.contains("profile_file")) {
    std::size_t replicas = 0;
    auto nodes = c.job.params.get_strings("dp_nodes");
    for (const auto& n : c.nodes)
      if (nodes.empty() || std::find(nodes.begin(), nodes.end(), n.name) != nodes.end())
        replicas += std::max<std::size_t>(1, n.devices.size());
    measure_batch = std::max<int64_t>(1, batch / int64_t(std::max<std::size_t>(1, replicas)));
  }
  auto db = local_profiles(c, measure_batch);
  if (!db) {
    std::fprintf(stderr, "hetflow simulate: %s\n", db.error().message().c_str());
    return 2;
  }
  auto devices = topology::plan_devices(c, *db);
  if (!devices) {
    std::fprintf(stderr, "%s: error: %s\n", file.c_str(), devices.error().message().c_str());
    return 2;
  }
  auto e = estimate_all(c, *devices, *db);
  std::string chosen = strategy;
  std::string why;
  if (strategy == "auto") std::tie(chosen, why) = choose(c, e);
  json j{{"topology", file}, {"cluster", c.name}, {"strategy", chosen}, {"profiles", db->source}};
  if (strategy == "auto") j["why"] = why;
  if (chosen == "hetpipe") {
    if (!e.hetpipe) {
      std::fprintf(stderr, "hetflow simulate: %s: no HetPipe plan: %s\n", file.c_str(), e.hetpipe_error.c_str());
      return 2;
    }
    const auto& p = *e.hetpipe;
    // The waves as the plan priced them and `hetflow run` does them:
    // drained with hetpipe_waves = "drain", else HetPipe's overlapped waves.
    // (Until 2026-11-29 only --as-run did so: a drain file was priced
    // drained and simulated overlapped. --as-run is kept; it only labels.)
    so.drain_waves = topology::runtime_drains_waves(c);
    auto r = topology::simulate_hetpipe(p, *db, so);
    if (!r) {
      std::fprintf(stderr, "hetflow simulate: %s\n", r.error().message().c_str());
      return 1;
    }
    j["allocation"] = topology::to_string(p.policy);
    j["ps_placement"] = p.ps_local ? "local" : "spread";
    j["nm"] = p.nm;
    j["staleness"] = p.staleness;
    j["batch"] = p.batch;
    j["predicted_samples_per_s"] = p.predicted_samples_per_s;
    j["simulated_samples_per_s"] = r->samples_per_s;
    j["simulated_ms"] = r->window_ms;
    j["waves"] = so.waves;
    j["wave_model"] = so.drain_waves ? "drained" : "overlapped";
    json vws = json::array();
    for (std::size_t v = 0; v < r->virtual_workers.size(); ++v) {
      const auto& sv = r->virtual_workers[v];
      json util = json::array();
      for (const auto& s : sv.stages) util.push_back(s.utilisation);
      json st = json::array();
      for (const auto& s : p.virtual_workers[v].stages) st.push_back(stage_json(c, s));
      vws.push_back(json{{"samples_per_s", sv.samples_per_s}, {"wsp_wait_ms", sv.wsp_wait_ms},
                         {"utilisation", util}, {"stages", st}});
    }
    j["virtual_workers"] = vws;
    if (e.dp) j["dp_predicted_samples_per_s"] = e.dp->samples_per_s;
    if (json_out) {
      std::printf("%s\n", j.dump(1).c_str());
      return 0;
    }
    std::printf("simulate %s: strategy hetpipe, %zu virtual workers (%s), Nm = %d, D = %d, batch %lld, PS %s; "
                "%d waves per VW (%d warm-up)%s\n",
                file.c_str(), p.virtual_workers.size(), topology::to_string(p.policy), p.nm, p.staleness,
                static_cast<long long>(p.batch), p.ps_local ? "local" : "spread", so.waves, so.warmup_waves,
                so.drain_waves ? "; drained waves (hetpipe_waves = \"drain\"), as hetflow run does them"
                : as_run       ? "; overlapped waves, as hetflow run does them"
                               : "");
    if (!why.empty()) std::printf("  auto: %s\n", why.c_str());
    for (std::size_t v = 0; v < r->virtual_workers.size(); ++v) {
      const auto& sv = r->virtual_workers[v];
      std::printf("  VW %zu: %.1f samples/s, waited %.1f ms for WSP pulls; stages", v, sv.samples_per_s,
                  sv.wsp_wait_ms);
      for (std::size_t s = 0; s < sv.stages.size(); ++s)
        std::printf(" %s %.0f%%", p.virtual_workers[v].stages[s].device.kind.c_str(),
                    100 * sv.stages[s].utilisation);
      std::printf("\n");
    }
    std::printf("simulated: %.1f samples/s (planner's estimate %.1f)\n", r->samples_per_s, p.predicted_samples_per_s);
    if (e.dp) std::printf("data parallel (ring) estimate for comparison: %.1f samples/s\n", e.dp->samples_per_s);
    return 0;
  }
  const topology::dp_estimate* est = nullptr;
  if (chosen == "dp") {
    if (!e.dp) {
      std::fprintf(stderr, "hetflow simulate: %s: data parallelism: %s\n", file.c_str(), e.dp_error.c_str());
      return 2;
    }
    est = &*e.dp;
  } else if (chosen == "ps" || chosen == "ralp") {
    const bool ps = chosen == "ps";
    const double sps = ps ? e.ps_sps : e.ralp_sps;
    if (!(sps > 0)) {
      std::fprintf(stderr, "hetflow simulate: %s: strategy %s: %s\n", file.c_str(), chosen.c_str(),
                   (ps ? e.ps_error : e.ralp_error).c_str());
      return 2;
    }
    const auto& sp = ps ? e.ps_parts : e.ralp_parts;
    j["model"] = ps ? "cost model (simulate_command.cpp, estimate_ps_ralp): BSP step = slowest worker's compute + the "
                      "busiest shard's pushes, updates and pulls"
                    : "cost model (topology/ralp_cost.hpp): BSP step = workers' lower units + transfers + the "
                      "server's upper units and updates for every worker";
    j["simulated_samples_per_s"] = sps;
    j["predicted_samples_per_s"] = sps;
    j["step_ms"] = sp.step_ms;
    j["worker_ms"] = sp.worker_ms;
    j["transfer_ms"] = sp.transfer_ms;
    j["server_ms"] = sp.server_ms;
    j["bytes_per_step"] = sp.bytes_per_step;
    j["workers"] = sp.workers;
    j["batch"] = sp.batch;
    j["link"] = json{{"gbps", sp.gbps}, {"latency_us", sp.latency_us}};
    if (ps) {
      j["shards"] = sp.shards;
      j["note"] = e.ps_note;  // consistency, workers, shards
    } else {
      j["cut"] = sp.cut;
      j["cut_unit"] = sp.cut_unit;
      j["cut_source"] = sp.cut_source;
    }
    if (json_out) {
      std::printf("%s\n", j.dump(1).c_str());
      return 0;
    }
    std::printf("simulate %s: strategy %s (%s), batch %lld per worker (cost model)\n", file.c_str(), chosen.c_str(),
                (ps ? e.ps_note : e.ralp_note + ", " + sp.cut_source).c_str(), static_cast<long long>(sp.batch));
    if (!why.empty()) std::printf("  auto: %s\n", why.c_str());
    std::printf("  link %.3g Gb/s, %.3g us a message (%s)\n", sp.gbps, sp.latency_us, db->source.c_str());
    std::printf("  step %.3f ms = workers %.3f ms + transfers %.3f ms (%.1f KiB%s) + %s %.3f ms\n", sp.step_ms,
                sp.worker_ms, sp.transfer_ms, double(sp.bytes_per_step) / 1024.0,
                ps ? " through the busiest shard" : "", ps ? "its updates" : "server", sp.server_ms);
    std::printf("simulated: %.1f samples/s\n", sps);
    return 0;
  } else if (chosen == "single") {
    // The head node's first device, as the job runs it.
    auto head = (*devices)[0];
    auto s = topology::estimate_single(head, db->at_batch(batch), batch);
    if (!s) {
      std::fprintf(stderr, "hetflow simulate: %s\n", s.error().message().c_str());
      return 2;
    }
    e.single = std::move(*s);
    est = &*e.single;
  } else {
    std::fprintf(stderr, "hetflow simulate: %s: nothing fits: %s\n", file.c_str(), why.c_str());
    return 2;
  }
  j["model"] = "cost model (topology/cost_model.hpp): compute of the slowest replica + ring all-reduce";
  j["simulated_samples_per_s"] = est->samples_per_s;
  j["predicted_samples_per_s"] = est->samples_per_s;
  j["step_ms"] = est->step_ms;
  j["compute_ms"] = est->compute_ms;
  j["allreduce_ms"] = est->allreduce_ms;
  if (est->handover_ms > 0) j["handover_ms"] = est->handover_ms;
  if (!est->allreduce_model.empty()) j["allreduce_model"] = est->allreduce_model;
  if (db->links.host_ring_gbps > 0)
    j["host_ring"] = json{{"gbps", db->links.host_ring_gbps},
                          {"latency_us", db->links.host_ring_latency_us},
                          {"members", db->links.host_ring_members},
                          {"step_factor", db->links.host_ring_step_factor}};
  j["step_factor"] = est->step_factor;
  j["device_step_factor"] = est->device_step_factor;
  j["global_batch"] = est->global_batch;
  json reps = json::array();
  for (std::size_t i = 0; i < est->replicas.size(); ++i)
    reps.push_back(json{{"node", est->replicas[i].node}, {"device", est->replicas[i].device},
                        {"kind", est->replicas[i].kind}, {"rows", est->rows[i]}});
  j["replicas"] = reps;
  j["left_out"] = est->left_out;
  if (json_out) {
    std::printf("%s\n", j.dump(1).c_str());
    return 0;
  }
  std::printf("simulate %s: strategy %s, %zu replica%s, global batch %lld (cost model)\n", file.c_str(),
              chosen.c_str(), est->replicas.size(), est->replicas.size() == 1 ? "" : "s",
              static_cast<long long>(est->global_batch));
  if (!why.empty()) std::printf("  auto: %s\n", why.c_str());
  for (std::size_t i = 0; i < est->replicas.size(); ++i)
    std::printf("  replica %zu: %s dev%zu (%s), %lld rows\n", i, est->replicas[i].node.c_str(),
                est->replicas[i].device, est->replicas[i].kind.c_str(), static_cast<long long>(est->rows[i]));
  for (const auto& l : est->left_out) std::printf("  left out: %s\n", l.c_str());
  std::printf("  step %.3f ms = compute %.3f ms", est->step_ms, est->compute_ms);
  if (est->device_step_factor != 1) std::printf(" (x %.2f: a whole step over its units)", est->device_step_factor);
  if (est->step_factor > 1) std::printf(" (x %.2f: replicas computing at once)", est->step_factor);
  std::printf(" + all-reduce %.3f ms%s\n", est->allreduce_ms,
              est->allreduce_model.empty() ? "" : (" (" + est->allreduce_model + ")").c_str());
  std::printf("simulated: %.1f samples/s\n", est->samples_per_s);
  return 0;
}

expected<std::pair<std::string, std::string>> choose_auto_strategy(const topology::cluster& c_in) {
  topology::cluster c = c_in;
  HF_ASSIGN_OR_RETURN(topology::profile_db db, job_profiles(c));
  HF_ASSIGN_OR_RETURN(std::vector<topology::plan_device> devices, topology::plan_devices(c, db));
  auto e = estimate_all(c, devices, db);
  auto [chosen, why] = choose(c, e);
  if (chosen.empty())
    return make_error(errc::invalid_argument, "strategy \"auto\": no strategy can run this job: " + why);
  return std::make_pair(chosen, why);
}

int resolve_strategy(const std::string& file, const actors::registry& reg, const char* command,
                     std::string& strategy, const std::function<void()>& before_measuring) {
  auto parsed = topology::load_topology(file, reg.catalog());
  if (!parsed.ok() || parsed.model->job.kind != "train") {
    if (!strategy.empty()) {
      std::fprintf(stderr, "hetflow %s: --strategy applies to a train job with strategy = \"auto\"\n", command);
      return 2;
    }
    return 0;
  }
  const auto& c = *parsed.model;
  const std::string in_file = c.job.params.get_string("strategy", "single");
  if (!strategy.empty() && in_file != "auto") {
    if (strategy == in_file) return 0;
    std::fprintf(stderr, "hetflow %s: %s: --strategy %s, but the file sets strategy = \"%s\" (--strategy resolves "
                         "\"auto\" only)\n", command, file.c_str(), strategy.c_str(), in_file.c_str());
    return 2;
  }
  std::string s = in_file;
  if (in_file == "auto") {
    if (!strategy.empty()) {
      if (strategy != "single" && strategy != "dp" && strategy != "hetpipe" && strategy != "ps" &&
          strategy != "ralp") {
        std::fprintf(stderr, "hetflow %s: --strategy %s: auto chooses single, dp, hetpipe, ps or ralp\n", command,
                     strategy.c_str());
        return 2;
      }
      s = strategy;
    } else {
      const bool alone = std::string(command) == "node";
      if (alone && !c.job.params.contains("profile_file")) {
        std::fprintf(stderr,
                     "hetflow node: %s: [job] strategy = \"auto\": every node must run the strategy the others "
                     "run, and profiles measured here may differ from the other machines': start the nodes with "
                     "`hetflow run %s` (it decides once), pass --strategy (what `hetflow plan %s` chooses), or "
                     "name a profile_file\n",
                     file.c_str(), file.c_str(), file.c_str());
        return 2;
      }
      if (before_measuring && !c.job.params.contains("profile_file")) before_measuring();
      auto chosen = choose_auto_strategy(c);
      if (!chosen) {
        std::fprintf(stderr, "hetflow %s: %s: %s\n", command, file.c_str(), chosen.error().message().c_str());
        return 2;
      }
      s = chosen->first;
      std::fprintf(stderr, "hetflow %s: strategy \"auto\" chose \"%s\": %s\n", command, s.c_str(),
                   chosen->second.c_str());
    }
    strategy = s;
  }
  return 0;
}

}  // namespace hetflow::apps
