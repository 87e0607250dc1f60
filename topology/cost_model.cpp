#include "topology/cost_model.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

#include "topology/data_parallel.hpp"

namespace hetflow::topology {
namespace {

std::string gib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(b) / double(1ull << 30));
  return buf;
}

}  // namespace

uint64_t dp_replica_memory(const profile_db& db, int64_t rows) {
  const std::size_t n = db.units.size();
  if (n == 0) return 0;
  const double act = double(db.activation_bytes(0, n - 1)) * double(rows) / double(std::max<int64_t>(1, db.batch));
  return db.params_bytes(0, n - 1) * 3 + uint64_t(act);
}

expected<dp_estimate> estimate_dp(const std::vector<plan_device>& devices, const profile_db& db,
                                  int64_t global_batch, bool equal_split) {
  if (db.units.empty()) return make_error(errc::invalid_argument, "the profile has no units");
  const std::size_t n = db.units.size();
  std::vector<plan_device> in = devices;
  dp_estimate e;
  for (int round = 0; round < 64; ++round) {
    if (in.empty())
      return make_error(errc::out_of_memory, "no device holds the whole model (data parallelism needs at least " +
                                                 gib(dp_replica_memory(db, 1)) + " per replica)");
    const int64_t batch = global_batch > 0 ? global_batch : db.batch * int64_t(in.size());
    std::vector<double> speeds;
    for (const auto& d : in)
      speeds.push_back(equal_split ? 1.0 : double(db.batch) / std::max(1e-9, db.compute_ms(d.kind, 0, n - 1)));
    auto rows = split_rows(batch, speeds);
    std::vector<plan_device> keep;
    bool dropped = false;
    for (std::size_t i = 0; i < in.size(); ++i) {
      const uint64_t need = dp_replica_memory(db, rows[i]);
      if (in[i].memory_bytes != 0 && need > in[i].memory_bytes) {
        e.left_out.push_back(in[i].node + " dev" + std::to_string(in[i].device) + " (" + in[i].kind + "): needs " +
                             gib(need) + ", has " + gib(in[i].memory_bytes));
        dropped = true;
      } else {
        keep.push_back(in[i]);
      }
    }
    if (dropped) {
      in = std::move(keep);
      continue;
    }
    e.replicas = in;
    e.rows = rows;
    e.global_batch = batch;
    break;
  }
  double compute = 0;
  for (std::size_t i = 0; i < e.replicas.size(); ++i) {
    const double c = db.whole_step_ms(e.replicas[i].kind, e.rows[i]);
    if (c > compute) compute = c, e.device_step_factor = db.step_factor(e.replicas[i].kind);
  }
  e.compute_ms = compute;
  const std::size_t N = e.replicas.size();
  if (N > 1) {
    std::set<int> nodes;
    std::set<std::string> hosts;
    for (const auto& d : e.replicas) {
      nodes.insert(d.node_index);
      hosts.insert(d.host);
    }
    double gbps = nodes.size() > 1 ? db.links.inter_node_gbps : db.links.intra_node_gbps;
    double latency_us = db.links.latency_us;
    e.allreduce_model = nodes.size() > 1 ? "inter-node links" : "intra-node links";
    // As ring_member decides: every replica on one (named) host; the
    // measured ring of as many members, or one measured for any (0).
    if (hosts.size() == 1 && !hosts.begin()->empty() && db.links.host_ring_gbps > 0 &&
        (db.links.host_ring_members == 0 || db.links.host_ring_members == int(N))) {
      gbps = db.links.host_ring_gbps;
      latency_us = db.links.host_ring_latency_us;
      e.allreduce_model = "host ring (shared memory)";
      // The replicas share the host while they compute, and each sum waits
      // for the slowest of them.
      if (db.links.host_ring_step_factor >= 1) {
        e.step_factor = db.links.host_ring_step_factor;
        e.compute_ms *= e.step_factor;
      }
    }
    const double bytes = double(db.params_bytes(0, n - 1));
    const double per_ms = gbps * 1e9 / 8 / 1e3;
    e.allreduce_ms = 2.0 * double(N - 1) / double(N) * bytes / per_ms + 2.0 * double(N - 1) * latency_us / 1e3;
    // The host ring's probe times the collective from the members' hands;
    // a replica hands its gradients to its ring member and gets the sum
    // back by actor messages, one each way (the links' message latency):
    // inside mlp's dp runs the replica waited 0.043-0.045 ms longer for
    // each sum than its member took (2026-11-29, 2-core VM).
    if (e.allreduce_model == "host ring (shared memory)") {
      e.handover_ms = 2.0 * db.links.latency_us / 1e3;
      e.allreduce_ms += e.handover_ms;
    }
  }
  e.step_ms = e.compute_ms + e.allreduce_ms;
  e.samples_per_s = e.step_ms > 0 ? double(e.global_batch) * 1e3 / e.step_ms : 0.0;
  return e;
}

expected<dp_estimate> estimate_single(const plan_device& device, const profile_db& db, int64_t batch) {
  if (db.units.empty()) return make_error(errc::invalid_argument, "the profile has no units");
  if (batch <= 0) batch = db.batch;
  const uint64_t need = dp_replica_memory(db, batch);
  if (device.memory_bytes != 0 && need > device.memory_bytes)
    return make_error(errc::out_of_memory, device.node + " dev" + std::to_string(device.device) + " (" + device.kind +
                                               "): the model needs " + gib(need) + ", the device has " +
                                               gib(device.memory_bytes));
  dp_estimate e;
  e.replicas = {device};
  e.rows = {batch};
  e.global_batch = batch;
  e.device_step_factor = db.step_factor(device.kind);
  e.compute_ms = db.whole_step_ms(device.kind, batch);
  e.step_ms = e.compute_ms;
  e.samples_per_s = e.step_ms > 0 ? double(batch) * 1e3 / e.step_ms : 0.0;
  return e;
}

}  // namespace hetflow::topology
