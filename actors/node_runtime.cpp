#include "actors/node_runtime.hpp"

#include <netdb.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <caf/io/all.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "actors/buffer_pool.hpp"
#include "actors/caf_data_plane.hpp"
#include "actors/caf_types.hpp"
#include "actors/cluster_auth.hpp"
#include "actors/dataplane/net_devices.hpp"
#include "actors/dataplane/send_and_wait.hpp"
#include "actors/dataplane/ucx_data_plane.hpp"
#include "actors/json.hpp"
#include "actors/metrics.hpp"
#include "actors/log.hpp"
#include "kernels/cpu/omp_policy.hpp"
#include "kernels/cpu/thread_slice.hpp"
#include "kernels/preprocess/resources.hpp"
#include "kernels/waits.hpp"
#include "actors/node_services.hpp"
#include "actors/registry.hpp"
#include "actors/control_board.hpp"
#include "actors/shell_service.hpp"
#include "kernels/cuda/cuda_loader.hpp"
#include "kernels/trace.hpp"
#include "topology/parser.hpp"

namespace hetflow::actors {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

std::string node_label(const topology::node_spec& n) {
  return "'" + n.name + "' (" + n.host + ":" + std::to_string(n.port) + ")";
}

// True when host:port accepts a TCP connection within `timeout`. The join
// loop asks this before CAF's remote_actor, which blocks (in the middleman,
// for every other connect too) until the kernel gives up on a peer whose
// packets are dropped: ~2 min, far past join_timeout.
bool tcp_reachable(const std::string& host, uint16_t port, std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return false;
  bool ok = false;
  for (addrinfo* a = res; a != nullptr && !ok; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      ok = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, static_cast<int>(timeout.count())) == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        ok = ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
      }
    }
    ::close(fd);
  }
  freeaddrinfo(res);
  return ok;
}

// Everything the main thread, the node actor, the data plane's progress
// thread and the local actors share. Immutable after construction except
// where guarded by `mu`.
struct node_shared {
  topology::cluster cluster;
  std::vector<topology::actor_spec> actors;  // the job's actors; index = channel
  const registry* reg = nullptr;
  int self = 0;
  std::string self_name;
  std::shared_ptr<dataplane::data_plane> dp;
  caf_data_plane* caf_dp = nullptr;  // non-null when dp is the CAF fallback
  schemas::read_limits limits;
  std::map<std::string, std::size_t, std::less<>> actor_index;  // name -> index in actors
  std::string secret;  // the cluster secret (cluster_auth.hpp); empty: no authentication
  // The data-plane token derived from the secret (0 without one): in every
  // envelope this node builds (schemas::set_wire_token) and in the UCX
  // control messages; data-plane arrivals without it are dropped.
  uint64_t wire_token = 0;
  std::atomic<uint64_t> rejected_messages{0};  // data-plane arrivals dropped for a wrong token
  std::atomic<int64_t> rejected_logged_at_ms{-1000000};  // last log line about them (steady clock)
  // Wire traffic per actor of the job (index in actors), for /metrics and the
  // shell: messages and bytes this node sent to it (send_wire) and, for a
  // local actor, delivered to it (from this node or over the data plane).
  struct actor_traffic {
    std::atomic<uint64_t> sent_messages{0}, sent_bytes{0}, received_messages{0}, received_bytes{0};
    // Delivered wire messages the actor has let go of (pending_ref); the
    // difference to received_messages is what waits in its mailbox or is
    // still held by it.
    std::shared_ptr<std::atomic<uint64_t>> released = std::make_shared<std::atomic<uint64_t>>(0);
    std::atomic<kernels::trace::track_id> trace_track{0};  // --trace: the actor's track, once looked up
    std::atomic<const char*> trace_out_name{nullptr};       // --trace: "wire out to <actor>", once interned
  };
  std::unique_ptr<actor_traffic[]> traffic;  // actors.size() entries, set with actors
  // --trace: "wire in from <node>" per cluster node, once interned.
  std::unique_ptr<std::atomic<const char*>[]> trace_in_names;  // cluster.nodes.size() entries
  // The same per second, over the last sample_rates() window (the node actor
  // samples every second): messages and bytes delivered to each local actor
  // and sent by this node to each actor.
  struct traffic_rate {
    double sent_messages = 0, sent_bytes = 0, received_messages = 0, received_bytes = 0;
  };
  mutable std::mutex rates_mu;
  std::vector<traffic_rate> rates;               // guarded by rates_mu
  std::vector<std::array<uint64_t, 4>> counted;  // the counters at rates_at, guarded by rates_mu
  clock_type::time_point rates_at{};

  mutable std::mutex mu;
  std::map<std::string, caf::actor, std::less<>> directory;  // after start
  std::map<std::string, caf::actor, std::less<>> local_actors;
  // Hellos this node refused, by the name the sender claimed: the join
  // timeout message says why those nodes never joined.
  std::map<std::string, std::string> refused_hellos;
  std::map<dataplane::channel_id, caf::actor> local_by_channel;
  caf::actor node_actor;
  std::set<int> expendable;  // nodes whose loss the job survives (immutable after start)
  std::set<std::string, std::less<>> lost;  // those of them that went down, guarded by mu
  bool is_lost(int node) const {
    std::lock_guard<std::mutex> g(mu);
    return lost.count(cluster.nodes[std::size_t(node)].name) > 0;
  }

  // Exit: set exactly once.
  std::promise<std::pair<int, std::string>> exit_promise;
  std::atomic<bool> exit_set{false};
  std::atomic<bool> stopping{false};  // set when the stop protocol begins
  std::vector<actor_result> local_results;  // this node's actors
  std::vector<actor_result> all_results;    // head only
  clock_type::time_point started_at = clock_type::now();
  clock_type::time_point job_started_at{};
  double join_s = 0;
  // [cluster] thread_slice_us as applied at the start (0: the kernel's
  // default), and whether the kernel reported it back.
  uint32_t slice_us = 0;
  bool slice_applied = false;
  double run_s = 0;

  void set_exit(int code, std::string reason) {
    bool first = false;
    if (exit_set.compare_exchange_strong(first, true))
      exit_promise.set_value({code, std::move(reason)});
  }
  bool is_head() const { return self == 0; }
};

// The trace track of job actor `ch` (registered on first use).
kernels::trace::track_id actor_track(node_shared& s, std::size_t ch) {
  auto& t = s.traffic[ch].trace_track;
  kernels::trace::track_id id = t.load(std::memory_order_relaxed);
  if (id == 0) {
    id = kernels::trace::track(s.actors[ch].name);
    t.store(id, std::memory_order_relaxed);
  }
  return id;
}

// A wire message's flow id (--trace): the same on the sending and the
// receiving node without carrying anything extra: a hash of the message's
// first and last 64 bytes (envelope, headers, some payload), its size and
// its target's channel. A viewer aid only: two messages alike in those
// bytes (repeated small control messages) share an id, and the viewer may
// join their arrows crosswise.
uint64_t wire_flow_id(std::span<const std::byte> b, std::size_t ch) {
  uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t(b.size()) * 0x9E3779B97F4A7C15ull);
  auto mix = [&](std::size_t from, std::size_t to) {
    for (std::size_t i = from; i < to; ++i) h = (h ^ uint64_t(b[i])) * 0x100000001b3ull;
  };
  const std::size_t n = b.size();
  mix(0, std::min<std::size_t>(n, 64));
  mix(n > 128 ? n - 64 : std::min<std::size_t>(n, 64), n);
  return h ^ (uint64_t(ch) + 1) * 0xff51afd7ed558ccdull;
}

// --trace: a wire message delivered to local actor `ch` (its index in
// actors): a 1 us slice named `name` (a literal or interned) on its track
// with its bytes, and the end of the message's flow arrow.
void wire_trace(node_shared& s, std::size_t ch, const char* name, std::span<const std::byte> bytes) {
  if (!kernels::trace::enabled() || ch >= s.actors.size()) return;
  const auto id = actor_track(s, ch);
  const int64_t now = kernels::trace::now_us();
  kernels::trace::complete(id, name, now, 1, "bytes", int64_t(bytes.size()));
  kernels::trace::flow(id, "wire", now, wire_flow_id(bytes, ch), false);
}

// A wire message leaving for actor `ch`: a 1 us slice "wire out to TARGET"
// on the sender's track (the envelope names it) and the start of the flow.
void wire_send_trace(node_shared& s, std::size_t ch, const wire_buffer_ref& msg) {
  if (!kernels::trace::enabled() || ch >= s.actors.size()) return;
  auto m = schemas::decode_message(msg, s.limits, "trace");
  if (!m) return;
  auto it = s.actor_index.find(m->header().sender);
  if (it == s.actor_index.end()) return;
  const auto id = actor_track(s, it->second);
  const char* name = s.traffic[ch].trace_out_name.load(std::memory_order_relaxed);
  if (name == nullptr) {
    name = kernels::trace::intern("wire out to " + s.actors[ch].name);
    s.traffic[ch].trace_out_name.store(name, std::memory_order_relaxed);
  }
  const int64_t now = kernels::trace::now_us();
  kernels::trace::complete(id, name, now, 1, "bytes", int64_t(msg->size()));
  kernels::trace::flow(id, "wire", now, wire_flow_id(msg->bytes(), ch), true);
}

// What an actor gets for one delivered wire message: the same bytes, with a
// reference of its own whose release (the last copy of it dropped: the
// message handled, or a kept one let go) counts `released`, so received -
// released is what waits in its mailbox or is held by it.
wire_buffer_ref pending_ref(wire_buffer_ref msg, const std::shared_ptr<std::atomic<uint64_t>>& released) {
  const wire_buffer* raw = msg.get();
  return wire_buffer_ref(raw, [keep = std::move(msg), released](const wire_buffer*) mutable {
    keep.reset();
    released->fetch_add(1, std::memory_order_relaxed);
  });
}

class services_impl final : public node_services {
public:
  explicit services_impl(std::shared_ptr<node_shared> sh) : sh_(std::move(sh)) {}

  const std::string& node_name() const override { return sh_->self_name; }
  int node_index() const override { return sh_->self; }
  std::string data_plane_name() const override { return sh_->dp->name(); }

  caf::actor find_actor(std::string_view name) const override {
    std::lock_guard<std::mutex> g(sh_->mu);
    auto it = sh_->directory.find(name);
    if (it != sh_->directory.end()) return it->second;
    auto lt = sh_->local_actors.find(name);
    return lt != sh_->local_actors.end() ? lt->second : caf::actor{};
  }

  std::string node_of(std::string_view actor_name) const override {
    auto it = sh_->actor_index.find(actor_name);
    return it == sh_->actor_index.end() ? std::string{} : sh_->actors[it->second].node;
  }

  status send_wire(std::string_view target, wire_buffer_ref msg, std::chrono::microseconds linger) override {
    auto it = sh_->actor_index.find(target);
    if (it == sh_->actor_index.end())
      return make_error(errc::not_found, "no actor named '" + std::string(target) + "' in this job");
    const auto& spec = sh_->actors[it->second];
    int node = sh_->cluster.node_index(spec.node);
    auto& t = sh_->traffic[it->second];
    t.sent_messages.fetch_add(1, std::memory_order_relaxed);
    t.sent_bytes.fetch_add(msg->size(), std::memory_order_relaxed);
    if (kernels::trace::enabled()) wire_send_trace(*sh_, it->second, msg);
    if (node == sh_->self) {
      t.received_messages.fetch_add(1, std::memory_order_relaxed);
      t.received_bytes.fetch_add(msg->size(), std::memory_order_relaxed);
      wire_trace(*sh_, it->second, "wire in (same node)", msg->bytes());
      caf::actor dest;
      {
        std::lock_guard<std::mutex> g(sh_->mu);
        auto lt = sh_->local_actors.find(target);
        if (lt != sh_->local_actors.end()) dest = lt->second;
      }
      if (!dest)
        return make_error(errc::not_found, "actor '" + std::string(target) + "' is not running");
      // Same node: pass the buffer by reference. No serialization, no copy.
      caf::anon_send(dest, wire_atom::value, sh_->self_name, pending_ref(std::move(msg), t.released));
      return {};
    }
    // Per message: capture only a weak pointer and the node index; the
    // node's name is looked up when a send fails.
    return dataplane::send_and_wait(*sh_->dp, static_cast<dataplane::peer_id>(node), it->second, std::move(msg),
                         [weak = std::weak_ptr<node_shared>(sh_), node](status s) {
                           if (s.ok() || s.code() == errc::cancelled) return;
                           if (auto sh = weak.lock())
                             caf::anon_send(sh->node_actor, dperr_atom::value, int32_t{node},
                                            "data plane send to node '" +
                                                sh->cluster.nodes[node].name +
                                                "' failed: " + s.to_string());
                         },
                         linger);
  }

  bool node_lost(std::string_view node) const override {
    std::lock_guard<std::mutex> g(sh_->mu);
    return sh_->lost.count(node) > 0;
  }

  const schemas::read_limits& read_limits() const override { return sh_->limits; }
  const std::atomic<bool>& stopping() const override { return sh_->stopping; }

  void report_done(std::string_view actor, bool ok, std::string summary,
                   std::string metrics_json) override {
    caf::anon_send(sh_->node_actor, done_atom::value, sh_->self_name, std::string(actor), ok,
                   std::move(summary), std::move(metrics_json));
  }

private:
  std::shared_ptr<node_shared> sh_;
};

// The node actor's own tick for sample_rates (never crosses the wire).
using rates_atom = caf::atom_constant<caf::atom("rates")>;
// The node actor's poll of its PS shards' answers to a shell checkpoint
// request (never crosses the wire).
using ckptpoll_atom = caf::atom_constant<caf::atom("ckptpoll")>;

// The node actor's once-a-second sample: each actor's traffic per second
// since the previous sample.
void sample_rates(node_shared& s) {
  if (!s.traffic) return;
  const auto now = clock_type::now();
  std::lock_guard<std::mutex> g(s.rates_mu);
  const std::size_t n = s.actors.size();
  const bool first = s.counted.size() != n;
  const double dt = first ? 0.0 : std::chrono::duration<double>(now - s.rates_at).count();
  s.counted.resize(n);
  s.rates.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& t = s.traffic[i];
    const std::array<uint64_t, 4> c{t.sent_messages.load(std::memory_order_relaxed),
                                    t.sent_bytes.load(std::memory_order_relaxed),
                                    t.received_messages.load(std::memory_order_relaxed),
                                    t.received_bytes.load(std::memory_order_relaxed)};
    if (dt > 0) {
      const auto& p = s.counted[i];
      s.rates[i] = {double(c[0] - p[0]) / dt, double(c[1] - p[1]) / dt, double(c[2] - p[2]) / dt,
                    double(c[3] - p[3]) / dt};
    }
    s.counted[i] = c;
  }
  s.rates_at = now;
}

// Per actor of the job: what this node sent to it and what was delivered
// to it here (only actors with traffic), as /metrics counters, and their
// rates over the last second as gauges; the /metrics collector and the
// shell's snapshot call it.
void publish_actor_traffic(const node_shared& s) {
  std::vector<std::pair<metrics::labels, double>> sm, sb, rm, rb, rms, rbs, sms, sbs, pending;
  {
    std::lock_guard<std::mutex> g(s.rates_mu);
    for (std::size_t i = 0; i < s.rates.size() && i < s.actors.size(); ++i) {
      const auto& r = s.rates[i];
      const metrics::labels l{{"actor", s.actors[i].name}};
      if (s.counted[i][0] > 0) {
        sms.push_back({l, r.sent_messages});
        sbs.push_back({l, r.sent_bytes});
      }
      if (s.counted[i][2] > 0) {
        rms.push_back({l, r.received_messages});
        rbs.push_back({l, r.received_bytes});
      }
    }
  }
  for (std::size_t i = 0; i < s.actors.size(); ++i) {
    const auto& t = s.traffic[i];
    const metrics::labels l{{"actor", s.actors[i].name}};
    const uint64_t a = t.sent_messages.load(std::memory_order_relaxed);
    const uint64_t r = t.received_messages.load(std::memory_order_relaxed);
    if (a > 0) {
      sm.push_back({l, double(a)});
      sb.push_back({l, double(t.sent_bytes.load(std::memory_order_relaxed))});
    }
    if (r > 0) {
      rm.push_back({l, double(r)});
      rb.push_back({l, double(t.received_bytes.load(std::memory_order_relaxed))});
      // Released after received is read: never negative (at worst one
      // delivery behind).
      const uint64_t done = t.released->load(std::memory_order_relaxed);
      pending.push_back({l, double(r > done ? r - done : 0)});
    }
  }
  using metrics::kind;
  metrics::replace("hetflow_actor_wire_sent_messages_total",
                   "Wire messages this node's actors sent to this actor (it may run elsewhere)", kind::counter, sm);
  metrics::replace("hetflow_actor_wire_sent_bytes_total",
                   "Wire bytes this node's actors sent to this actor (it may run elsewhere)", kind::counter, sb);
  metrics::replace("hetflow_actor_wire_received_messages_total",
                   "Wire messages delivered to this local actor (from this node or over the data plane)",
                   kind::counter, rm);
  metrics::replace("hetflow_actor_wire_received_bytes_total",
                   "Wire bytes delivered to this local actor (from this node or over the data plane)", kind::counter,
                   rb);
  metrics::replace("hetflow_actor_wire_sent_messages_per_second",
                   "Wire messages per second this node's actors sent to this actor, over the last second",
                   kind::gauge, sms);
  metrics::replace("hetflow_actor_wire_sent_bytes_per_second",
                   "Wire bytes per second this node's actors sent to this actor, over the last second", kind::gauge,
                   sbs);
  metrics::replace("hetflow_actor_wire_received_messages_per_second",
                   "Wire messages per second delivered to this local actor, over the last second", kind::gauge, rms);
  metrics::replace("hetflow_actor_wire_pending_messages",
                   "Wire messages delivered to this local actor and not yet let go by it: waiting in its mailbox, "
                   "or kept by it (chunks ahead of their turn, held pulls)",
                   kind::gauge, pending);
  metrics::replace("hetflow_actor_wire_received_bytes_per_second",
                   "Wire bytes per second delivered to this local actor, over the last second", kind::gauge, rbs);
}

// --- the shell (shell_service.hpp) -------------------------------------------

// What a shell sees of this node. Runs on the shell service's thread: reads
// only what is immutable after start-up, atomics and the data plane's
// counters (as the /metrics collector does).
shell_node_snapshot shell_snapshot(const node_shared& sh) {
  shell_node_snapshot s;
  const auto& me = sh.cluster.nodes[static_cast<std::size_t>(sh.self)];
  s.cluster = sh.cluster.name;
  s.job = sh.cluster.job.kind;
  s.strategy = sh.cluster.job.params.get_string("strategy", "");
  s.node = sh.self_name;
  s.index = sh.self;
  s.host = me.host;
  s.port = me.port;
  s.data_plane = sh.dp ? sh.dp->name() : std::string("none");
  s.uptime_s = seconds_since(sh.started_at);
  s.rss_bytes = kernels::preprocess::current_rss();
  if (sh.traffic) publish_actor_traffic(sh);
  s.job_running = !sh.stopping.load() && !sh.exit_set.load();
  if (sh.dp) {
    auto d = sh.dp->stats();
    s.messages_sent = d.messages_sent;
    s.bytes_sent = d.bytes_sent;
    s.messages_received = d.messages_received;
    s.bytes_received = d.bytes_received;
  }
  for (const auto& n : sh.cluster.nodes) s.nodes.push_back({n.name, n.host, int(n.port)});
  for (const auto& a : sh.actors) s.actors.push_back({a.name, a.type, a.node});
  return s;
}

// --- the node actor ----------------------------------------------------------

struct node_actor_state {
  std::shared_ptr<node_shared> sh;
  std::shared_ptr<node_services> services;
  std::vector<caf::actor> peers;                    // by node index; own slot empty
  std::map<caf::actor_addr, int> peer_index;        // monitored peers
  std::set<int> alive_peers;
  std::map<caf::actor_addr, std::string> local_addr_to_name;
  // Nonces handed out by `challenge`, by the asking CAF node; each is used
  // by one hello. Bounded: the oldest go first.
  std::map<caf::node_id, std::vector<char>> challenges;
  std::vector<caf::node_id> challenge_order;
  std::set<std::string> local_done;
  caf::actor shell;  // the shell service (shell_service.hpp), spawned for the first shell
  // Shell checkpoint requests waiting for the local PS shards' answers.
  struct checkpoint_wait {
    caf::response_promise promise;
    std::vector<std::string> shards;
    std::set<std::string> at_next_step;  // trainers, dp replicas, HetPipe stages: they take it when they next poll
    clock_type::time_point since;
  };
  std::map<int64_t, checkpoint_wait> checkpoint_waits;  // by generation
  bool stopping = false;
  int exit_code = 0;
  std::string reason;
  // head only
  std::map<int, std::pair<std::vector<std::string>, std::vector<caf::actor>>> ready;
  std::set<std::string> done_names;
  bool started = false;
  static inline const char* name = "hetflow.node";
};

using node_actor_type = caf::stateful_actor<node_actor_state>;

// A shell request's answer: (shreq, ok, text).
caf::message shell_reply(bool ok, std::string text) {
  return caf::make_message(shreq_atom::value, ok, std::move(text));
}

// A shell's kill / pause of actor `name`: its spec when it is this node's and
// the job runs, else null with `why` (no such actor, another node's, the job
// stopping).
const topology::actor_spec* shell_target(node_actor_state& st, const std::string& name, std::string& why) {
  auto& sh = *st.sh;
  auto it = sh.actor_index.find(name);
  if (it == sh.actor_index.end()) {
    why = "no actor named '" + name + "' in this job";
    return nullptr;
  }
  const auto& spec = sh.actors[it->second];
  if (spec.node != sh.self_name) {
    why = "actor '" + name + "' runs on node '" + spec.node + "', not on '" + sh.self_name + "'";
    return nullptr;
  }
  if (st.stopping) {
    why = "the job is already stopping on node '" + sh.self_name + "': " + st.reason;
    return nullptr;
  }
  return &spec;
}

// The nonce this node sent `sender`'s CAF node in its challenge, used once
// (erased here); empty when there was none.
std::vector<char> take_challenge(node_actor_state& st, const caf::strong_actor_ptr& sender) {
  std::vector<char> nonce;
  if (!sender) return nonce;
  if (auto it = st.challenges.find(sender->node()); it != st.challenges.end()) {
    nonce = std::move(it->second);
    st.challenges.erase(it);
    st.challenge_order.erase(std::remove(st.challenge_order.begin(), st.challenge_order.end(), sender->node()),
                             st.challenge_order.end());
  }
  return nonce;
}

void finish(node_actor_type* self) {
  auto& st = self->state;
  st.sh->set_exit(st.exit_code, st.reason);
  self->quit();
}

void do_stop(node_actor_type* self, int code, std::string reason, bool tell_peers) {
  auto& st = self->state;
  if (st.stopping) return;
  st.stopping = true;
  st.sh->stopping = true;
  st.exit_code = code;
  st.reason = reason;
  if (code == 0)
    log_info("stopping: " + reason);
  else
    log_error("stopping (exit " + std::to_string(code) + "): " + reason);
  if (tell_peers)
    for (int p : st.alive_peers) self->send(st.peers[p], stop_atom::value, int32_t{code}, reason);
  {
    std::lock_guard<std::mutex> g(st.sh->mu);
    for (auto& [name, a] : st.sh->local_actors) self->send_exit(a, caf::exit_reason::user_shutdown);
  }
  if (st.sh->is_head() && !st.alive_peers.empty()) {
    // Let the peers receive the stop and leave before we close the connections.
    self->delayed_send(self, std::chrono::seconds(2), grace_atom::value);
  } else {
    finish(self);
  }
}

// Head: the job is done when every actor has finished (or was lost with
// its node, lose_node).
void finish_if_all_done(node_actor_type* self) {
  auto& st = self->state;
  auto& sh = *st.sh;
  if (!sh.is_head() || st.stopping || st.done_names.size() != sh.actors.size()) return;
  sh.run_s = seconds_since(sh.job_started_at);
  do_stop(self, exit_ok, "job finished", true);
}

// A node whose loss the job survives went down (registry.hpp's
// expendable_nodes): note it for node_services::node_lost (the actors that
// take over its work poll it) and, on the head, count its unfinished actors
// as lost rather than waiting for them.
void lose_node(node_actor_type* self, int idx, const std::string& why) {
  auto& st = self->state;
  auto& sh = *st.sh;
  const std::string& name = sh.cluster.nodes[std::size_t(idx)].name;
  {
    std::lock_guard<std::mutex> g(sh.mu);
    if (!sh.lost.insert(name).second) return;
  }
  log_warn("node " + node_label(sh.cluster.nodes[std::size_t(idx)]) + " is down (" + why +
           "); the job goes on without it: its work goes to the other nodes");
  metrics::set_gauge("hetflow_nodes_lost", "nodes that went down while the job went on without them", {},
                     double(sh.lost.size()));
  if (!sh.is_head()) return;
  for (const auto& a : sh.actors) {
    if (a.node != name || st.done_names.count(a.name)) continue;
    st.done_names.insert(a.name);
    sh.all_results.push_back(
        actor_result{a.name, a.node, false, "lost with node '" + name + "' (" + why + "); its work was taken over", ""});
  }
  finish_if_all_done(self);
}

void spawn_local_actors(node_actor_type* self) {
  auto& st = self->state;
  auto& sh = *st.sh;
  std::vector<std::string> names;
  std::vector<caf::actor> handles;
  for (std::size_t i = 0; i < sh.actors.size(); ++i) {
    const auto& spec = sh.actors[i];
    if (spec.node != sh.self_name) continue;
    const actor_type_entry* type = sh.reg->find_actor_type(spec.type);
    actor_env env{sh.cluster, spec, st.services};
    caf::actor a = type->spawn(self->system(), env);
    self->monitor(a);
    st.local_addr_to_name[a.address()] = spec.name;
    {
      std::lock_guard<std::mutex> g(sh.mu);
      sh.local_actors[spec.name] = a;
      sh.local_by_channel[i] = a;
    }
    metrics::set_gauge("hetflow_actor_running", "1 while the actor runs on this node, 0 once it finished",
                       {{"actor", spec.name}, {"type", spec.type}}, 1);
    names.push_back(spec.name);
    handles.push_back(a);
    log_debug("spawned actor '" + spec.name + "' of type '" + spec.type + "'");
  }
  caf::actor head = sh.is_head() ? caf::actor{self} : st.peers[0];
  self->send(head, ready_atom::value, uint32_t(sh.self), std::move(names), std::move(handles));
}

caf::behavior node_actor(node_actor_type* self, std::shared_ptr<node_shared> sh,
                         std::shared_ptr<node_services> services) {
  self->state.sh = sh;
  self->state.services = services;
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    auto& sh = *st.sh;
    if (auto it = st.peer_index.find(dm.source); it != st.peer_index.end()) {
      int idx = it->second;
      st.alive_peers.erase(idx);
      bool clean = !dm.reason || dm.reason == caf::exit_reason::normal;
      if (!st.stopping && clean) {
        // A peer that exits cleanly got the head's stop; ours may still be
        // on its way. Crashes and hangs arrive as remote_link_unreachable and
        // stop the job at once (below); a clean exit gets 2 s for the stop.
        self->delayed_send(self, std::chrono::seconds(2), left_atom::value, int32_t{idx});
      } else if (!st.stopping && sh.expendable.count(idx)) {
        lose_node(self, idx, self->system().render(dm.reason));
      } else if (!st.stopping) {
        do_stop(self, exit_peer,
                "node " + node_label(sh.cluster.nodes[idx]) +
                    " is down: " + self->system().render(dm.reason),
                true);
      } else if (sh.is_head() && st.alive_peers.empty()) {
        finish(self);
      }
      return;
    }
    if (auto it = st.local_addr_to_name.find(dm.source); it != st.local_addr_to_name.end()) {
      const std::string& name = it->second;
      if (!st.stopping && !st.local_done.count(name)) {
        do_stop(self, exit_job_failed,
                "actor '" + name + "' on node '" + sh.self_name +
                    "' died before finishing: " + self->system().render(dm.reason),
                true);
      }
    }
  });
  self->send(self, rates_atom::value);  // the first traffic sample; then every second
  return {
    // A peer's main thread introduces itself. Reply: ok, text, index, data plane, address.
    // A joining node asks for a fresh nonce to answer (cluster_auth.hpp).
    [self](challenge_atom) -> caf::message {
      auto& st = self->state;
      auto sender = self->current_sender();
      if (!sender) return caf::make_message(challenge_atom::value, std::vector<char>{});
      auto nonce = random_nonce();
      const caf::node_id nid = sender->node();
      if (!st.challenges.count(nid)) st.challenge_order.push_back(nid);
      st.challenges[nid] = nonce;
      while (st.challenge_order.size() > 256) {
        st.challenges.erase(st.challenge_order.front());
        st.challenge_order.erase(st.challenge_order.begin());
      }
      return caf::make_message(challenge_atom::value, std::move(nonce));
    },
    // A peer's main thread introduces itself. Reply: ok, text, index, data
    // plane, data-plane address, our MAC over its nonce, this node actor.
    [self](hello_atom, const std::string& cluster_name, uint64_t hash, const std::string& from,
           uint32_t from_index, const std::string& dp_kind, const std::vector<char>& their_nonce,
           const std::vector<char>& their_mac) -> caf::message {
      auto& sh = *self->state.sh;
      auto& st = self->state;
      auto sender = self->current_sender();
      const std::string peer_id = sender ? caf::to_string(sender->node()) : std::string("an anonymous sender");
      auto refuse = [&](const std::string& why) {
        log_warn("refused hello from '" + from + "' (CAF node " + peer_id + "): " + why);
        {
          std::lock_guard<std::mutex> g(sh.mu);
          if (sh.refused_hellos.size() < 1024) sh.refused_hellos[from.substr(0, 64)] = why;
        }
        return caf::make_message(hello_atom::value, false, why, uint32_t(sh.self), sh.dp->name(),
                                 std::vector<char>{}, std::vector<char>{}, caf::actor{});
      };
      std::vector<char> our_nonce = take_challenge(st, sender);
      auto str = [](const std::vector<char>& v) { return std::string_view(v.data(), v.size()); };
      const std::string hash_text = std::to_string(hash), idx_text = std::to_string(from_index);
      if (!sh.secret.empty()) {
        if (our_nonce.empty())
          return refuse("authentication required: ask for a challenge first (an older or foreign client?)");
        auto want = auth_mac(sh.secret, "hetflow-hello",
                             {cluster_name, hash_text, from, idx_text, str(our_nonce), str(their_nonce)});
        if (!mac_equal(want, their_mac))
          return refuse("authentication failed: '" + from +
                        "' does not know the cluster secret (a different secret_file / secret_env value?)");
      }
      if (cluster_name != sh.cluster.name || hash != sh.cluster.content_hash) {
        std::ostringstream os;
        os << "node '" << sh.self_name << "' runs cluster '" << sh.cluster.name
           << "' from a different topology file (" << sh.cluster.file.string() << ", hash "
           << std::hex << sh.cluster.content_hash << " vs yours " << hash
           << "); start every node with the same topology file";
        return refuse(os.str());
      }
      int idx = sh.cluster.node_index(from);
      if (idx < 0 || idx != static_cast<int>(from_index) || idx == sh.self)
        return refuse("'" + from + "' is not a peer node of cluster '" + sh.cluster.name + "'");
      std::string mine = sh.dp->name().substr(0, sh.dp->name().find('('));
      std::string theirs = dp_kind.substr(0, dp_kind.find('('));
      if (mine != theirs)
        return refuse("data planes differ: this node uses " + sh.dp->name() + ", '" + from +
                      "' uses " + dp_kind + " (set [cluster] data_plane explicitly)");
      auto addr = sh.dp->local_address();
      std::vector<char> our_mac;
      if (!sh.secret.empty())
        our_mac = auth_mac(sh.secret, "hetflow-welcome",
                           {sh.self_name, std::to_string(sh.self), str(their_nonce), str(our_nonce)});
      return caf::make_message(hello_atom::value, true, sh.self_name, uint32_t(sh.self), sh.dp->name(),
                               std::move(addr), std::move(our_mac), caf::actor{self});
    },
    // A shell (shell_service.hpp) after its challenge: on the cluster
    // secret's proof, the shell service's handle (never this actor's).
    [self](shell_atom, const std::string& client, const std::vector<char>& their_nonce,
           const std::vector<char>& their_mac) -> caf::message {
      auto& st = self->state;
      auto& sh = *st.sh;
      auto sender = self->current_sender();
      const std::string who = "shell client '" + client.substr(0, 64) + "' (CAF node " +
                              (sender ? caf::to_string(sender->node()) : std::string("anonymous")) + ")";
      std::vector<char> our_nonce = take_challenge(st, sender);
      auto refuse = [&](const std::string& why) {
        log_warn("refused " + who + ": " + why);
        return caf::make_message(shell_atom::value, false, why, std::vector<char>{}, caf::actor{});
      };
      auto str = [](const std::vector<char>& v) { return std::string_view(v.data(), v.size()); };
      if (!sh.secret.empty()) {
        if (our_nonce.empty())
          return refuse("authentication required: ask for a challenge first (an older or foreign client?)");
        if (their_mac.empty())
          return refuse("authentication required: cluster '" + sh.cluster.name +
                        "' has a secret; give the shell --topology FILE (its secret_file / secret_env) or "
                        "HETFLOW_SECRET_FILE");
        if (!mac_equal(their_mac, auth_mac(sh.secret, "hetflow-shell", {client, str(our_nonce), str(their_nonce)})))
          return refuse("authentication failed: the shell does not know the cluster secret (a different "
                        "secret_file / secret_env / HETFLOW_SECRET_FILE?)");
      }
      if (!st.shell) {
        std::weak_ptr<node_shared> weak = st.sh;
        std::function<shell_node_snapshot()> snap = [weak] {
          auto s = weak.lock();
          return s ? shell_snapshot(*s) : shell_node_snapshot{};
        };
        st.shell = self->spawn(shell_service, std::move(snap), caf::actor{self});
      }
      std::vector<char> mac;
      if (!sh.secret.empty())
        mac = auth_mac(sh.secret, "hetflow-shell-welcome", {sh.self_name, str(their_nonce), str(our_nonce)});
      log_info("accepted " + who);
      return caf::make_message(shell_atom::value, true, sh.self_name, std::move(mac), st.shell);
    },
    // A shell's fault drill (from the shell service): exit(kill) to a local
    // actor; its death stops the job in the down handler, as a crash does.
    [self](shkill_atom, const std::string& name) -> caf::message {
      auto& st = self->state;
      auto& sh = *st.sh;
      std::string why;
      const auto* target = shell_target(st, name, why);
      if (target == nullptr) return shell_reply(false, why);
      const auto& spec = *target;
      if (st.local_done.count(name))
        return shell_reply(false, "actor '" + name + "' on node '" + sh.self_name + "' has already finished; nothing to kill");
      caf::actor a;
      {
        std::lock_guard<std::mutex> g(sh.mu);
        if (auto lt = sh.local_actors.find(name); lt != sh.local_actors.end()) a = lt->second;
      }
      if (!a) return shell_reply(false, "actor '" + name + "' has not been started on node '" + sh.self_name + "' yet");
      log_warn("fault drill from a shell: killing actor '" + name + "' (" + spec.type + ")");
      self->send_exit(a, caf::exit_reason::kill);
      self->delayed_send(self, std::chrono::seconds(3), shkillchk_atom::value, name);
      return shell_reply(true, "sent exit(kill) to actor '" + name + "' (" + spec.type + ") on node '" + sh.self_name +
                             "'; the job stops as for a crashed actor");
    },
    // A shell's pause / resume of a local actor that honours it (HetPipe
    // stages): a flag the actor polls (control_board.hpp).
    [self](shpause_atom, const std::string& name, bool pause) -> caf::message {
      auto& st = self->state;
      auto& sh = *st.sh;
      std::string why;
      const auto* target = shell_target(st, name, why);
      if (target == nullptr) return shell_reply(false, why);
      const auto& spec = *target;
      if (!control::pausable(name))
        return shell_reply(false, "actor '" + name + "' (" + spec.type + ") does not honour pause" +
                                (st.local_done.count(name) ? " (it has finished)" : "") +
                                "; HetPipe stages (hp_stage) do");
      control::set_paused(name, pause);
      log_warn(std::string("shell: ") + (pause ? "pausing" : "resuming") + " actor '" + name + "' (" + spec.type + ")");
      return shell_reply(true, pause ? "paused actor '" + name + "' on node '" + sh.self_name +
                                     "': it starts no new minibatch until `resume " + name +
                                     "`; its neighbours' waits time out after ps_timeout"
                               : "resumed actor '" + name + "' on node '" + sh.self_name + "'");
    },
    // A shell's `set staleness D`: the HetPipe shards of this node take it.
    [self](shstale_atom, int64_t d) -> caf::message {
      auto& st = self->state;
      auto& sh = *st.sh;
      if (d < 0 || d > 1000000) return shell_reply(false, "staleness must be in [0, 1000000], got " + std::to_string(d));
      std::vector<std::string> shards;
      for (const auto& a : sh.actors)
        if (a.node == sh.self_name && a.type == "hp_ps") shards.push_back(a.name);
      if (shards.empty())
        return shell_reply(false, "node '" + sh.self_name + "' runs no HetPipe shard (hp_ps): only strategy hetpipe takes a "
                                                      "new staleness");
      if (st.stopping) return shell_reply(false, "the job is already stopping on node '" + sh.self_name + "': " + st.reason);
      control::set_staleness(d);
      log_warn("shell: staleness D = " + std::to_string(d) + " for the HetPipe shard(s) of node '" + sh.self_name + "'");
      return shell_reply(true, "node '" + sh.self_name + "': " + shards.front() + " takes D = " + std::to_string(d) +
                             " from its next message");
    },
    // A shell's `checkpoint`: the PS shards (or RALP server) of this node take one more
    // checkpoint at clock `label` (control_board.hpp); the answer waits for
    // theirs, at most 2 s.
    [self](shckpt_atom, int64_t label) -> caf::result<shreq_atom, bool, std::string> {
      using reply = caf::result<shreq_atom, bool, std::string>;
      auto& st = self->state;
      auto& sh = *st.sh;
      if (label < 1) return reply(shreq_atom::value, false, "a checkpoint label must be a clock >= 1, got " + std::to_string(label));
      std::vector<std::string> shards;
      std::set<std::string> at_next_step;
      for (const auto& a : sh.actors)
        if (a.node == sh.self_name && !st.local_done.count(a.name) &&
            (a.type == "ps_shard" || a.type == "ralp_server" || a.type == "hp_ps" || a.type == "hp_stage" ||
             a.type == "trainer" || a.type == "dp_replica")) {
          shards.push_back(a.name);
          if (a.type == "hp_stage" || a.type == "trainer" || a.type == "dp_replica") at_next_step.insert(a.name);
        }
      if (shards.empty())
        return reply(shreq_atom::value, false,
                     "node '" + sh.self_name + "' runs no parameter server (ps_shard, ralp_server, hp_ps), HetPipe "
                     "stage, trainer or dp replica that is still running");
      if (st.stopping) return reply(shreq_atom::value, false, "the job is already stopping on node '" + sh.self_name + "': " + st.reason);
      const int64_t gen = control::request_checkpoint(label);
      log_warn("shell: a checkpoint at clock " + std::to_string(label) + " asked of " + std::to_string(shards.size()) +
               " actor(s) of node '" + sh.self_name + "'");
      auto& w = st.checkpoint_waits[gen];
      w.promise = self->make_response_promise();
      w.shards = shards;
      w.at_next_step = std::move(at_next_step);
      w.since = clock_type::now();
      self->delayed_send(self, std::chrono::milliseconds(50), ckptpoll_atom::value, gen);
      return w.promise;
    },
    [self](ckptpoll_atom, int64_t gen) {
      auto& st = self->state;
      auto it = st.checkpoint_waits.find(gen);
      if (it == st.checkpoint_waits.end()) return;
      auto& w = it->second;
      const auto answers = control::checkpoint_answers(gen);
      bool all = true, ok = true;
      std::string text;
      for (const auto& name : w.shards) {
        auto a = answers.find(name);
        if (a == answers.end()) {
          all = false;
          continue;
        }
        ok = ok && a->second.ok;
        text += (text.empty() ? "" : "\n") + a->second.text;
      }
      const bool late = clock_type::now() - w.since > std::chrono::seconds(2);
      if (!all && !late && !st.stopping) {
        self->delayed_send(self, std::chrono::milliseconds(50), ckptpoll_atom::value, gen);
        return;
      }
      // A trainer, replica or stage reads the request between steps: one
      // in a long step, an evaluation or a wait answers later, but takes it
      // then (its refusal, if it refuses, goes to its log).
      for (const auto& name : w.shards)
        if (!answers.count(name)) {
          const bool later = w.at_next_step.count(name) > 0 && !st.stopping;
          ok = ok && later;
          text += (text.empty() ? "" : "\n") + name +
                  (later ? ": takes the request after its current step (no answer within 2 s: a long step, an "
                           "evaluation or a wait; its log says when)"
                         : ": no answer within 2 s (busy, or the job is ending)");
        }
      w.promise.deliver(shreq_atom::value, ok, text);
      st.checkpoint_waits.erase(it);
    },
    // A blocking actor reads exit messages only when it receives: one busy
    // computing (or sleeping) is not gone yet. The drill stops the job anyway.
    [self](shkillchk_atom, const std::string& name) {
      auto& st = self->state;
      if (st.stopping || st.local_done.count(name)) return;
      do_stop(self, exit_job_failed,
              "actor '" + name + "' on node '" + st.sh->self_name +
                  "' was killed from a shell (fault drill) and had not exited 3 s later (busy, not reading its "
                  "mailbox); stopping the job as for a crashed actor",
              true);
    },
    // Our main thread finished joining.
    [self](joined_atom, std::vector<caf::actor> peers) {
      auto& st = self->state;
      st.peers = std::move(peers);
      for (std::size_t i = 0; i < st.peers.size(); ++i) {
        if (static_cast<int>(i) == st.sh->self || !st.peers[i]) continue;
        st.peer_index[st.peers[i].address()] = static_cast<int>(i);
        st.alive_peers.insert(static_cast<int>(i));
        self->monitor(st.peers[i]);
      }
      if (st.stopping) return;
      spawn_local_actors(self);
    },
    // Head: a node has spawned its actors.
    [self](ready_atom, uint32_t idx, std::vector<std::string>& names,
           std::vector<caf::actor>& handles) {
      auto& st = self->state;
      if (!st.sh->is_head() || st.stopping) return;
      st.ready[static_cast<int>(idx)] = {std::move(names), std::move(handles)};
      if (st.started || st.ready.size() != st.sh->cluster.nodes.size()) return;
      st.started = true;
      std::vector<std::string> all_names;
      std::vector<caf::actor> all_handles;
      for (auto& [i, entry] : st.ready) {
        all_names.insert(all_names.end(), entry.first.begin(), entry.first.end());
        all_handles.insert(all_handles.end(), entry.second.begin(), entry.second.end());
      }
      log_info("all " + std::to_string(st.ready.size()) + " nodes ready; starting job '" +
               st.sh->cluster.job.kind + "' with " + std::to_string(all_names.size()) +
               " actors");
      for (std::size_t i = 0; i < st.peers.size(); ++i) {
        caf::actor dest = static_cast<int>(i) == st.sh->self ? caf::actor{self} : st.peers[i];
        self->send(dest, start_atom::value, all_names, all_handles);
      }
      if (all_names.empty()) do_stop(self, exit_ok, "job has no actors", true);
    },
    [self](start_atom, const std::vector<std::string>& names,
           const std::vector<caf::actor>& handles) {
      auto& st = self->state;
      if (st.stopping) return;
      std::vector<caf::actor> locals;
      {
        std::lock_guard<std::mutex> g(st.sh->mu);
        for (std::size_t i = 0; i < names.size() && i < handles.size(); ++i)
          st.sh->directory[names[i]] = handles[i];
        for (auto& [n, a] : st.sh->local_actors) locals.push_back(a);
      }
      st.sh->job_started_at = clock_type::now();
      for (auto& a : locals) self->send(a, start_atom::value);
    },
    // A local actor finished (from services), or a peer forwards one (head).
    [self](done_atom, const std::string& node, const std::string& actor, bool ok,
           const std::string& summary, const std::string& metrics) {
      auto& st = self->state;
      auto& sh = *st.sh;
      actor_result r{actor, node, ok, summary, metrics};
      if (node == sh.self_name && !st.local_done.count(actor)) {
        st.local_done.insert(actor);
        sh.local_results.push_back(r);
        {
          auto it = sh.actor_index.find(actor);
          const std::string type = it == sh.actor_index.end() ? std::string() : sh.actors[it->second].type;
          metrics::set_gauge("hetflow_actor_running", "", {{"actor", actor}, {"type", type}}, 0);
          metrics::set_gauge("hetflow_actor_ok", "1 if the actor finished successfully, 0 if it failed",
                             {{"actor", actor}, {"type", type}}, ok ? 1 : 0);
        }
        (ok ? log_info : log_error)("actor '" + actor + "' " + (ok ? "finished" : "FAILED") +
                                    (summary.empty() ? "" : ": " + summary));
        if (!sh.is_head() && !st.peers.empty() && st.peers[0])
          self->send(st.peers[0], done_atom::value, node, actor, ok, summary, metrics);
      }
      if (!sh.is_head() || st.stopping || st.done_names.count(actor)) return;
      st.done_names.insert(actor);
      sh.all_results.push_back(std::move(r));
      if (!ok) {
        do_stop(self, exit_job_failed,
                "actor '" + actor + "' on node '" + node + "' failed: " + summary, true);
      } else {
        finish_if_all_done(self);
      }
    },
    [self](stop_atom, int32_t code, const std::string& reason) {
      // From a peer (the head, or whoever saw a failure first). Say whose
      // view it is: after a split, "node X is down" may be true only there.
      auto& st = self->state;
      std::string from;
      if (auto sender = self->current_sender())
        if (auto it = st.peer_index.find(caf::actor_cast<caf::actor_addr>(sender)); it != st.peer_index.end())
          from = st.sh->cluster.nodes[it->second].name;
      do_stop(self, code, from.empty() || code == 0 ? reason : reason + " (reported by node '" + from + "')", false);
    },
    [self](interrupt_atom) {
      do_stop(self, exit_interrupted,
              "node '" + self->state.sh->self_name + "' was interrupted (SIGINT/SIGTERM)", true);
    },
    // A failed data-plane send: a crashed or hung peer is reported by CAF's
    // monitor at once (down handler) with the real cause; a peer that shut
    // down in order (it got the head's stop) fails our sends before that
    // stop reaches us. So wait out the same 2 s grace as for a clean exit,
    // and stop with the send's error only if nothing explained it by then.
    [self](dperr_atom, int32_t node, const std::string& what) {
      if (self->state.stopping) return;
      self->delayed_send(self, std::chrono::seconds(2), dperrlate_atom::value, node, what);
    },
    [self](dperrlate_atom, int32_t node, const std::string& what) {
      // Sends to a lost node that the job goes on without fail by design.
      if (self->state.stopping || self->state.sh->is_lost(node)) return;
      do_stop(self, exit_peer, what, true);
    },
    [self](grace_atom) { finish(self); },
    [self](rates_atom) {
      sample_rates(*self->state.sh);
      if (!self->state.stopping) self->delayed_send(self, std::chrono::seconds(1), rates_atom::value);
    },
    [self](left_atom, int32_t idx) {
      if (self->state.stopping) return;
      do_stop(self, exit_peer,
              "node " + node_label(self->state.sh->cluster.nodes[idx]) +
                  " left before the job finished",
              true);
    },
    [self](dp_atom, uint32_t from, uint64_t channel, const std::vector<char>& bytes) {
      if (auto* c = self->state.sh->caf_dp) c->deliver(from, channel, bytes);
    },
  };
}

// --- the gate ----------------------------------------------------------------

// What a node publishes on its port: it answers `challenge` and `hello` (by
// delegating them to the node actor, which checks them) and drops everything
// else with a log line. The node actor itself is handed out only in an
// accepted hello's reply, so a stranger that connects reaches nothing but
// this. Ends with the node actor.
caf::behavior gate_actor(caf::event_based_actor* self, caf::actor node) {
  self->monitor(node);
  self->set_down_handler([self](caf::down_msg&) { self->quit(); });
  self->set_default_handler([](caf::scheduled_actor* s, caf::message_view& x) -> caf::result<caf::message> {
    auto sender = s->current_sender();
    log_warn("dropped a message from an unauthenticated peer (" +
             (sender ? "CAF node " + caf::to_string(sender->node()) : std::string("anonymous")) +
             "): " + caf::to_string(x.content()).substr(0, 120));
    return caf::sec::unexpected_message;
  });
  return {
      [self, node](challenge_atom a) { return self->delegate(node, a); },
      [self, node](hello_atom a, const std::string& cluster_name, uint64_t hash, const std::string& from,
                   uint32_t from_index, const std::string& dp_kind, const std::vector<char>& nonce,
                   const std::vector<char>& mac) {
        return self->delegate(node, a, cluster_name, hash, from, from_index, dp_kind, nonce, mac);
      },
      // A shell's hello (shell_service.hpp).
      [self, node](shell_atom a, const std::string& client, const std::vector<char>& nonce,
                   const std::vector<char>& mac) { return self->delegate(node, a, client, nonce, mac); },
  };
}

// --- signals -----------------------------------------------------------------

// SIGINT/SIGTERM are blocked in every thread and taken by one sigwait thread,
// which tells the node actor (or, before it exists, the joining main thread).
class signal_watcher {
public:
  signal_watcher() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGUSR1);  // our own wake-up to end the thread
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    thread_ = std::thread([this] {
      for (;;) {
        int sig = 0;
        if (sigwait(&set_, &sig) != 0) continue;
        if (sig == SIGUSR1 && done_) return;
        if (sig == SIGINT || sig == SIGTERM) {
          interrupted_ = true;
          std::lock_guard<std::mutex> g(mu_);
          if (target_) caf::anon_send(target_, interrupt_atom::value);
        }
      }
    });
  }
  ~signal_watcher() {
    done_ = true;
    pthread_kill(thread_.native_handle(), SIGUSR1);
    thread_.join();
  }
  void set_target(caf::actor a) {
    std::lock_guard<std::mutex> g(mu_);
    target_ = std::move(a);
    if (interrupted_) caf::anon_send(target_, interrupt_atom::value);
  }
  void clear_target() {
    std::lock_guard<std::mutex> g(mu_);
    target_ = caf::actor{};
  }
  bool interrupted() const { return interrupted_; }

private:
  sigset_t set_;
  std::thread thread_;
  std::atomic<bool> done_{false};
  std::atomic<bool> interrupted_{false};
  std::mutex mu_;
  caf::actor target_;
};

// --- data plane choice ---------------------------------------------------------

// A data-plane message that does not carry the cluster's token: dropped and
// counted; logged at most once a second (a stranger can send many).
void reject_wire(node_shared& sh, const std::string& from_name, dataplane::channel_id ch, std::size_t bytes,
                 const std::string& why) {
  const uint64_t n = sh.rejected_messages.fetch_add(1, std::memory_order_relaxed) + 1;
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count();
  int64_t last = sh.rejected_logged_at_ms.load(std::memory_order_relaxed);
  if (now_ms - last < 1000 || !sh.rejected_logged_at_ms.compare_exchange_strong(last, now_ms)) return;
  log_warn("data plane: refused a message of " + std::to_string(bytes) + " bytes on channel " +
           std::to_string(ch) + " claiming to come from node '" + from_name +
           "': it does not carry the cluster's data-plane token (a stranger on the data plane's port, or a "
           "node with another secret)" +
           (why.empty() ? "" : " (" + why + ")") + "; " + std::to_string(n) + " refused so far");
}

expected<std::shared_ptr<dataplane::data_plane>> make_data_plane(node_shared& sh) {
  const auto& rt = sh.cluster.runtime;
  // "auto" on a one-node cluster: the node's actors pass buffers by
  // reference (send_wire) and nothing crosses a wire, so UCX is not started
  // (its start and stop took ~13 ms of a 0.4 s job; the CAF data plane's 2).
  // Nor for a preprocess job of its own: its actors send only CAF messages
  // (count and id chunks of at most chunk_bytes), and UCX's start and stop
  // were 26 ms of a 2-node job (wall median 0.107 s -> 0.081 s, 1000 rows).
  const bool no_bulk =
      sh.cluster.nodes.size() == 1 || (sh.cluster.job.kind == "preprocess" && sh.cluster.actors.empty());
  if (rt.data_plane == "caf" || (rt.data_plane == "auto" && no_bulk)) {
    auto c = std::make_shared<caf_data_plane>(sh.self, rt.max_message_bytes);
    sh.caf_dp = c.get();
    return std::shared_ptr<dataplane::data_plane>(c);
  }
  dataplane::ucx_options o;
  o.tls = rt.ucx_tls;
  // Listen where the topology says this node lives, not on every interface.
  std::string why;
  o.net_devices = dataplane::net_devices_for(rt.ucx_net_devices, sh.cluster.nodes[std::size_t(sh.self)].host, &why);
  if (std::getenv("UCX_NET_DEVICES") != nullptr) why = "UCX_NET_DEVICES=" + std::string(std::getenv("UCX_NET_DEVICES"));
  log_info("UCX data plane: " + why);
  o.error_mode = rt.ucx_error_mode == "none"   ? dataplane::ucx_error_mode::none
                 : rt.ucx_error_mode == "peer" ? dataplane::ucx_error_mode::peer
                                               : dataplane::ucx_error_mode::automatic;
  o.max_message_bytes = rt.max_message_bytes;
  o.self_peer = static_cast<dataplane::peer_id>(sh.self);
  o.control_token = sh.wire_token;
  // Receive buffers of 64 KiB and more come back to a pool when the last
  // actor drops them (a fresh one costs a page fault per page: HetPipe's
  // activations of ~200 KB per minibatch measured 8% faster pooled).
  auto pool = buffer_pool::create(std::size_t{64} << 10, std::size_t{512} << 20);
  o.receive_buffer_allocator = [pool](std::size_t bytes) { return pool->allocate(bytes); };
  // Peers going away after the job has ended are expected, not errors.
  o.on_error = [&sh](const status& s) {
    if (sh.exit_set)
      log_debug("data plane: " + s.to_string());
    else
      log_error("data plane: " + s.to_string());
  };
  auto u = dataplane::make_ucx_data_plane(o);
  if (u) return std::shared_ptr<dataplane::data_plane>(std::move(*u));
  if (rt.data_plane == "ucx")
    return u.error().with_context("cannot start the UCX data plane ([cluster] data_plane = \"ucx\")");
  log_warn("UCX data plane unavailable (" + u.error().to_string() +
           "); falling back to the CAF data plane");
  auto c = std::make_shared<caf_data_plane>(sh.self, rt.max_message_bytes);
  sh.caf_dp = c.get();
  return std::shared_ptr<dataplane::data_plane>(c);
}

// --- report --------------------------------------------------------------------

void write_actor_results(json_writer& w, const std::vector<actor_result>& results) {
  w.begin_array();
  for (auto& r : results) {
    w.begin_object().field("name", r.name).field("node", r.node).field("ok", r.ok);
    w.field("summary", r.summary);
    w.key("metrics");
    if (r.metrics_json.empty())
      w.raw("{}");
    else
      w.raw(r.metrics_json);
    w.end_object();
  }
  w.end_array();
}

void write_file(const std::filesystem::path& p, const std::string& text) {
  auto tmp = p;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text << "\n";
    if (!out) {
      log_error("cannot write report " + p.string());
      return;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, p, ec);
  if (ec) log_error("cannot write report " + p.string() + ": " + ec.message());
}

// --trace: what the recorder holds, whatever the job's outcome; one line
// says where it went (the launcher's own line replaces it under `hetflow
// run`, which merges the nodes' files).
void write_trace(const node_options& opts, int code, const std::string& reason) {
  if (opts.trace.empty()) return;
  const std::string note =
      code == 0 ? "ok" : "failed (exit " + std::to_string(code) + "): " + reason + "; events until it stopped";
  auto r = kernels::trace::write_file(opts.trace, note);
  if (!r) {
    log_error(r.error().message());
    return;
  }
  // Under `hetflow run` the file is a temporary the launcher merges and
  // reports on.
  if (std::getenv("HETFLOW_LAUNCHED") != nullptr) return;
  std::string counts = std::to_string(r->events) + " events on " + std::to_string(r->tracks) + " tracks" +
                       (r->dropped > 0 ? ", " + std::to_string(r->dropped) +
                                             " dropped over the bound (HETFLOW_TRACE_MAX_EVENTS)"
                                       : std::string());
  if (code != 0)
    log_warn("trace of the failed job written to " + opts.trace.string() + " (what was recorded until it stopped: " +
             counts + ")");
  else
    log_info("trace written to " + opts.trace.string() + " (" + counts + ")");
}

void write_reports(const node_options& opts, node_shared& sh, int code, const std::string& reason) {
  if (opts.report.empty()) return;
  const auto& me = sh.cluster.nodes[sh.self];
  json_writer w;
  w.begin_object();
  w.field("node", me.name).field("index", sh.self).field("host", me.host);
  w.field("port", int64_t{me.port});
  w.field("status", code == 0 ? "ok" : "failed").field("exit_code", code).field("message", reason);
  w.field("data_plane", sh.dp ? sh.dp->name() : std::string("none"));
  // What libgomp read at this process's start (kernels/cpu/omp_policy.hpp).
  w.field("omp_wait_policy", kernels::cpu::omp_wait_policy_in_effect());
  // The time slice asked for, whether the kernel took it (6.12+), and what
  // /proc/self/task/*/sched shows for the threads still running now (6.6+).
  {
    const auto ps = kernels::cpu::process_thread_slices();
    w.key("thread_slice").begin_object();
    w.field("requested_us", int64_t{sh.slice_us}).field("applied", sh.slice_applied);
    w.field("threads", int64_t{ps.threads}).field("min_us", int64_t{ps.min_us}).field("max_us", int64_t{ps.max_us});
    w.end_object();
  }
  w.key("timings").begin_object();
  w.field("join_s", sh.join_s).field("total_s", seconds_since(sh.started_at)).end_object();
  if (sh.dp) {
    auto s = sh.dp->stats();
    w.key("data_plane_stats").begin_object();
    w.field("messages_sent", s.messages_sent).field("bytes_sent", s.bytes_sent);
    w.field("messages_received", s.messages_received).field("bytes_received", s.bytes_received);
    w.end_object();
  }
  w.key("actors");
  write_actor_results(w, sh.local_results);
  w.end_object();
  write_file(opts.report, w.str());

  if (!sh.is_head()) return;
  // The head also writes the job's report (PATH.job): job-level members the
  // launcher lifts to the top of the combined report.
  json_writer j;
  j.begin_object();
  j.field("job", sh.cluster.job.kind).field("status", code == 0 ? "ok" : "failed");
  j.field("exit_code", code).field("message", reason).field("run_s", sh.run_s);
  const job_kind_entry* kind = sh.reg->find_job_kind(sh.cluster.job.kind);
  if (kind != nullptr && kind->summarize) {
    std::string members = kind->summarize(sh.all_results);
    if (!members.empty()) j.raw(members);
  }
  j.key("actors");
  write_actor_results(j, sh.all_results);
  j.end_object();
  auto job_path = opts.report;
  job_path += ".job";
  write_file(job_path, j.str());
}

}  // namespace

std::vector<int> usable_cpus() {
  std::vector<int> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  if (out.empty())
    for (int c = 0; c < int(std::max(1u, std::thread::hardware_concurrency())); ++c) out.push_back(c);
  return out;
}

int run_node(const node_options& opts, const registry& reg) {
  auto parsed = topology::load_topology(opts.topology, reg.catalog());
  if (!parsed.ok()) {
    for (auto& d : parsed.errors) std::fprintf(stderr, "%s\n", topology::format(d).c_str());
    return exit_usage;
  }
  auto sh = std::make_shared<node_shared>();
  sh->cluster = std::move(*parsed.model);
  sh->reg = &reg;
  sh->self = sh->cluster.node_index(opts.name);
  if (sh->self < 0) {
    std::string names;
    for (auto& n : sh->cluster.nodes) names += (names.empty() ? "" : ", ") + n.name;
    std::fprintf(stderr, "%s: error: no node named '%s' (the nodes are: %s)\n",
                 opts.topology.c_str(), opts.name.c_str(), names.c_str());
    return exit_usage;
  }
  sh->self_name = opts.name;
  set_log_node_name(opts.name);
  // A short time slice for every thread of the node (they inherit it from
  // this one), so a thread woken by a message preempts a computing one at
  // once instead of after the kernel's default slice (thread_slice.hpp).
  // Before the node starts its threads. HETFLOW_THREAD_SLICE_US overrides
  // the file (0: the kernel's default).
  {
    int us = sh->cluster.runtime.thread_slice_us;
    if (const char* e = std::getenv("HETFLOW_THREAD_SLICE_US"); e != nullptr && *e != 0)
      us = std::max(0, std::atoi(e));
    if (us > 0) {
      auto why = kernels::cpu::set_thread_slice_us(uint32_t(us));
      if (!why.empty()) log_warn("thread_slice_us = " + std::to_string(us) + " not applied: " + why);
      sh->slice_us = uint32_t(us);
      sh->slice_applied = why.empty() && kernels::cpu::thread_slice_us() == uint32_t(us);
    }
  }
  if (opts.join_timeout_s) sh->cluster.runtime.join_timeout_s = *opts.join_timeout_s;
  if (opts.resume) sh->cluster.job.params.set("resume", true);
  if (!opts.strategy.empty()) sh->cluster.job.params.set("strategy", opts.strategy);
  sh->limits.max_message_bytes = sh->cluster.runtime.max_message_bytes;
  {
    std::string warning;
    auto secret = load_cluster_secret(sh->cluster.runtime, &warning);
    if (!secret) {
      std::fprintf(stderr, "%s: error: node '%s': %s\n", opts.topology.c_str(), opts.name.c_str(),
                   secret.error().message().c_str());
      return exit_usage;
    }
    if (!warning.empty()) log_warn(warning);
    sh->secret = std::move(*secret);
    if (!sh->secret.empty()) {
      // Before any message is built: every envelope carries it from now on.
      sh->wire_token = data_plane_token(sh->secret, sh->cluster.name, sh->cluster.content_hash);
      schemas::set_wire_token(sh->wire_token);
    }
  }

  auto actors = job_actors(sh->cluster, reg);
  if (!actors) {
    std::fprintf(stderr, "%s: error: %s\n", opts.topology.c_str(),
                 actors.error().message().c_str());
    return exit_usage;
  }
  sh->actors = std::move(*actors);
  sh->expendable = expendable_nodes(sh->cluster, sh->actors);
  for (std::size_t i = 0; i < sh->actors.size(); ++i) sh->actor_index[sh->actors[i].name] = i;
  sh->traffic = std::make_unique<node_shared::actor_traffic[]>(sh->actors.size());
  sh->trace_in_names = std::make_unique<std::atomic<const char*>[]>(sh->cluster.nodes.size());

  // CPU affinity: the node's `cpus`, else what `hetflow run` chose for it
  // (HETFLOW_CPUS), set before any thread starts so every thread inherits it.
  {
    const auto& me = sh->cluster.nodes[sh->self];
    std::vector<int> cpus = me.cpus;
    std::string from = "its 'cpus'";
    if (cpus.empty()) {
      if (const char* e = std::getenv("HETFLOW_CPUS"); e != nullptr && *e != '\0') {
        auto l = topology::parse_cpu_list(e);
        if (!l) {
          std::fprintf(stderr, "hetflow node: HETFLOW_CPUS: %s\n", l.error().message().c_str());
          return exit_usage;
        }
        cpus = std::move(*l);
        from = "hetflow run";
      }
    }
    if (!cpus.empty()) {
      const std::vector<int> have = usable_cpus();
      std::vector<int> missing;
      cpu_set_t want;
      CPU_ZERO(&want);
      for (int c : cpus) {
        if (std::binary_search(have.begin(), have.end(), c))
          CPU_SET(c, &want);
        else
          missing.push_back(c);
      }
      if (!missing.empty()) {
        const std::string where = me.cpus.empty() ? "hetflow node" // HETFLOW_CPUS, from hetflow run
                                                  : opts.topology.string() + ":" + std::to_string(me.where.line) + ":" +
                                                        std::to_string(me.where.column);
        std::fprintf(stderr, "%s: error: node '%s' is to run on CPUs %s (%s), but CPU(s) %s are not available "
                             "to this process (it may use %s)\n",
                     where.c_str(), opts.name.c_str(), topology::format_cpu_list(cpus).c_str(), from.c_str(),
                     topology::format_cpu_list(missing).c_str(), topology::format_cpu_list(have).c_str());
        return exit_usage;
      }
      if (sched_setaffinity(0, sizeof want, &want) != 0) {
        std::fprintf(stderr, "hetflow node: cannot pin to CPUs %s: %s\n", topology::format_cpu_list(cpus).c_str(),
                     std::strerror(errno));
        return exit_usage;
      }
      log_info("running on CPUs " + topology::format_cpu_list(cpus) + " (" + from + ")");
    }
  }

  // Devices the topology gives this node must exist here.
  for (const auto& d : sh->cluster.nodes[sh->self].devices) {
    if (d.kind != topology::device_kind::cuda) continue;
    auto cuda = kernels::probe_cuda();
    bool found = false;
    for (auto& g : cuda.devices) found = found || g.index == d.index;
    if (!found) {
      std::fprintf(stderr,
                   "%s:%u:%u: error: node '%s' lists cuda device %d, but this machine has %s\n",
                   opts.topology.c_str(), d.where.line, d.where.column, opts.name.c_str(), d.index,
                   cuda.devices.empty() ? ("no CUDA device (" + cuda.why_none + ")").c_str()
                                        : (std::to_string(cuda.devices.size()) + " CUDA device(s)").c_str());
      return exit_usage;
    }
  }

  // Recording starts before any actor exists: each registers its track at
  // spawn (kernels/trace.hpp).
  if (!opts.trace.empty()) kernels::trace::start(opts.name, sh->self, opts.trace_max_events);

  // Block signals before any thread starts so every thread inherits the mask.
  signal_watcher signals;

  auto dp = make_data_plane(*sh);
  if (!dp) {
    log_error(dp.error().to_string());
    return exit_usage;
  }
  sh->dp = std::move(*dp);
  // metrics_port: /metrics at port + this node's index, until the node exits.
  std::unique_ptr<metrics::http_server> metrics_server;
  if (const int mp = sh->cluster.runtime.metrics_port; mp > 0) {
    const auto& me = sh->cluster.nodes[static_cast<std::size_t>(sh->self)];
    std::weak_ptr<node_shared> weak = sh;
    auto collect = [weak] {
      auto s = weak.lock();
      if (!s) return;
      const metrics::labels none;
      metrics::set_gauge("hetflow_uptime_seconds", "Seconds since the node started", none,
                         seconds_since(s->started_at));
      metrics::set_gauge("hetflow_job_running", "1 until the node's job ends or stops", none,
                         !s->stopping.load() && !s->exit_set.load() ? 1 : 0);
      metrics::set_gauge("hetflow_resident_memory_bytes", "Resident memory of the node process", none,
                         static_cast<double>(kernels::preprocess::current_rss()));
      metrics::set("hetflow_progress_total",
                   "Steps, pushes, collectives, segments and batches this node's actors finished (the watchdog's "
                   "measure of progress)",
                   metrics::kind::counter, none, static_cast<double>(kernels::waits::progress_count()));
      std::vector<std::pair<metrics::labels, double>> open;
      for (auto& w : kernels::waits::snapshot())
        open.push_back({{{"actor", w.actor}, {"on", w.on}, {"for", w.what}}, w.seconds});
      metrics::replace("hetflow_wait_seconds", "How long an actor has been waiting on another, for each open wait",
                       metrics::kind::gauge, open);
      if (s->traffic) publish_actor_traffic(*s);
      if (s->dp) {
        auto d = s->dp->stats();
        using metrics::kind;
        metrics::set("hetflow_data_plane_messages_sent_total", "Messages this node sent over the data plane",
                     kind::counter, none, static_cast<double>(d.messages_sent));
        metrics::set("hetflow_data_plane_bytes_sent_total", "Bytes this node sent over the data plane",
                     kind::counter, none, static_cast<double>(d.bytes_sent));
        metrics::set("hetflow_data_plane_messages_received_total",
                     "Messages this node received over the data plane", kind::counter, none,
                     static_cast<double>(d.messages_received));
        metrics::set("hetflow_data_plane_bytes_received_total", "Bytes this node received over the data plane",
                     kind::counter, none, static_cast<double>(d.bytes_received));
        metrics::set("hetflow_data_plane_refused_messages_total",
                     "Data-plane messages dropped because they lacked the cluster's token (secret_file/secret_env)",
                     kind::counter, none, static_cast<double>(s->rejected_messages.load()));
      }
    };
    auto srv = metrics::http_server::start(me.host, mp + sh->self,
                                           {{"cluster", sh->cluster.name}, {"node", me.name},
                                            {"job", sh->cluster.job.kind}},
                                           collect);
    if (!srv) {
      log_error(srv.error().message() + " (metrics_port)");
      return exit_usage;
    }
    metrics_server = std::move(*srv);
    log_info("metrics at http://" + me.host + ":" + std::to_string(mp + sh->self) + "/metrics");
  }
  // watchdog: when nothing on this node has advanced (kernels/waits.hpp:
  // steps, segments, batches, pushes, collectives) for that long, log who
  // waits on whom, again every period while it lasts. Quiet on a node whose
  // actors report neither progress nor waits (their jobs are not
  // instrumented).
  struct watchdog_state {
    std::mutex mu;
    std::condition_variable cv;
    bool stop = false;
    std::thread thread;
    ~watchdog_state() {
      {
        std::lock_guard<std::mutex> g(mu);
        stop = true;
      }
      cv.notify_all();
      if (thread.joinable()) thread.join();
    }
  } stall_watch;
  if (const double period = sh->cluster.runtime.watchdog_s; period > 0) {
    stall_watch.thread = std::thread([&stall_watch, period, node = sh->self_name] {
      uint64_t seen = kernels::waits::progress_count();
      auto since = clock_type::now(), reported = since;
      std::unique_lock<std::mutex> lk(stall_watch.mu);
      const auto tick = std::chrono::duration_cast<clock_type::duration>(
          std::chrono::duration<double>(std::min(1.0, std::max(0.05, period / 4))));
      while (!stall_watch.cv.wait_for(lk, tick, [&] { return stall_watch.stop; })) {
        const auto now = clock_type::now();
        if (const uint64_t n = kernels::waits::progress_count(); n != seen) {
          seen = n;
          since = reported = now;
          continue;
        }
        const double idle = std::chrono::duration<double>(now - since).count();
        if (idle < period || std::chrono::duration<double>(now - reported).count() < period) continue;
        auto open = kernels::waits::snapshot();
        if (seen == 0 && open.empty()) continue;
        reported = now;
        char head[160];
        std::snprintf(head, sizeof head, "watchdog: no progress on node '%s' for %.1f s (watchdog %.1f s): ",
                      node.c_str(), idle, period);
        log_warn(head + kernels::waits::describe(open));
      }
    });
  }
  {
    std::weak_ptr<node_shared> weak = sh;
    sh->dp->set_receive_handler([weak](dataplane::peer_id from, dataplane::channel_id ch,
                                       wire_buffer msg) {
      auto s = weak.lock();
      if (!s) return;
      caf::actor dest;
      {
        std::lock_guard<std::mutex> g(s->mu);
        auto it = s->local_by_channel.find(ch);
        if (it != s->local_by_channel.end()) dest = it->second;
      }
      std::string from_name =
          from < s->cluster.nodes.size() ? s->cluster.nodes[from].name : std::to_string(from);
      if (s->wire_token != 0) {
        // The data plane's port is open to anyone who reaches it (UCX has
        // no authentication); only the cluster's nodes know the token.
        auto t = schemas::read_wire_token(msg.bytes());
        if (!t || *t != s->wire_token) {
          reject_wire(*s, from_name, ch, msg.size(), t ? "" : t.error().message());
          return;
        }
      }
      if (!dest) {
        log_error("data plane: message for unknown channel " + std::to_string(ch) +
                  " from node '" + from_name + "' dropped");
        return;
      }
      if (ch < s->actors.size()) {
        s->traffic[ch].received_messages.fetch_add(1, std::memory_order_relaxed);
        s->traffic[ch].received_bytes.fetch_add(msg.size(), std::memory_order_relaxed);
        if (kernels::trace::enabled()) {
          const char* name = "wire in (unknown node)";
          if (from < s->cluster.nodes.size()) {
            auto& cached = s->trace_in_names[from];
            name = cached.load(std::memory_order_relaxed);
            if (name == nullptr) {
              name = kernels::trace::intern("wire in from " + from_name);
              cached.store(name, std::memory_order_relaxed);
            }
          }
          wire_trace(*s, ch, name, msg.bytes());
        }
      }
      wire_buffer_ref ref = std::make_shared<const wire_buffer>(std::move(msg));
      if (ch < s->actors.size()) ref = pending_ref(std::move(ref), s->traffic[ch].released);
      caf::anon_send(dest, wire_atom::value, from_name, std::move(ref));
    });
  }
  if (const char* f = std::getenv("HETFLOW_DRILL_DP_ADDRESS_FILE")) {
    // Tests: where a stranger would connect (its address, hex, one line).
    static const char* hex = "0123456789abcdef";
    std::string line;
    for (char c : sh->dp->local_address()) {
      line += hex[(static_cast<unsigned char>(c) >> 4) & 15];
      line += hex[static_cast<unsigned char>(c) & 15];
    }
    const std::string tmp = std::string(f) + ".tmp";
    std::ofstream(tmp) << line << "\n";
    std::rename(tmp.c_str(), f);
  }

  const auto& me = sh->cluster.nodes[sh->self];
  const auto& rt = sh->cluster.runtime;
  caf::actor_system_config cfg;
  cfg.load<caf::io::middleman>();
  // Default: the CPUs this node may use (its `cpus` or hetflow run's
  // pinning), at least 2.
  std::size_t threads = rt.scheduler_threads > 0 ? static_cast<std::size_t>(rt.scheduler_threads)
                                                 : std::max<std::size_t>(2, usable_cpus().size());
  cfg.set("scheduler.max-threads", threads);
  cfg.set("middleman.heartbeat-interval",
          caf::timespan{std::chrono::duration_cast<caf::timespan>(
              std::chrono::duration<double>(rt.heartbeat_interval_s))});
  cfg.set("middleman.connection-timeout",
          caf::timespan{std::chrono::duration_cast<caf::timespan>(
              std::chrono::duration<double>(rt.connection_timeout_s))});
  cfg.set("logger.console", caf::atom("none"));
  // Deserialize incoming BASP messages on the multiplexer thread. CAF's
  // default hands each one to a worker job on the scheduler, whose threads
  // then poll for tens of milliseconds after every control message, taking
  // CPU from the data plane's progress thread (transport_bench, 4 MiB over
  // shared memory on 2 cores: 7.4 -> 9.3 GB/s).
  cfg.set("middleman.workers", std::size_t{0});
  // A preprocess job's work runs on threads of its own (pass 1 in a
  // detached actor, the merger), and its CAF workers only answer claims and
  // pass count and id chunks. CAF 0.17's idle workers poll: 100 tries, then
  // 500 more 50 us apart (25 ms of wake-ups after every message), and only
  // then sleep until woken. On a node with one CPU that polling took ~7% of
  // pass 1 (2 nodes x 1 thread, 1M rows, 8 rounds of bench/preprocess/ab.sh:
  // each node's count 0.34-0.42 s against 0.37-0.43 s, 2026-12-06). Here an
  // idle worker tries 10 times and sleeps until a message wakes it. Other
  // jobs keep CAF's polling: their actors pass messages on the critical path
  // (ring steps, pulls), where a woken worker would add latency.
  if (sh->cluster.job.kind == "preprocess") {
    cfg.set("work-stealing.aggressive-poll-attempts", std::size_t{10});
    cfg.set("work-stealing.moderate-poll-attempts", std::size_t{0});
  }

  int code = exit_ok;
  std::string reason;
  // The shutdown watchdog below; it wakes as soon as the system is down (a
  // polling sleep here added up to 0.1 s to the exit of every node).
  std::mutex shutdown_mu;
  std::condition_variable shutdown_cv;
  bool shutdown_done = false;
  std::thread watchdog;
  {
    caf::actor_system sys{cfg};
    auto services = std::make_shared<services_impl>(sh);
    auto na = sys.spawn(node_actor, sh, std::shared_ptr<node_services>(services));
    sh->node_actor = na;
    signals.set_target(na);

    auto gate = sys.spawn(gate_actor, na);
    auto published = sys.middleman().publish(gate, me.port, me.host.c_str(), true);
    auto teardown = [&](int c, std::string why) {
      code = c;
      reason = std::move(why);
      signals.clear_target();
      caf::anon_send_exit(na, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(gate, caf::exit_reason::user_shutdown);
      {
        std::lock_guard<std::mutex> g(sh->mu);
        for (auto& [n, a] : sh->local_actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
      }
    };
    if (!published) {
      log_error("cannot listen on " + me.host + ":" + std::to_string(me.port) + ": " +
                sys.render(published.error()) +
                " (is another node or program using that port?)");
      teardown(exit_usage, "cannot listen");
    } else {
      log_info("node '" + me.name + "' of cluster '" + sh->cluster.name + "' listening on " +
               me.host + ":" + std::to_string(me.port) + ", data plane " + sh->dp->name());

      // --- join ----------------------------------------------------------------
      auto t0 = clock_type::now();
      auto deadline = t0 + std::chrono::duration_cast<clock_type::duration>(
                               std::chrono::duration<double>(rt.join_timeout_s));
      std::vector<caf::actor> peers(sh->cluster.nodes.size());
      std::set<int> pending;
      for (int i = 0; i < static_cast<int>(sh->cluster.nodes.size()); ++i)
        if (i != sh->self) pending.insert(i);
      // From 5 ms: nodes started together dial peers that are not listening
      // yet, and a first retry 25-75 ms later made a 2-node preprocess job
      // of ~0.5 s start 36-73 ms late.
      auto backoff = std::chrono::milliseconds(5);
      std::mt19937_64 jitter{std::random_device{}() ^ (uint64_t(::getpid()) << 16) ^ uint64_t(sh->self)};
      std::string fatal;
      int fatal_code = exit_peer;
      // How long to wait for a peer's challenge, per peer: from 50 ms,
      // doubled on each miss up to 3 s. Two nodes that dial each other at the
      // same instant can lose the first connection's messages (CAF drops one
      // of two BASP connections opened from both ends), and a fixed 3 s wait
      // then made 2 of 24 two-node preprocess runs start 3 s late.
      std::map<int, std::chrono::milliseconds> challenge_wait;
      while (!pending.empty() && fatal.empty()) {
        if (signals.interrupted()) {
          fatal = "interrupted while joining";
          fatal_code = exit_interrupted;
          break;
        }
        for (auto it = pending.begin(); it != pending.end() && fatal.empty();) {
          const auto& peer = sh->cluster.nodes[*it];
          // remote_actor blocks for the kernel's connect timeout on a peer
          // whose packets are dropped; probe with a bounded connect first.
          auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
          auto probe = std::clamp(left, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
          if (!tcp_reachable(peer.host, peer.port, probe)) {
            ++it;
            continue;
          }
          auto r = sys.middleman().remote_actor(peer.host, peer.port);
          if (!r) {
            ++it;
            continue;
          }
          bool ok = false;
          bool answered = false;  // no answer (yet): the peer may still be starting
          std::string text;
          uint32_t their_index = 0;
          std::string their_dp;
          std::vector<char> their_addr;
          caf::scoped_actor s{sys};
          std::vector<char> their_nonce;
          bool challenged = false;
          auto& wait = challenge_wait.try_emplace(*it, std::chrono::milliseconds(50)).first->second;
          s->request(*r, wait, challenge_atom::value)
              .receive(
                  [&](challenge_atom, std::vector<char>& n) {
                    challenged = true;
                    their_nonce = std::move(n);
                  },
                  [&](caf::error&) {});
          if (!challenged) {  // no answer (yet): retry soon rather than wait out a hello too
            wait = std::min(wait * 2, std::chrono::milliseconds(3000));
            ++it;
            continue;
          }
          const auto our_nonce = random_nonce();
          auto str = [](const std::vector<char>& v) { return std::string_view(v.data(), v.size()); };
          std::vector<char> our_mac;
          if (!sh->secret.empty() && !their_nonce.empty())
            our_mac = auth_mac(sh->secret, "hetflow-hello",
                               {sh->cluster.name, std::to_string(sh->cluster.content_hash), sh->self_name,
                                std::to_string(sh->self), str(their_nonce), str(our_nonce)});
          std::vector<char> their_mac;
          caf::actor their_node;
          s->request(*r, std::chrono::seconds(5), hello_atom::value, sh->cluster.name,
                     sh->cluster.content_hash, sh->self_name, uint32_t(sh->self), sh->dp->name(), our_nonce,
                     our_mac)
              .receive(
                  [&](hello_atom, bool accepted, std::string& t, uint32_t idx, std::string& dpn,
                      std::vector<char>& addr, std::vector<char>& mac, caf::actor& node) {
                    answered = true;
                    ok = accepted;
                    text = std::move(t);
                    their_index = idx;
                    their_dp = std::move(dpn);
                    their_addr = std::move(addr);
                    their_mac = std::move(mac);
                    their_node = std::move(node);
                  },
                  [&](caf::error&) {});
          if (!answered) {  // transient: retry with the others
            ++it;
            continue;
          }
          if (!ok) {
            fatal = "node " + node_label(peer) + " refused this node: " + text;
            break;
          }
          if (!sh->secret.empty() &&
              !mac_equal(their_mac, auth_mac(sh->secret, "hetflow-welcome",
                                             {peer.name, std::to_string(*it), str(our_nonce), str(their_nonce)}))) {
            fatal = "node " + node_label(peer) +
                    " accepted this node but did not prove the cluster secret (a different secret, or not "
                    "node '" + peer.name + "'?)";
            break;
          }
          if (!their_node) {
            fatal = "node " + node_label(peer) + " accepted this node but sent no node actor";
            break;
          }
          if (text != peer.name || their_index != static_cast<uint32_t>(*it)) {
            fatal = "the program at " + peer.host + ":" + std::to_string(peer.port) +
                    " says it is node '" + text + "', expected '" + peer.name + "'";
            break;
          }
          if (auto st = sh->dp->connect(static_cast<dataplane::peer_id>(*it), their_addr); !st.ok()) {
            fatal = "data plane cannot reach node " + node_label(peer) + ": " + st.to_string();
            break;
          }
          if (sh->caf_dp) sh->caf_dp->set_peer_actor(static_cast<dataplane::peer_id>(*it), their_node);
          peers[*it] = their_node;
          log_info("joined node " + node_label(peer));
          it = pending.erase(it);
        }
        if (pending.empty() || !fatal.empty()) break;
        if (clock_type::now() >= deadline) {
          std::string missing;
          for (int i : pending) {
            missing += (missing.empty() ? "" : ", ") + node_label(sh->cluster.nodes[i]);
            std::lock_guard<std::mutex> g(sh->mu);
            if (auto r = sh->refused_hellos.find(sh->cluster.nodes[i].name); r != sh->refused_hellos.end())
              missing += " (it tried to join this node and was refused: " + r->second + ")";
          }
          std::ostringstream os;
          os << "join timeout (" << rt.join_timeout_s << " s): never reached node"
             << (pending.size() > 1 ? "s " : " ") << missing
             << "; is `hetflow node " << opts.topology.string() << " --name "
             << sh->cluster.nodes[*pending.begin()].name << "` running?";
          fatal = os.str();
          break;
        }
        // Jittered: nodes started together must not keep retrying in lock
        // step (two BASP connections opened at the same instant from both
        // ends can both be dropped as duplicates, round after round).
        std::this_thread::sleep_for(std::chrono::duration_cast<std::chrono::milliseconds>(
            backoff * std::uniform_real_distribution<double>(0.5, 1.5)(jitter)));
        backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
      }
      sh->join_s = seconds_since(t0);

      if (!fatal.empty()) {
        log_error(fatal);
        teardown(fatal_code, fatal);
      } else {
        log_info("joined all " + std::to_string(sh->cluster.nodes.size()) + " nodes in " +
                 std::to_string(sh->join_s).substr(0, 5) + " s");
        caf::anon_send(na, joined_atom::value, std::move(peers));
        auto result = sh->exit_promise.get_future().get();
        code = result.first;
        reason = result.second;
        signals.clear_target();
        std::lock_guard<std::mutex> g(sh->mu);
        for (auto& [n, a] : sh->local_actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
      }
    }
    sh->dp->shutdown();
    std::vector<caf::actor_addr> locals;  // weak: they must not keep the actors alive
    {
      std::lock_guard<std::mutex> g(sh->mu);
      for (auto& [n, a] : sh->local_actors) locals.push_back(caf::actor_cast<caf::actor_addr>(a));
      sh->local_actors.clear();
      sh->local_by_channel.clear();
      sh->directory.clear();
    }
    sh->node_actor = caf::actor{};
    // Let the last messages of the job's end (stop, down and proxy messages
    // between the nodes, which hold references to the actors that sent them
    // or will receive them) land while the middleman and the scheduler still
    // run: the actor system's shutdown waits for every detached actor to be
    // destroyed, and a reference held by a message that never lands keeps
    // one alive for good (the watchdog below). Without this wait that
    // happened in 4 of 10 two-node preprocess runs with the UCX data plane
    // (on the node that is not the head); a fixed 50 ms pause used to cover
    // only the CAF data plane. With this wait they were gone after 0-9 ms
    // (UCX) and 0-17 ms (CAF). Bounded at 50 ms: an actor with a periodic
    // tick pending (ps shards, the RALP server, ring members: 250 ms or
    // more) stays referenced until it fires, which the system's shutdown
    // handles, and waiting it out cost 140-230 ms at the end of 2-node ps,
    // dp and ralp jobs.
    if (sh->cluster.nodes.size() > 1) {
      const auto t0 = clock_type::now();
      const auto deadline = t0 + std::chrono::milliseconds(50);
      // Read the count, never take a reference: the last one dropped here
      // would destroy the actor on this thread, outside the watchdog.
      auto alive = [&] {
        for (auto& w : locals)
          if (auto* cb = w.get(); cb != nullptr && cb->strong_refs.load(std::memory_order_acquire) != 0) return true;
        return false;
      };
      while (alive() && clock_type::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      log_debug("the local actors were " + std::string(alive() ? "still referenced" : "gone") + " after " +
                std::to_string(seconds_since(t0)).substr(0, 5) + " s");
    }
    write_reports(opts, *sh, code, reason);
    write_trace(opts, code, reason);
    if (metrics_server) metrics_server->stop();
    // The actor system's destructor (end of this block) waits for every actor
    // and for the thread of every detached actor, which ends only when the
    // actor object is destroyed. The job's outcome is final and the reports
    // are written by now, so a reference that keeps an actor alive must not
    // turn into a hang or change the exit status.
    // A detached actor still referenced here blocks the actor system's
    // shutdown (private_thread::await_self_destroyed, after the middleman
    // and the scheduler have stopped), and that reference then never goes
    // away. Seen in 4 of 10 two-node preprocess runs with UCX (11-27) and
    // 9 of 40 with the CAF data plane (11-25) before the wait for the local
    // actors to be gone (above): a message still in flight at the job's end
    // held one. That wait is bounded, so this watchdog stays for whatever
    // holds a reference longer; the system is otherwise down within
    // milliseconds, so the grace is 1 s.
    watchdog = std::thread([&shutdown_mu, &shutdown_cv, &shutdown_done, code] {
      std::unique_lock<std::mutex> lk(shutdown_mu);
      if (!shutdown_cv.wait_for(lk, std::chrono::seconds(1), [&] { return shutdown_done; })) {
        log_warn("the actor system did not shut down within 1 s (an actor is still referenced); "
                 "exiting with the job's status " + std::to_string(code));
        std::fflush(nullptr);
        std::_Exit(code);
      }
    });
  }
  {
    std::lock_guard<std::mutex> g(shutdown_mu);
    shutdown_done = true;
  }
  shutdown_cv.notify_all();
  if (watchdog.joinable()) watchdog.join();
  return code;
}

}  // namespace hetflow::actors
