#include "topology/simulator.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <queue>
#include <random>
#include <set>
#include <string>

namespace hetflow::topology {
namespace {

enum class ev_kind { compute_done, arrive, push_done, pull_done, wake, sent };

struct event {
  double t = 0;
  uint64_t seq = 0;
  ev_kind kind = ev_kind::wake;
  int v = 0, j = 0;
  int64_t p = 0;  // minibatch, or wave for push/pull
  bool bwd = false;
  bool operator>(const event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

struct device_state {
  bool busy = false;
  double busy_until = 0;       // its task's end (a cpu stage: or its send's)
  double debt = 0;             // ms its next task runs longer: receives while it computed
  int kept = 0;                // minibatches forwarded here whose backward has not run yet
  std::set<int64_t> fwd, bwd;  // ready minibatches
  double busy_ms = 0;
};

struct vw_state {
  std::vector<device_state> stages;
  int64_t next_mb = 0, finished = 0;
  int in_flight = 0;
  int pushed = 0;                       // clock: waves pushed by every stage
  std::map<int64_t, int> push_parts;    // wave -> stages not yet pushed
  int pulled = 0;                       // the latest wave whose pull is done (wave 0 needs none)
  int pull_issued = 0;
  std::set<int64_t> done;               // finished minibatches (stage 0 backward)
  std::vector<double> finish_times;
  double blocked_since = -1;
  double wsp_wait = 0;
  int pushes = 0;
};

class sim {
public:
  sim(const hetpipe_plan& plan, const profile_db& db, const simulation_options& o)
      : plan_(plan), db_(db.at_batch(plan.batch)), o_(o), rng_(o.seed) {}

  simulation_result run() {
    vws_.resize(plan_.virtual_workers.size());
    for (std::size_t v = 0; v < vws_.size(); ++v) vws_[v].stages.resize(plan_.virtual_workers[v].stages.size());
    total_mb_ = int64_t(o_.waves) * plan_.nm;
    for (std::size_t v = 0; v < vws_.size(); ++v) try_start(int(v));
    while (!q_.empty()) {
      event e = q_.top();
      q_.pop();
      now_ = e.t;
      handle(e);
    }
    return finish();
  }

private:
  const hetpipe_plan& plan_;
  profile_db db_;
  simulation_options o_;
  std::mt19937_64 rng_;
  std::vector<vw_state> vws_;
  std::priority_queue<event, std::vector<event>, std::greater<>> q_;
  std::map<std::string, double> port_free_;
  double now_ = 0;
  uint64_t seq_ = 0;
  int64_t total_mb_ = 0;
  simulation_result r_;
  // Busy intervals per (v, j), to measure utilisation in the window afterwards.
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> busy_;

  void post(event e) {
    e.seq = seq_++;
    q_.push(e);
  }

  int S_of(int v) const { return int(plan_.virtual_workers[std::size_t(v)].stages.size()); }
  const stage_plan& stage(int v, int j) const { return plan_.virtual_workers[std::size_t(v)].stages[std::size_t(j)]; }

  static std::string dev_port(const plan_device& d, const char* dir) {
    return std::string(dir) + ":" + std::to_string(d.node_index) + ":" + std::to_string(d.device);
  }
  static std::string nic_port(int node, const char* dir) { return std::string(dir) + ":nic" + std::to_string(node); }

  // Reserves the two ports; returns when the bytes have arrived (and in
  // `started`, when given, when they began to move).
  double transfer(const std::string& a, const std::string& b, uint64_t bytes, double gbps,
                  double* started = nullptr) {
    double start = std::max({now_, port_free_[a], port_free_[b]});
    double end = start + transfer_ms(bytes, gbps, db_.links.latency_us);
    port_free_[a] = end;
    port_free_[b] = end;
    if (started) *started = start;
    return end;
  }

  double hop(const plan_device& from, const plan_device& to, uint64_t bytes, double* started) {
    *started = now_;
    if (from.node_index == to.node_index && from.device == to.device) return now_;
    if (from.node_index == to.node_index)
      return transfer(dev_port(from, "out"), dev_port(to, "in"), bytes, db_.links.intra_node_gbps, started);
    return transfer(nic_port(from.node_index, "out"), nic_port(to.node_index, "in"), bytes, db_.links.inter_node_gbps,
                    started);
  }

  // Stage j of VW v sends `bytes` to stage `to` (activations or
  // gradients); returns their arrival. A cpu stage's cores move them (the
  // runtime's send waits until they leave; the data plane's thread
  // receives on the receiver's cores), as the planner prices them
  // (hetpipe_plan.hpp): a cpu sender's device stays busy until the bytes
  // have left, and a cpu receiver computing meanwhile runs its next task
  // longer by the part of the transfer it spent computing. The transfer
  // itself is timed on the ports as before: no latency is added.
  double send(int v, int j, int to, uint64_t bytes) {
    const auto& from_s = stage(v, j);
    const auto& to_s = stage(v, to);
    double start = now_;
    const double end = hop(from_s.device, to_s.device, bytes, &start);
    if (end <= now_) return end;  // same device
    auto& src = vws_[std::size_t(v)].stages[std::size_t(j)];
    if (!from_s.device.cuda) {
      src.busy = true;
      src.busy_until = end;
      busy_[{v, j}].push_back({now_, end});
      post(event{end, 0, ev_kind::sent, v, j, 0, false});
    }
    auto& dst = vws_[std::size_t(v)].stages[std::size_t(to)];
    if (!to_s.device.cuda && dst.busy) dst.debt += std::max(0.0, std::min(end, dst.busy_until) - start);
    return end;
  }

  // Bytes a stage exchanges with each PS node per wave.
  std::map<int, uint64_t> shard_bytes(const stage_plan& s) const {
    std::map<int, uint64_t> m;
    for (std::size_t u = s.first_unit; u <= s.last_unit; ++u)
      m[plan_.unit_ps_node.empty() ? s.device.node_index : plan_.unit_ps_node[u]] += db_.units[u].params_bytes;
    return m;
  }

  // PS traffic has its own ports: it shares a NIC with the pipeline's
  // activations in reality, but a bulk push queued in front of a stage's
  // activations (first come, first served) would stall the pipeline far more
  // than a link that shares its bandwidth does. PS transfers queue among
  // themselves.
  double ps_transfer(const stage_plan& s, int ps_node, uint64_t bytes, bool push) {
    if (bytes == 0) return now_;
    if (ps_node == s.device.node_index)
      return push ? transfer(dev_port(s.device, "ps-out"), "ps-in:host" + std::to_string(ps_node), bytes,
                             db_.links.intra_node_gbps)
                  : transfer("ps-out:host" + std::to_string(ps_node), dev_port(s.device, "ps-in"), bytes,
                             db_.links.intra_node_gbps);
    return push ? transfer(nic_port(s.device.node_index, "ps-out"), nic_port(ps_node, "ps-in"), bytes,
                           db_.links.inter_node_gbps)
                : transfer(nic_port(ps_node, "ps-out"), nic_port(s.device.node_index, "ps-in"), bytes,
                           db_.links.inter_node_gbps);
  }

  int min_clock() const {
    int m = vws_.empty() ? 0 : vws_.front().pushed;
    for (const auto& v : vws_) m = std::min(m, v.pushed);
    return m;
  }

  void try_pull(int v) {
    auto& s = vws_[std::size_t(v)];
    const int w = s.pull_issued + 1;  // the wave this pull is for
    if (int64_t(w) * plan_.nm >= total_mb_) return;
    if (s.next_mb < int64_t(w - 1) * plan_.nm) return;  // wave w - 1 not begun
    if (o_.drain_waves) {
      if (s.pushed < w) return;                      // the runtime: its own wave w - 1 pushed first
      if (min_clock() < w - plan_.staleness) return;  // and every VW's waves 0 .. w - 1 - D
    } else if (min_clock() < w - 1 - plan_.staleness) {
      return;  // WSP: every VW pushed waves 0 .. w - 2 - D
    }
    s.pull_issued = w;
    const auto& vw = plan_.virtual_workers[std::size_t(v)];
    double last = now_;
    for (std::size_t j = 0; j < vw.stages.size(); ++j)
      for (auto [node, bytes] : shard_bytes(vw.stages[j]))
        last = std::max(last, ps_transfer(vw.stages[j], node, bytes, false));
    event e;
    e.t = last;
    e.kind = ev_kind::pull_done;
    e.v = v;
    e.p = w;
    post(e);
  }

  void try_start(int v) {
    auto& s = vws_[std::size_t(v)];
    while (s.next_mb < total_mb_ && s.in_flight < plan_.nm) {
      const int64_t p = s.next_mb;
      const int w = int(p / plan_.nm);
      if (p % plan_.nm == 0 && w >= 1 && s.pulled < w) {
        if (s.blocked_since < 0) s.blocked_since = now_;
        try_pull(v);
        return;
      }
      if (s.blocked_since >= 0) {
        s.wsp_wait += now_ - s.blocked_since;
        s.blocked_since = -1;
      }
      if (p % plan_.nm == 0) r_.max_wave_lead = std::max(r_.max_wave_lead, w - min_clock());
      if (p >= plan_.nm && s.done.count(p - plan_.nm) == 0) r_.weights_order_ok = false;
      ++s.next_mb;
      ++s.in_flight;
      r_.max_in_flight = std::max(r_.max_in_flight, s.in_flight);
      s.stages[0].fwd.insert(p);
      dispatch(v, 0);
      try_pull(v);
    }
  }

  void dispatch(int v, int j) {
    auto& d = vws_[std::size_t(v)].stages[std::size_t(j)];
    if (d.busy) return;
    bool bwd;
    int64_t p;
    if (!d.bwd.empty()) {
      bwd = true;
      p = *d.bwd.begin();
      d.bwd.erase(d.bwd.begin());
    } else if (!d.fwd.empty() && d.kept < std::min(plan_.nm, S_of(v) - j)) {
      // 1F1B admission: stage j keeps at most min(Nm, S - j) minibatches'
      // activations (the planner's memory model); more forwards wait for a
      // backward.
      bwd = false;
      p = *d.fwd.begin();
      d.fwd.erase(d.fwd.begin());
    } else {
      return;
    }
    const auto& st = stage(v, j);
    double ms = bwd ? st.bwd_ms : st.fwd_ms;
    if (o_.jitter > 0) ms *= 1.0 + o_.jitter * std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
    ms += d.debt;
    d.debt = 0;
    d.busy = true;
    d.busy_until = now_ + ms;
    if (!bwd) {
      ++d.kept;
      r_.max_kept_ratio = std::max(r_.max_kept_ratio, double(d.kept) / double(std::min(plan_.nm, S_of(v) - j)));
    }
    busy_[{v, j}].push_back({now_, now_ + ms});
    event e;
    e.t = now_ + ms;
    e.kind = ev_kind::compute_done;
    e.v = v;
    e.j = j;
    e.p = p;
    e.bwd = bwd;
    post(e);
  }

  void handle(const event& e) {
    auto& s = vws_[std::size_t(e.v)];
    const auto& vw = plan_.virtual_workers[std::size_t(e.v)];
    const int S = int(vw.stages.size());
    switch (e.kind) {
      case ev_kind::compute_done: {
        s.stages[std::size_t(e.j)].busy = false;
        if (e.bwd) --s.stages[std::size_t(e.j)].kept;
        if (!e.bwd) {
          if (e.j + 1 < S) {
            event a{send(e.v, e.j, e.j + 1, db_.units[vw.stages[std::size_t(e.j)].last_unit].output_bytes), 0,
                    ev_kind::arrive, e.v, e.j + 1, e.p, false};
            post(a);
          } else {
            s.stages[std::size_t(e.j)].bwd.insert(e.p);  // loss: backward starts here
          }
        } else {
          if (e.j > 0) {
            event a{send(e.v, e.j, e.j - 1, db_.units[vw.stages[std::size_t(e.j - 1)].last_unit].output_bytes), 0,
                    ev_kind::arrive, e.v, e.j - 1, e.p, true};
            post(a);
          }
          // The wave's last minibatch at this stage: push the aggregated update.
          if ((e.p + 1) % plan_.nm == 0) {
            const int64_t w = e.p / plan_.nm;
            double last = now_;
            for (auto [node, bytes] : shard_bytes(vw.stages[std::size_t(e.j)]))
              last = std::max(last, ps_transfer(vw.stages[std::size_t(e.j)], node, bytes, true));
            ++s.pushes;
            event pe{last, 0, ev_kind::push_done, e.v, e.j, w, false};
            post(pe);
          }
          if (e.j == 0) {
            s.done.insert(e.p);
            s.finish_times.push_back(now_);
            ++s.finished;
            --s.in_flight;
            try_start(e.v);
          }
        }
        dispatch(e.v, e.j);
        break;
      }
      case ev_kind::arrive:
        if (e.bwd)
          s.stages[std::size_t(e.j)].bwd.insert(e.p);
        else
          s.stages[std::size_t(e.j)].fwd.insert(e.p);
        dispatch(e.v, e.j);
        break;
      case ev_kind::push_done: {
        auto it = s.push_parts.try_emplace(e.p, S).first;
        if (--it->second == 0) {
          s.push_parts.erase(it);
          // Stages push in wave order, so wave e.p completes after e.p - 1.
          s.pushed = std::max(s.pushed, int(e.p) + 1);
          for (std::size_t v = 0; v < vws_.size(); ++v) {
            try_pull(int(v));
          }
        }
        break;
      }
      case ev_kind::pull_done:
        s.pulled = std::max(s.pulled, int(e.p));
        try_start(e.v);
        break;
      case ev_kind::sent:  // a cpu stage's send has left: its cores are free
        s.stages[std::size_t(e.j)].busy = false;
        dispatch(e.v, e.j);
        break;
      case ev_kind::wake: break;
    }
  }

  simulation_result finish() {
    simulation_result out = r_;
    out.end_ms = now_;
    const int64_t warm = int64_t(std::min(o_.warmup_waves, std::max(0, o_.waves - 1))) * plan_.nm;
    double t0 = 0, t1 = now_;
    for (const auto& s : vws_) {
      if (s.finish_times.empty()) continue;
      if (warm > 0) t0 = std::max(t0, s.finish_times[std::size_t(warm - 1)]);
      t1 = std::min(t1, s.finish_times.back());
    }
    if (t1 <= t0) {  // too short to have a window: whole run
      t0 = 0;
      t1 = now_;
    }
    out.window_ms = t1 - t0;
    double total = 0;
    for (std::size_t v = 0; v < vws_.size(); ++v) {
      const auto& s = vws_[v];
      simulated_virtual_worker sv;
      int64_t n = 0;
      for (double t : s.finish_times)
        if (t > t0 && t <= t1) ++n;
      sv.samples_per_s = out.window_ms > 0 ? double(n * plan_.batch) * 1e3 / out.window_ms : 0;
      total += sv.samples_per_s;
      sv.wsp_wait_ms = s.wsp_wait;
      sv.minibatches = s.finished;
      sv.pushes = s.pushes;
      for (std::size_t j = 0; j < s.stages.size(); ++j) {
        simulated_stage ss;
        for (auto [a, b] : busy_[{int(v), int(j)}]) ss.busy_ms += std::max(0.0, std::min(b, t1) - std::max(a, t0));
        ss.utilisation = out.window_ms > 0 ? ss.busy_ms / out.window_ms : 0;
        sv.stages.push_back(ss);
      }
      out.virtual_workers.push_back(std::move(sv));
    }
    out.samples_per_s = total;
    return out;
  }
};

}  // namespace

expected<simulation_result> simulate_hetpipe(const hetpipe_plan& plan, const profile_db& db,
                                             const simulation_options& options) {
  if (plan.nm < 1) return make_error(errc::invalid_argument, "simulate: Nm must be >= 1");
  if (plan.virtual_workers.empty()) return make_error(errc::invalid_argument, "simulate: the plan has no virtual workers");
  if (options.waves < 1) return make_error(errc::invalid_argument, "simulate: waves must be >= 1");
  for (const auto& vw : plan.virtual_workers)
    for (const auto& s : vw.stages)
      if (s.last_unit >= db.units.size())
        return make_error(errc::invalid_argument, "simulate: the plan names unit " + std::to_string(s.last_unit) +
                                                      " but the profile has " + std::to_string(db.units.size()));
  sim s(plan, db, options);
  return s.run();
}

}  // namespace hetflow::topology
