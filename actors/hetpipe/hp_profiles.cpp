// HetPipe's profiles measured on every host of the cluster (hp_profiles.hpp).
#include "actors/hetpipe/hp_profiles.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "actors/builtin/job_profiles.hpp"
#include "actors/link_probe.hpp"
#include "actors/log.hpp"

namespace hetflow::actors::hp_job {
namespace {

// Under the wire's text limit (schemas/tensor_codec.hpp read_limits:
// 64 KiB), with room for the message's names.
constexpr std::size_t answer_max_bytes = 60 * 1024;

bool drill_remote() {
  const char* d = std::getenv("HETFLOW_DRILL_REMOTE_PROFILE");
  return d != nullptr && std::string(d) == "1";
}

// Nodes a and b measure on one machine.
bool same_machine(const topology::cluster& c, std::size_t a, std::size_t b) {
  return drill_remote() ? a == b : c.nodes[a].host == c.nodes[b].host;
}

// c with the devices of the nodes not on node `at`'s machine removed.
topology::cluster only_machine_of(const topology::cluster& c, std::size_t at) {
  topology::cluster m = c;
  for (std::size_t n = 0; n < m.nodes.size(); ++n)
    if (!same_machine(c, n, at)) m.nodes[n].devices.clear();
  return m;
}

// The first node of every machine but the head's (node 0's).
std::vector<std::size_t> one_node_per_other_machine(const topology::cluster& c) {
  std::vector<std::size_t> v;
  for (std::size_t n = 1; n < c.nodes.size(); ++n) {
    if (same_machine(c, n, 0)) continue;
    bool seen = false;
    for (std::size_t a : v) seen = seen || same_machine(c, n, a);
    if (!seen) v.push_back(n);
  }
  return v;
}

// One link's probe (link_probe.hpp): round trips to node `node`'s hp_ps,
// which answers while it waits for its role (await_role's kind_link).
expected<link_probe::result> probe_link(inbox& ib, const topology::cluster& c, std::size_t node, uint64_t bytes,
                                        int64_t& seq) {
  using clock = std::chrono::steady_clock;
  const std::string target = ps_name(int(node));
  const std::string what = "node '" + c.nodes[node].name + "' " + ib.who(target);
  link_probe::result r;
  r.bytes = bytes;
  kernels::tensor big = kernels::tensor::empty({int64_t(bytes / sizeof(float))});
  for (float& v : big.f32_span()) v = 0.f;
  kernels::tensor small = kernels::tensor::empty({1});
  small.f32_span()[0] = 0.f;
  auto rounds = [&](const kernels::tensor& t, int timed) -> expected<double> {
    std::vector<double> ms;
    const kernels::tensor_view v = t.view();
    for (int i = 0; i < link_probe::warmup_rounds + timed; ++i) {
      ralp::ralp_info info;
      info.aux = ++seq;
      const auto t0 = clock::now();
      HF_RETURN_IF_ERROR(ib.send(target, kind_link, info, std::span<const kernels::tensor_view>(&v, 1)));
      HF_ASSIGN_OR_RETURN(auto m, ib.next([&](const ralp::ralp_message& x) {
                            return x.kind == kind_link && x.sender == target && x.info.aux == info.aux;
                          }, link_probe::answer_timeout_s, what, "the link probe's answer"));
      if (i >= link_probe::warmup_rounds) ms.push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count());
    }
    return link_probe::median(std::move(ms));
  };
  HF_ASSIGN_OR_RETURN(r.small_ms, rounds(small, link_probe::small_timed));
  HF_ASSIGN_OR_RETURN(r.big_ms, rounds(big, link_probe::big_timed));
  return r;
}

// The bandwidth between nodes (db.links.inter_node_gbps) as the stages'
// messages get it: measured profiles assume it; timed here from the head to
// one node of every other machine, or to another node of this one, the
// slowest kept. Where a stage's sends cost its node's CPU (one core, UCX
// over TCP loopback: 0.4-0.6 ms for an 803 KB activation, 2026-11-29) the
// plan prices that instead of 100 Gb/s. The latency is only reported:
// latency_us prices every hop, within a node too. A probe that fails
// (an answer later than link_probe::answer_timeout_s, a send refused) leaves the
// assumed link and says why; a dead node fails the job when its role is
// sent.
status measure_links(inbox& ib, topology::cluster& c, topology::profile_db& db) {
  // Whom to time: one node of every other machine, else another node of
  // this one (the nodes' hp_ps actors, waiting for their roles).
  std::vector<std::size_t> to = one_node_per_other_machine(c);
  if (to.empty() && c.nodes.size() > 1) to.push_back(1);
  if (to.empty()) return {};
  // The size a stage boundary carries: the largest unit output.
  uint64_t largest = 0;
  for (const auto& u : db.units) largest = std::max(largest, u.output_bytes);
  const uint64_t bytes = link_probe::probe_bytes(largest, ib.services().read_limits().max_message_bytes);
  double gbps = 0;
  int64_t seq = 0;
  std::string said;
  bool failed = false;
  for (std::size_t n : to) {
    if (!said.empty()) said += "; ";
    said += c.nodes[0].name + " -> " + c.nodes[n].name + (same_machine(c, n, 0) ? " (this machine)" : "") + ": ";
    auto lt = probe_link(ib, c, n, bytes, seq);
    if (!lt) {
      said += "not timed (" + lt.error().message() + ")";
      failed = true;
      break;
    }
    said += lt->describe();
    if (lt->gbps() <= 0) {
      said += ", not resolved";
      failed = true;
      break;
    }
    gbps = gbps == 0 ? lt->gbps() : std::min(gbps, lt->gbps());
  }
  if (failed || gbps <= 0) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "; the assumed %.2f Gb/s between nodes kept", db.links.inter_node_gbps);
    log_warn("hetpipe: links: " + said + buf);
    return {};
  }
  db.links.inter_node_gbps = gbps;
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.2f Gb/s", gbps);
  const std::string measured = std::string("; links between nodes measured: ") + buf;
  if (const auto at = db.source.find(topology::links_assumed_note); at != std::string::npos) {
    const auto end = db.source.find("; ", at + 2);
    db.source.replace(at, (end == std::string::npos ? db.source.size() : end) - at, measured);
  } else {
    db.source += measured;
  }
  log_info("hetpipe: links: " + said + "; between nodes: " + buf);
  return {};
}

}  // namespace

expected<std::string> measure_host_profiles(const topology::cluster& c, int node_index, int64_t batch) {
  if (node_index < 0 || std::size_t(node_index) >= c.nodes.size())
    return make_error(errc::internal, "profile request on an unknown node");
  topology::cluster m = only_machine_of(c, std::size_t(node_index));
  HF_ASSIGN_OR_RETURN(topology::profile_db db, measured_profiles(m, batch > 0 ? batch : 64));
  std::string text;
  for (const auto& n : m.nodes)
    for (std::size_t d = 0; d < n.devices.size(); ++d)
      text += n.name + " " + std::to_string(d) + " " + n.devices[d].profile + "\n";
  text += "\n" + topology::to_json(db, -1);
  if (text.size() > answer_max_bytes)
    return make_error(errc::unsupported, "the profiles of this host's " + std::to_string(db.devices.size()) +
                                             " device kinds take " + std::to_string(text.size()) +
                                             " bytes, more than one message's text holds (" +
                                             std::to_string(answer_max_bytes) +
                                             "): measure them with hetflow profile --out and name the file in "
                                             "[job] profile_file");
  return text;
}

expected<topology::profile_db> cluster_profiles(inbox& ib, topology::cluster& c, int64_t batch) {
  // One node per other machine answers for it (every node has a device:
  // the topology gives one that lists none).
  const std::vector<std::size_t> askers = one_node_per_other_machine(c);
  if (askers.empty()) {
    HF_ASSIGN_OR_RETURN(topology::profile_db db, measured_profiles(c, batch));
    HF_RETURN_IF_ERROR(measure_links(ib, c, db));
    return db;
  }

  // Ask first: the other machines measure while this one does. Every
  // answer within one deadline, 20 s before the stages and shards stop
  // waiting for their roles (await_role: ps_timeout + 310 s from their
  // start, which came before this).
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(
                                           c.job.params.get_number("ps_timeout", 30.0) + 290.0));
  ralp::ralp_info info;
  info.aux = batch;
  for (std::size_t a : askers) HF_RETURN_IF_ERROR(ib.send(ps_name(int(a)), kind_profile, info));
  topology::cluster here = only_machine_of(c, 0);
  HF_ASSIGN_OR_RETURN(topology::profile_db local, measured_profiles(here, batch));
  for (std::size_t n = 0; n < c.nodes.size(); ++n)
    if (same_machine(c, n, 0)) c.nodes[n].devices = here.nodes[n].devices;  // their kinds
  std::vector<topology::profile_db> all{std::move(local)};
  std::string from = "profiles measured on every machine: here (" + c.nodes[0].host + ")";
  for (std::size_t a : askers) {
    const double timeout = std::max(1.0, std::chrono::duration<double>(deadline - clock::now()).count());
    const std::string asked = ps_name(int(a));
    const auto& node = c.nodes[a];
    HF_ASSIGN_OR_RETURN(auto m, ib.next([&](const ralp::ralp_message& x) {
                          return x.kind == kind_profile && x.sender == asked;
                        }, timeout, "node '" + node.name + "' " + ib.who(asked), "profiles of host " + node.host));
    const std::string where = "the profiles of node '" + node.name + "' (host " + node.host + ")";
    const auto split = m.text.find("\n\n");
    if (split == std::string::npos) return make_error(errc::wire_corrupt, where + ": no device list");
    HF_ASSIGN_OR_RETURN(topology::profile_db db, topology::parse_profile_db(m.text.substr(split + 2), where));
    // Each machine's kinds apart: HOST-cpu-tN (the drill: NODE-cpu-tN).
    const std::string prefix = drill_remote() ? node.name : node.host;
    topology::prefix_kinds(db, prefix);
    std::istringstream lines(m.text.substr(0, split));
    std::string name, kind;
    std::size_t d = 0;
    while (lines >> name >> d >> kind) {
      std::size_t n = 0;
      while (n < c.nodes.size() && c.nodes[n].name != name) ++n;
      if (n == c.nodes.size() || d >= c.nodes[n].devices.size() || !same_machine(c, n, a))
        return make_error(errc::wire_corrupt, where + ": device " + name + ":" + std::to_string(d) +
                                                  " is not on that machine");
      c.nodes[n].devices[d].profile = prefix + "-" + kind;
    }
    from += ", by node '" + node.name + "' (" + node.host + ")";
    all.push_back(std::move(db));
  }
  HF_ASSIGN_OR_RETURN(topology::profile_db merged, topology::merge_profile_dbs(all));
  for (const auto& n : c.nodes)
    for (std::size_t d = 0; d < n.devices.size(); ++d)
      if (n.devices[d].profile.empty())
        return make_error(errc::internal, "no profile came for node '" + n.name + "' device " + std::to_string(d));
  if (!drill_remote()) merged.links.inter_node_gbps = topology::link_profile{}.inter_node_gbps;  // an assumed network
  {
    char gb[32];
    std::snprintf(gb, sizeof gb, "%g Gb/s", merged.links.inter_node_gbps);
    merged.source = from + topology::links_assumed_note + gb;
  }
  log_info("hetpipe: " + from);
  HF_RETURN_IF_ERROR(measure_links(ib, c, merged));
  return merged;
}

}  // namespace hetflow::actors::hp_job
