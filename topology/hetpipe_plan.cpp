#include "topology/hetpipe_plan.hpp"

#include "topology/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <tuple>

namespace hetflow::topology {
namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

std::string device_label(const plan_device& d) {
  return d.node + " dev" + std::to_string(d.device) + " (" + d.kind + ")";
}

std::string format_gib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(b) / double(1ull << 30));
  return buf;
}

// Transfer between two devices of a VW.
double hop_ms(const plan_device& a, const plan_device& b, uint64_t bytes, const profile_db& db) {
  if (a.node_index == b.node_index && a.device == b.device) return 0.0;
  const double gbps = a.node_index == b.node_index ? db.links.intra_node_gbps : db.links.inter_node_gbps;
  return transfer_ms(bytes, gbps, db.links.latency_us);
}

double kind_speed(const profile_db& db, const std::string& kind) {
  const double ms = db.compute_ms(kind, 0, db.units.size() - 1);
  return ms > 0 ? double(db.batch) / ms : inf;
}

struct stage_eval {
  double stage_ms = inf;
  double compute = 0, send = 0, receive = 0;
  uint64_t memory = 0;
  bool fits = false;
};

// A stage's bookkeeping per minibatch with overlapped waves (0 drained).
double wave_ms(const std::vector<plan_device>& devs, std::size_t j, std::size_t first, std::size_t last,
               const profile_db& db, int nm, bool overlap) {
  if (!overlap) return 0.0;
  const std::size_t k = std::min<std::size_t>(std::size_t(nm), devs.size() - j);  // its slots
  // Its weights copied into each minibatch's slot, but on a cpu stage with
  // one slot (the slot holds the local weights); a cpu stage sums its step's
  // changes in the step's pass, a cuda stage with several slots copies its
  // weights before the step first.
  const int copies = devs[j].cuda ? (k > 1 ? 2 : 1) : (k > 1 ? 1 : 0);
  return db.wave_ms(devs[j].kind, first, last, copies);
}

// A stage's passes over its weights once per wave (its rebase and push; with
// the shard of its weights on its node, the shard's add and answer too), per
// minibatch: on its device's cores (hetflow run gives a local node the CPUs
// of its cpu devices, so its shard and push thread share them).
double sync_share_ms(const std::vector<plan_device>& devs, std::size_t j, std::size_t first, std::size_t last,
                     const profile_db& db, int nm, bool shard_here) {
  if (devs[j].cuda) return 0.0;  // a cuda stage's are not profiled (they run on its device and its host's other cores)
  return db.wave_sync_ms(devs[j].kind, first, last, shard_here) / double(std::max(1, nm));
}

// Weight-sized buffers a stage of k slots keeps on its device (hp_core.cpp,
// stage_core::make and its updates), with `optimizer_states` per weight
// (sgd with momentum 1, plain sgd 0, adam 2):
//   each slot's weights and gradients                         2k
//   the local weights: a cpu stage's, unless its one slot's   1 (overlapped, one slot: 0)
//     are them; a cuda stage's, and their gradients           2
//   W(c), the last pull (host: a cpu stage's device)          1 (cuda: 0)
//   the optimizer's state                                     optimizer_states
//   overlapped: the wave updates (this wave's, the previous   3
//     one's until the shards hold it, a spare); a cuda stage
//     of 2+ slots also the weights before each step           1
//   drained: the wave's update, made at its end (host)        1 (cuda: 0)
//   cuda: the buffer the pulls are uploaded into              1
uint64_t weight_copies(bool cuda, bool overlap, uint64_t k, int optimizer_states) {
  const uint64_t o = uint64_t(std::max(0, optimizer_states));
  if (cuda) return 2 * k + 2 + o + (overlap ? 3 + (k >= 2 ? 1 : 0) : 0) + 1;
  return 2 * k + (overlap && k == 1 ? 0 : 1) + 1 + o + (overlap ? 3 : 1);
}

// Stage j of S on devs[j] holding units [first, last].
stage_eval eval_stage(const std::vector<plan_device>& devs, std::size_t j, std::size_t first, std::size_t last,
                      const profile_db& db, int nm, bool overlap, bool shard_here, int optimizer_states) {
  stage_eval e;
  const std::size_t S = devs.size();
  e.compute = (db.compute_ms(devs[j].kind, first, last) + db.update_ms(devs[j].kind, first, last)) *
                  devs[j].compute_factor +
              wave_ms(devs, j, first, last, db, nm, overlap) + sync_share_ms(devs, j, first, last, db, nm, shard_here);
  if (j + 1 < S) e.send += hop_ms(devs[j], devs[j + 1], db.units[last].output_bytes, db);
  if (j > 0) e.send += hop_ms(devs[j - 1], devs[j], db.units[first - 1].output_bytes, db);
  // A cpu stage's node receives its activations and gradients on the cores
  // the stage computes on (the data plane's progress thread; on a one-CPU
  // node it preempts the stage's compute: 0.9-1.3 ms of that thread's CPU a
  // minibatch for the capped VGG-11 pair's 802 KB each way, of which the
  // stage's send took 0.43, 2026-12-07): each as long as its send. A cuda
  // stage's host receives beside the device.
  if (!devs[j].cuda) {
    if (j > 0) e.receive += hop_ms(devs[j - 1], devs[j], db.units[first - 1].output_bytes, db);
    if (j + 1 < S) e.receive += hop_ms(devs[j], devs[j + 1], db.units[last].output_bytes, db);
  }
  const uint64_t k = uint64_t(std::min<std::size_t>(std::size_t(nm), S - j));
  e.memory = db.params_bytes(first, last) * weight_copies(devs[j].cuda, overlap, k, optimizer_states) +
             db.activation_bytes(first, last) * k;
  e.fits = devs[j].memory_bytes == 0 || e.memory <= devs[j].memory_bytes;
  e.stage_ms = e.compute + e.send + e.receive;
  return e;
}

struct order_result {
  double max_stage = inf;
  double sum = inf;
  std::vector<std::size_t> ends;  // last unit of each stage
};

// Dynamic programming over boundaries for one device order.
order_result best_boundaries(const std::vector<plan_device>& devs, const profile_db& db, int nm, bool overlap,
                             bool shard_here, int optimizer_states) {
  const std::size_t S = devs.size(), n = db.units.size();
  order_result out;
  if (S == 0 || n < S) return out;
  // best[j][i]: stages 0..j hold units 0..i; (max stage, sum of stage ms)
  using cell = std::pair<double, double>;
  std::vector<std::vector<cell>> best(S, std::vector<cell>(n, {inf, inf}));
  std::vector<std::vector<std::size_t>> from(S, std::vector<std::size_t>(n, 0));
  for (std::size_t i = 0; i + S <= n; ++i) {
    auto e = eval_stage(devs, 0, 0, i, db, nm, overlap, shard_here, optimizer_states);
    if (e.fits) best[0][i] = {e.stage_ms, e.stage_ms};
  }
  for (std::size_t j = 1; j < S; ++j) {
    for (std::size_t i = j; i + (S - j) <= n; ++i) {       // stage j ends at i
      for (std::size_t f = j; f <= i; ++f) {                // stage j starts at f
        const cell& prev = best[j - 1][f - 1];
        if (prev.first == inf) continue;
        auto e = eval_stage(devs, j, f, i, db, nm, overlap, shard_here, optimizer_states);
        if (!e.fits) continue;
        cell c{std::max(prev.first, e.stage_ms), prev.second + e.stage_ms};
        if (c < best[j][i]) {
          best[j][i] = c;
          from[j][i] = f;
        }
      }
    }
  }
  const cell& last = best[S - 1][n - 1];
  if (last.first == inf) return out;
  out.max_stage = last.first;
  out.sum = last.second;
  out.ends.assign(S, 0);
  std::size_t i = n - 1;
  for (std::size_t j = S; j-- > 0;) {
    out.ends[j] = i;
    if (j > 0) i = from[j][i] - 1;
  }
  return out;
}

virtual_worker_plan build_vw(const std::vector<plan_device>& devs, const std::vector<std::size_t>& ends,
                             const profile_db& db, int nm, bool overlap, bool shard_here, int optimizer_states) {
  virtual_worker_plan vw;
  std::size_t first = 0;
  double transfers = 0;
  for (std::size_t j = 0; j < devs.size(); ++j) {
    auto e = eval_stage(devs, j, first, ends[j], db, nm, overlap, shard_here, optimizer_states);
    stage_plan s;
    s.device = devs[j];
    s.first_unit = first;
    s.last_unit = ends[j];
    s.kept_minibatches = int(std::min<std::size_t>(std::size_t(nm), devs.size() - j));
    s.memory_bytes = e.memory;
    s.compute_ms = e.compute;
    s.send_ms = e.send;
    s.receive_ms = e.receive;
    s.stage_ms = e.stage_ms;
    for (std::size_t u = first; u <= ends[j]; ++u) {
      const auto& c = db.units[u].devices.find(devs[j].kind)->second;
      s.fwd_ms += c.fwd_ms * devs[j].compute_factor;
      s.bwd_ms += c.bwd_ms * devs[j].compute_factor;
    }
    s.bwd_ms += db.update_ms(devs[j].kind, first, ends[j]) * devs[j].compute_factor;  // the local update follows backward
    s.bwd_ms += wave_ms(devs, j, first, ends[j], db, nm, overlap);  // (the slot's copy is at its forward: same sum)
    s.bwd_ms += sync_share_ms(devs, j, first, ends[j], db, nm, shard_here);  // (once a wave: spread over its minibatches)
    if (j + 1 < devs.size()) transfers += hop_ms(devs[j], devs[j + 1], db.units[ends[j]].output_bytes, db);
    vw.latency_ms += e.compute;
    vw.stages.push_back(std::move(s));
    first = ends[j] + 1;
  }
  vw.latency_ms += 2 * transfers;
  double max_stage = 0;
  std::size_t arg = 0;
  for (std::size_t j = 0; j < vw.stages.size(); ++j)
    if (vw.stages[j].stage_ms > max_stage) {
      max_stage = vw.stages[j].stage_ms;
      arg = j;
    }
  vw.period_ms = std::max(max_stage, vw.latency_ms / nm);
  char buf[200];
  if (max_stage >= vw.latency_ms / nm) {
    const auto& s = vw.stages[arg];
    char moved[64];  // a cpu stage's receives too
    std::snprintf(moved, sizeof moved, s.receive_ms > 0 ? "%.2f send + %.2f receive" : "%.2f transfer", s.send_ms,
                  s.receive_ms);
    std::snprintf(buf, sizeof buf, "stage %zu on %s: %.2f ms (%.2f compute + %s)", arg, device_label(s.device).c_str(),
                  max_stage, s.compute_ms, moved);
  } else
    std::snprintf(buf, sizeof buf, "too few minibatches in flight: latency %.2f ms / Nm %d > slowest stage %.2f ms",
                  vw.latency_ms, nm, max_stage);
  vw.bottleneck = buf;
  return vw;
}

}  // namespace

const char* to_string(allocation_policy p) noexcept {
  switch (p) {
    case allocation_policy::np: return "np";
    case allocation_policy::ed: return "ed";
    case allocation_policy::hd: return "hd";
  }
  return "?";
}

expected<allocation_policy> parse_allocation_policy(std::string_view s) {
  if (s == "np") return allocation_policy::np;
  if (s == "ed") return allocation_policy::ed;
  if (s == "hd") return allocation_policy::hd;
  return make_error(errc::invalid_argument, "allocation policy '" + std::string(s) + "': expected np, ed or hd");
}

std::string measured_kind_name(const device_spec& d, int threads) {
  if (d.kind == device_kind::cuda) return "cuda" + std::to_string(d.index);
  return threads > 0 ? "cpu-t" + std::to_string(threads) : std::string();
}

std::string device_profile_kind(const device_spec& d, const profile_db& db) {
  if (!d.profile.empty()) return d.profile;
  const std::string m = measured_kind_name(d, d.threads);
  return !m.empty() && db.has_kind(m) ? m : std::string();
}

std::string apply_device_speeds(cluster& c, profile_db& db) {
  std::string note;
  for (auto& n : c.nodes)
    for (auto& d : n.devices) {
      if (d.speed == 1.0 || !(d.speed > 0)) continue;
      const std::string kind = device_profile_kind(d, db);
      if (kind.empty() || !db.has_kind(kind)) continue;
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s@x%g", kind.c_str(), d.speed);
      db.add_scaled_kind(kind, buf, 1.0 / d.speed);
      d.profile = buf;
      std::snprintf(buf, sizeof buf, "%s%s %s %d x %g", note.empty() ? "" : ", ", n.name.c_str(),
                    to_string(d.kind), d.index, d.speed);
      note += buf;
      d.speed = 1.0;
    }
  return note;
}

expected<std::vector<plan_device>> plan_devices(const cluster& c, const profile_db& db) {
  std::vector<plan_device> out;
  for (std::size_t n = 0; n < c.nodes.size(); ++n) {
    const auto& node = c.nodes[n];
    for (std::size_t d = 0; d < node.devices.size(); ++d) {
      const auto& dev = node.devices[d];
      const std::string where = "node '" + node.name + "' device " + std::to_string(d) + " (" +
                                to_string(dev.kind) + ":" + std::to_string(dev.index) + ")";
      const std::string kind = device_profile_kind(dev, db);
      if (kind.empty()) {
        const std::string measured = measured_kind_name(dev, dev.threads);
        return make_error(errc::invalid_argument,
                          where + " has no profile kind: set its `profile` to one of the kinds in " + db.source +
                              (measured.empty() ? std::string()
                                                : " (without one it would be '" + measured + "', not in the file)"));
      }
      if (!db.has_kind(kind)) {
        std::string kinds;
        for (const auto& [k, v] : db.units.front().devices) kinds += (kinds.empty() ? "" : ", ") + k;
        return make_error(errc::not_found, where + ": profile kind '" + kind + "' is not in " + db.source +
                                               " (it has: " + kinds + ")");
      }
      plan_device p;
      p.node = node.name;
      p.host = node.host;
      p.node_index = int(n);
      p.device = d;
      p.kind = kind;
      p.memory_bytes = dev.memory_bytes;
      p.cuda = dev.kind == device_kind::cuda;
      if (p.memory_bytes == 0) {
        auto it = db.devices.find(kind);
        if (it != db.devices.end()) p.memory_bytes = it->second.memory_bytes;
      }
      out.push_back(std::move(p));
    }
  }
  if (out.empty()) return make_error(errc::invalid_argument, "the topology lists no devices");
  if (db.links.host_stage_factor > 0) {
    std::map<std::string, int> cpus_on;
    for (const auto& p : out)
      if (!p.cuda) ++cpus_on[p.host];
    for (auto& p : out)
      if (!p.cuda && cpus_on[p.host] >= 2) p.compute_factor = db.links.host_stage_factor;
  }
  return out;
}

expected<std::vector<std::vector<plan_device>>> allocate_virtual_workers(const std::vector<plan_device>& devices,
                                                                        const profile_db& db,
                                                                        const hetpipe_options& o) {
  std::vector<std::vector<plan_device>> vws;
  if (devices.empty()) return make_error(errc::invalid_argument, "no devices to allocate");
  std::map<int, std::vector<plan_device>> by_node;
  for (const auto& d : devices) by_node[d.node_index].push_back(d);
  std::map<std::string, std::vector<plan_device>> by_kind;
  for (const auto& d : devices) by_kind[d.kind].push_back(d);

  int k = o.virtual_workers;
  switch (o.policy) {
    case allocation_policy::np:
      if (k != 0 && k != int(by_node.size()))
        return make_error(errc::invalid_argument,
                          "allocation \"np\" makes one virtual worker per node (" + std::to_string(by_node.size()) +
                              "); virtual_workers = " + std::to_string(k) + " contradicts it (leave it 0)");
      for (auto& [n, v] : by_node) vws.push_back(v);
      return vws;
    case allocation_policy::ed: {
      if (k == 0) {
        k = int(devices.size());
        for (auto& [kind, v] : by_kind) k = std::min(k, int(v.size()));
      }
      break;
    }
    case allocation_policy::hd:
      if (k == 0) k = int(by_node.size());
      break;
  }
  if (k <= 0 || k > int(devices.size()))
    return make_error(errc::invalid_argument, "virtual_workers = " + std::to_string(k) + " but there are " +
                                                  std::to_string(devices.size()) + " devices");
  vws.assign(std::size_t(k), {});
  if (o.policy == allocation_policy::ed) {
    // Kinds fastest first, so that each VW's devices are listed in a stable order.
    std::size_t next = 0;
    std::vector<std::pair<double, std::string>> kinds;
    for (auto& [kind, v] : by_kind) kinds.push_back({-kind_speed(db, kind), kind});
    std::sort(kinds.begin(), kinds.end());
    for (auto& [s, kind] : kinds)
      for (const auto& d : by_kind[kind]) vws[next++ % std::size_t(k)].push_back(d);
    return vws;
  }
  // HD: fastest first; each VW takes from both ends.
  std::vector<plan_device> sorted = devices;
  std::stable_sort(sorted.begin(), sorted.end(), [&](const plan_device& a, const plan_device& b) {
    return kind_speed(db, a.kind) > kind_speed(db, b.kind);
  });
  const std::size_t per = sorted.size() / std::size_t(k), extra = sorted.size() % std::size_t(k);
  std::size_t lo = 0, hi = sorted.size();
  for (std::size_t v = 0; v < std::size_t(k); ++v) {
    const std::size_t size = per + (v < extra ? 1 : 0);
    const std::size_t fast = (size + 1) / 2, slow = size - fast;
    for (std::size_t i = 0; i < fast; ++i) vws[v].push_back(sorted[lo++]);
    std::vector<plan_device> tail;
    for (std::size_t i = 0; i < slow; ++i) tail.push_back(sorted[--hi]);
    std::reverse(tail.begin(), tail.end());
    for (auto& d : tail) vws[v].push_back(d);
  }
  return vws;
}

expected<virtual_worker_plan> partition_virtual_worker(const std::vector<plan_device>& devices,
                                                       const profile_db& db, int nm, bool overlap_waves,
                                                       bool shards_local, int optimizer_states) {
  if (devices.empty()) return make_error(errc::invalid_argument, "a virtual worker needs at least one device");
  if (devices.size() > db.units.size())
    return make_error(errc::invalid_argument, "a virtual worker of " + std::to_string(devices.size()) +
                                                  " devices needs at least as many units; the model has " +
                                                  std::to_string(db.units.size()));
  if (nm < 1) return make_error(errc::invalid_argument, "Nm must be >= 1");
  // Permute classes (node, kind): devices of one class are interchangeable.
  std::map<std::pair<int, std::string>, std::vector<plan_device>> pool;
  for (const auto& d : devices) pool[{d.node_index, d.kind}].push_back(d);
  std::vector<std::pair<int, std::string>> order;
  for (const auto& d : devices) order.push_back({d.node_index, d.kind});
  std::sort(order.begin(), order.end());
  order_result best;
  std::vector<plan_device> best_devs;
  std::size_t tried = 0;
  do {
    std::map<std::pair<int, std::string>, std::size_t> used;
    std::vector<plan_device> devs;
    for (const auto& c : order) devs.push_back(pool[c][used[c]++]);
    auto r = best_boundaries(devs, db, nm, overlap_waves, shards_local, optimizer_states);
    if (std::tie(r.max_stage, r.sum) < std::tie(best.max_stage, best.sum)) {
      best = std::move(r);
      best_devs = std::move(devs);
    }
    // TODO(perf): beyond ~8 distinct classes the orders explode; a greedy
    // order (fastest device on the heaviest part) would do there.
  } while (++tried < 40320 && std::next_permutation(order.begin(), order.end()));
  if (best.ends.empty()) {
    uint64_t total = db.params_bytes(0, db.units.size() - 1) * weight_copies(false, overlap_waves, 1, optimizer_states) +
                     db.activation_bytes(0, db.units.size() - 1);
    uint64_t mem = 0;
    bool unlimited = false;
    for (const auto& d : devices) {
      mem += d.memory_bytes;
      unlimited |= d.memory_bytes == 0;
    }
    return make_error(errc::out_of_memory,
                      "no stage order of " + std::to_string(devices.size()) + " devices fits the model with Nm = " +
                          std::to_string(nm) + " (the model needs about " + format_gib(total) +
                          " with one minibatch in flight; the devices have " +
                          (unlimited ? std::string("some unlimited") : format_gib(mem)) + ")");
  }
  return build_vw(best_devs, best.ends, db, nm, overlap_waves, shards_local, optimizer_states);
}

std::vector<int> place_ps_shards(const std::vector<virtual_worker_plan>& vws, const profile_db& db,
                                 std::size_t node_count, bool local) {
  const std::size_t n = db.units.size();
  std::vector<int> where(n, 0);
  std::vector<uint64_t> bytes(std::max<std::size_t>(1, node_count), 0);
  auto least = [&](const std::vector<int>& candidates) {
    int b = candidates.front();
    for (int c : candidates)
      if (bytes[std::size_t(c)] < bytes[std::size_t(b)]) b = c;
    return b;
  };
  std::vector<int> all(bytes.size());
  std::iota(all.begin(), all.end(), 0);
  std::vector<std::size_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](std::size_t a, std::size_t b) { return db.units[a].params_bytes > db.units[b].params_bytes; });
  for (std::size_t u : idx) {
    std::vector<int> cand = all;
    if (local) {
      std::vector<int> count(bytes.size(), 0);
      for (const auto& vw : vws)
        for (const auto& s : vw.stages)
          if (u >= s.first_unit && u <= s.last_unit) ++count[std::size_t(s.device.node_index)];
      const int top = *std::max_element(count.begin(), count.end());
      cand.clear();
      for (std::size_t x = 0; x < count.size(); ++x)
        if (count[x] == top) cand.push_back(int(x));
    }
    where[u] = least(cand);
    bytes[std::size_t(where[u])] += db.units[u].params_bytes;
  }
  return where;
}

double wave_sync_ms(const std::vector<virtual_worker_plan>& vws, const std::vector<int>& unit_ps_node,
                    const profile_db& db, std::size_t node_count) {
  std::vector<double> out(node_count, 0), in(node_count, 0);
  std::map<std::pair<int, std::size_t>, double> local;  // device -> bytes to/from its host
  for (const auto& vw : vws)
    for (const auto& s : vw.stages)
      for (std::size_t u = s.first_unit; u <= s.last_unit; ++u) {
        const double b = double(db.units[u].params_bytes);
        const int a = s.device.node_index, ps = unit_ps_node[u];
        if (a == ps) {
          local[{a, s.device.device}] += 2 * b;  // push + pull over the device's bus
        } else {
          out[std::size_t(a)] += b;  // push
          in[std::size_t(ps)] += b;
          out[std::size_t(ps)] += b;  // pull
          in[std::size_t(a)] += b;
        }
      }
  double worst = 0;
  const double inter = db.links.inter_node_gbps * 1e9 / 8 / 1e3;  // bytes per ms
  const double intra = db.links.intra_node_gbps * 1e9 / 8 / 1e3;
  for (std::size_t x = 0; x < node_count; ++x) worst = std::max(worst, std::max(out[x], in[x]) / inter);
  double dev = 0;
  for (const auto& [k, b] : local) dev = std::max(dev, b / intra);
  return worst + dev + (worst + dev > 0 ? 2 * db.links.latency_us / 1e3 : 0.0);
}

void finish_prediction(hetpipe_plan& plan) {
  double slowest_wave = 0;
  std::size_t slowest = 0;
  std::vector<double> work(plan.virtual_workers.size(), 0.0);  // a wave's time without its sync
  for (std::size_t v = 0; v < plan.virtual_workers.size(); ++v) {
    auto& vw = plan.virtual_workers[v];
    vw.sync_ms = plan.sync_ms;
    if (plan.drained_waves) {
      double max_stage = 0;
      for (const auto& s : vw.stages) max_stage = std::max(max_stage, s.stage_ms);
      work[v] = vw.latency_ms + (plan.nm - 1) * max_stage;
      vw.wave_ms = work[v] + plan.sync_ms;
    } else {
      work[v] = plan.nm * vw.period_ms;
      vw.wave_ms = work[v] + std::max(0.0, plan.sync_ms - (plan.staleness + 1) * work[v]);
    }
    vw.samples_per_s = vw.wave_ms > 0 ? double(plan.nm * plan.batch) * 1e3 / vw.wave_ms : 0.0;
    if (vw.wave_ms > slowest_wave) {
      slowest_wave = vw.wave_ms;
      slowest = v;
    }
  }
  plan.predicted_samples_per_s =
      slowest_wave > 0 ? double(plan.virtual_workers.size()) * plan.nm * double(plan.batch) * 1e3 / slowest_wave : 0;
  if (plan.virtual_workers.empty()) return;
  const auto& vw = plan.virtual_workers[slowest];
  if (slowest_wave - work[slowest] > 0.5 * slowest_wave)
    plan.bottleneck = "parameter-server sync: " + std::to_string(plan.sync_ms) + " ms per wave";
  else
    plan.bottleneck = "virtual worker " + std::to_string(slowest) + ": " + vw.bottleneck;
}

expected<hetpipe_plan> plan_hetpipe(const std::vector<plan_device>& devices, const std::vector<std::string>& node_names,
                                    const profile_db& db_in, const hetpipe_options& o) {
  if (db_in.units.empty()) return make_error(errc::invalid_argument, "the profile has no units");
  const profile_db db = db_in.at_batch(o.batch > 0 ? o.batch : db_in.batch);
  HF_ASSIGN_OR_RETURN(auto groups, allocate_virtual_workers(devices, db, o));
  std::vector<int> nms;
  if (o.nm > 0)
    nms.push_back(o.nm);
  else
    for (int n = 1; n <= std::max(1, o.max_nm); ++n) nms.push_back(n);
  std::optional<hetpipe_plan> best;
  double best_score = 0;
  status last_error;
  std::string nm_note;
  for (int nm : nms) {
    hetpipe_plan p;
    p.policy = o.policy;
    p.ps_local = o.ps_auto ? groups.size() == 1 : o.ps_local;
    p.nm = nm;
    p.staleness = o.staleness;
    p.drained_waves = !o.overlap_waves;
    p.batch = db.batch;
    p.nodes = node_names;
    bool ok = true;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      auto vw = partition_virtual_worker(groups[g], db, nm, o.overlap_waves, p.ps_local, o.optimizer_states);
      if (!vw) {
        last_error = vw.error().with_context("virtual worker " + std::to_string(g));
        ok = false;
        break;
      }
      p.virtual_workers.push_back(std::move(*vw));
    }
    if (!ok) break;  // memory only grows with Nm
    p.unit_ps_node = place_ps_shards(p.virtual_workers, db, node_names.size(), p.ps_local);
    p.ps_bytes.assign(node_names.size(), 0);
    for (std::size_t u = 0; u < db.units.size(); ++u) p.ps_bytes[std::size_t(p.unit_ps_node[u])] += db.units[u].params_bytes;
    p.sync_ms = wave_sync_ms(p.virtual_workers, p.unit_ps_node, db, node_names.size());
    finish_prediction(p);
    double score = p.predicted_samples_per_s;
    if (o.nm == 0 && o.nm_by_simulation) {
      simulation_options so;
      so.waves = std::max(8, 64 / nm);
      so.warmup_waves = 2;
      so.drain_waves = !o.overlap_waves;  // as the stage times were priced
      auto r = simulate_hetpipe(p, db, so);
      if (r) score = r->samples_per_s;
    }
    // Prefer the smaller Nm unless a larger one is more than 1% faster (less staleness, less memory).
    if (!best || score > best_score * 1.01) {
      best = std::move(p);
      best_score = score;
    }
  }
  if (!best) return last_error;
  if (o.ps_auto)
    best->notes.push_back(best->ps_local ? "PS local (ps_placement = \"auto\"): one virtual worker, each stage's "
                                           "weights on its own node"
                                         : "PS spread (ps_placement = \"auto\"): " +
                                               std::to_string(best->virtual_workers.size()) +
                                               " virtual workers, shards spread over the nodes by bytes");
  if (o.nm > 0)
    best->notes.push_back("Nm = " + std::to_string(o.nm) + " (set in the topology)");
  else {
    std::string why = "Nm = " + std::to_string(best->nm) + ": the best " +
                      (o.nm_by_simulation ? "simulated" : "predicted") + " throughput of Nm = 1.." +
                      std::to_string(nms.size()) + " (the smallest within 1% of the best)";
    if (!last_error.ok()) why += "; larger Nm does not fit: " + last_error.message();
    best->notes.push_back(why);
  }
  if (best->drained_waves)
    best->notes.push_back("waves drained (hetpipe_waves = \"drain\"): each wave fills and empties the pipeline and "
                          "waits for its push and pull: wave = minibatch latency + (Nm - 1) x the slowest stage + "
                          "PS sync");
  for (std::size_t v = 0; v < best->virtual_workers.size(); ++v)
    for (const auto& s : best->virtual_workers[v].stages)
      if (s.device.memory_bytes == 0)
        best->notes.push_back("virtual worker " + std::to_string(v) + ": " + device_label(s.device) +
                              " has no memory limit (set the device's memory or devices." + s.device.kind +
                              ".memory_bytes in the profile)");
  return *best;
}

expected<hetpipe_options> hetpipe_options_of(const cluster& c) {
  const auto& p = c.job.params;
  hetpipe_options o;
  HF_ASSIGN_OR_RETURN(o.policy, parse_allocation_policy(p.get_string("allocation", "ed")));
  o.virtual_workers = int(p.get_int("virtual_workers", 0));
  o.nm = int(p.get_int("nm", 0));
  o.max_nm = int(p.get_int("max_nm", 16));
  o.staleness = int(p.get_int("staleness", 0));
  const std::string placement = p.get_string("ps_placement", "auto");
  o.ps_auto = placement == "auto";
  o.ps_local = placement == "local";
  o.batch = p.get_int("batch_size", 0);
  o.overlap_waves = !runtime_drains_waves(c);
  // As the stages' optimizer (kernels::optimizer_config): sgd keeps a
  // velocity per weight unless momentum is 0, adam two moments.
  if (p.get_string("optimizer", "sgd") == "adam")
    o.optimizer_states = 2;
  else
    o.optimizer_states = p.get_number("momentum", 0.9) != 0.0 ? 1 : 0;
  return o;
}

bool runtime_drains_waves(const cluster& c, std::string* why) {
  if (c.job.params.get_string("hetpipe_waves", "overlap") != "drain") return false;
  if (why) *why = "hetpipe_waves = \"drain\"";
  return true;
}

}  // namespace hetflow::topology
