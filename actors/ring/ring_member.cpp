// ring_member: the actor. Algorithm and schedule: ring_schedule.hpp.
//
// Wire format. One chunk = one wire message (send_wire to the right
// neighbour):
//   envelope kind = kind_ring_chunk, seq = collective id, sender = the
//   member that built it (for a forwarded all-gather chunk: the segment's
//   owner), tensor 0 = the chunk's elements (f32/i32/i64 typed; f64 as u8
//   bytes), payload = chunk_header (below: phase, segment, chunk index and
//   the collective's shape, so a member that was called differently is
//   caught at its first chunk).
//
// Collective ids count the buckets every member runs, in order; a chunk of
// a later collective (a fast neighbour already started it) waits in `early`
// until this member gets there.
//
// Per received chunk (g = segment, c = chunk, step from the schedule):
//   reduce-scatter, step < N-2:  out = local + recv   -> right (RS, g, c)
//   reduce-scatter, step = N-2:  local = out = op(local + recv) -> right (AG, g, c)
//   all-gather:                  local = recv; step < N-2: forward the
//                                received buffer itself (no copy) -> right
// Reduction works on the receive buffer in place and writes straight into
// the next message's tensor (message_builder), so a chunk is read once and
// written once (twice at the final step). While this thread reduces chunk c
// the data plane's thread receives chunk c+1.
//
// Step 0 sends this member's own segment. `window` bounds how many of those
// chunks are out before the left neighbour's step-0 chunks arrive (each one
// releases one more; 0 = all at once): a self-clock that keeps several
// rendezvous in flight without flooding the receiver.
//
// Failure handling. A dead node stops the job through the node runtime
// (exit 3, naming it, ~0.2 s); a dead member actor stops it as "actor X
// died". A stall is caught here: while a collective waits, a tick checks
// progress; after `timeout` without any chunk the member probes its left
// neighbour (a CAF request with a 1 s deadline) and decides who to blame:
//   no answer                -> the left member is stalled (named)
//   left has not started it  -> the left member's caller never submitted it
//   left already finished it -> chunks from the left were lost
//   left waits as well       -> someone further up; this member gives the
//                               upstream member's report one more `timeout`,
//                               then fails naming the chain.
// Failing = every queued request completes with the error, report_done
// (false, why) makes the head stop the job on every node with that message.
//
// Shared memory (key `shm`, "auto"): when every member is on one host
// (flat), or for the members of one host (hierarchical), the group's first
// member creates a shm_group segment and offers its name and a nonce to
// the others in a phase_shm message (an empty name: it could not make one,
// everyone sums by messages this generation). Each collective then runs on
// the member's shm_worker thread; the result comes back as a ringshm
// message. The worker names a member that stalls (the tick only watches for
// a late offer); every path that drops a collective stops the worker first
// (complete_all). Hierarchical: stage 1 the host's sum (worker), stage 2
// the leaders' ring (chunks), stage 3 the leader's result back (worker).
//
// Failover (key `failover`, set by the dp job when [job] dp_failover): a
// member whose node is lost (node_services::node_lost; the job survives
// losing that node, registry.hpp's expendable_nodes) is not a failure. Each
// survivor notices on its next tick (every timeout / 4 while a collective
// runs), when it starts a collective, or when its caller asks for the view
// (current_view), and then: completes what was in flight or queued with
// peer_down, drops the lost members from its list, starts generation g + 1
// (collective ids are g << 48 | n) and configures the ring again. Chunks of
// an older generation are dropped; chunks of a newer one (a survivor that
// noticed first) wait in `early` like any chunk from ahead. A request made
// for an older generation fails with peer_down: the caller learns of the
// new ring from current_view and submits again, all survivors alike.
#include "actors/ring/ring_member.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "actors/buffer_pool.hpp"
#include "actors/builtin/job_actor.hpp"
#include "actors/cluster_auth.hpp"
#include "actors/json.hpp"
#include "actors/log.hpp"
#include "actors/ring/fused_buffer.hpp"
#include "actors/ring/shm_group.hpp"
#include "kernels/trace.hpp"
#include "kernels/waits.hpp"

namespace hetflow::actors::ring::detail {

struct collective_request {
  std::vector<ring_tensor> tensors;
  uint32_t generation = any_generation;
  reduce_op op = reduce_op::sum;
  completion done;
  bool finished = false;

  void complete(status s) {
    if (finished) return;
    finished = true;
    if (done) done(std::move(s));
  }
  // A request dropped unanswered (the member quit, the message died in a
  // mailbox) still completes: nobody waits forever.
  ~collective_request() {
    complete(make_error(errc::cancelled,
                        "the ring member stopped before this all-reduce completed"));
  }
};

using request_ref = std::shared_ptr<collective_request>;

// current_view: answered once, also when the member is gone (destructor).
struct view_request {
  std::promise<expected<ring_view>> promise;
  bool answered = false;
  void answer(expected<ring_view> v) {
    if (answered) return;
    answered = true;
    promise.set_value(std::move(v));
  }
  ~view_request() { answer(make_error(errc::cancelled, "the ring member stopped before it answered")); }
};
using view_ref = std::shared_ptr<view_request>;

}  // namespace hetflow::actors::ring::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(hetflow::actors::ring::detail::request_ref)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(hetflow::actors::ring::detail::view_ref)

namespace hetflow::actors::ring {
namespace {

using namespace hetflow::actors::builtin;
using detail::request_ref;
using detail::view_ref;
using clock_type = std::chrono::steady_clock;

using ringreq_atom = caf::atom_constant<caf::atom("ringreq")>;
using ringclose_atom = caf::atom_constant<caf::atom("ringclose")>;
using ringprobe_atom = caf::atom_constant<caf::atom("ringprobe")>;
using ringtick_atom = caf::atom_constant<caf::atom("ringtick")>;
using ringview_atom = caf::atom_constant<caf::atom("ringview")>;
using ringshm_atom = caf::atom_constant<caf::atom("ringshm")>;

// Collective ids: generation << 48 | count within the generation.
constexpr unsigned gen_shift = 48;
constexpr uint64_t in_gen_mask = (uint64_t{1} << gen_shift) - 1;

constexpr uint32_t kind_ring_chunk = 0x52494e47;  // "RING"
constexpr uint32_t chunk_magic = 0x6b6e6863;      // "chnk"
constexpr uint8_t chunk_version = 1;
constexpr uint8_t phase_rs = 0;
constexpr uint8_t phase_ag = 1;
// Hierarchical mode: a member's whole vector to its host's leader (segment =
// the sender's index among the leader's locals), and the result back.
constexpr uint8_t phase_lr = 2;
constexpr uint8_t phase_lb = 3;
// Shared memory (every member on one host): the first member's offer of the
// segment to the others (segment = generation, chunk = the nonce, tensor 0 =
// the segment's name as bytes). No chunks of the vectors travel.
constexpr uint8_t phase_shm = 4;

// The payload of a chunk message; little-endian, memcpy'd.
struct chunk_header {
  uint32_t magic = chunk_magic;
  uint8_t version = chunk_version;
  uint8_t phase = phase_rs;
  uint8_t type = 0;  // ring_dtype
  uint8_t op = 0;    // reduce_op
  uint32_t members = 0;
  uint32_t segment = 0;
  uint64_t chunk = 0;
  uint64_t collective = 0;
  uint64_t total_elems = 0;
  uint64_t chunk_elems = 0;
};
static_assert(sizeof(chunk_header) == 48);

dtype wire_dtype(ring_dtype t) {
  switch (t) {
    case ring_dtype::f32: return dtype::f32;
    case ring_dtype::i32: return dtype::i32;
    case ring_dtype::i64: return dtype::i64;
    case ring_dtype::f64: return dtype::u8;  // no f64 in the codec: raw bytes
  }
  return dtype::u8;
}

struct ring_config {
  std::vector<std::string> members;
  uint64_t chunk_bytes = 1 << 20;
  uint64_t bucket_bytes = 16 << 20;
  double timeout_s = 2.0;
  double first_timeout_s = 60.0;
  uint64_t window = 0;
  std::string hierarchical = "auto";  // auto | off
  std::string shm = "auto";           // auto | off
  uint64_t shm_slot_bytes = 256 << 10;
  bool failover = false;              // lost members are dropped, not a failure
  std::string drill = "none";
  int64_t drill_after = 0;
};

struct active_collective {
  uint64_t id = 0;
  ring_dtype type = ring_dtype::f32;
  reduce_op op = reduce_op::sum;
  uint64_t len = 0;
  uint64_t chunk_elems = 1;
  fused_buffer buf;
  uint64_t received = 0;
  uint64_t expected = 0;
  std::vector<uint64_t> chunk_base;  // per segment: index of its first chunk
  std::vector<uint8_t> seen;         // [phase][chunk index]
  uint64_t own_chunks = 0;           // step 0: chunks of this member's segment
  uint64_t own_sent = 0;
  uint64_t left_step0 = 0;           // step 0 chunks expected from the left
  uint64_t left_step0_seen = 0;
  // Shared memory: run by the worker thread (shm_waiting: the first
  // member's offer of the segment has not come yet).
  bool shm = false;
  bool shm_waiting = false;
  // Hierarchical rings with shared memory on the host: 1 the host's sum
  // (worker), 2 the leaders' ring (messages), 3 the leader's result back to
  // its host (worker). A local runs 1 and 3 as one worker job.
  int shm_stage = 0;
  // Hierarchical mode.
  uint64_t whole_chunks = 0;         // chunks of the whole vector
  uint64_t lr_expected = 0, lr_received = 0;  // leader: from its locals
  std::vector<uint8_t> seen_whole;   // leader: [local][chunk]; local: [chunk]
  bool ring_started = false;         // leader: the inter-host ring began
  std::vector<std::pair<std::string, wire_buffer_ref>> held;  // ring chunks before that
  clock_type::time_point started{};
  clock_type::time_point last_progress{};
  int upstream_waits = 0;            // probes answered "waiting as well"
  // Failover: a send that failed, perhaps because its target's node is
  // going down; the tick fails the collective with it if no loss explains
  // it within a second.
  std::string send_error;
  clock_type::time_point send_error_at{};
  // Trace (kernels/trace.hpp; 0 when not tracing): when the collective
  // started and when this member last finished handling a chunk.
  int64_t started_us = 0;
  int64_t progress_us = 0;
  // The watchdog's view (kernels/waits.hpp): whom this member waits on while
  // the collective runs; ends with it.
  std::optional<kernels::waits::scope> wait;
};

// Runs shared-memory collectives off the actor's thread, one at a time, so
// the member's mailbox stays free (probes, views, stop) while one runs. The
// result comes back to the actor as a ringshm message; a collective the
// actor gave up on (abort_and_wait: failover, a failure, the stop) ends
// within a few milliseconds and reports nothing.
class shm_worker {
public:
  struct job {
    shm_group* group = nullptr;
    fused_buffer* buf = nullptr;
    reduce_op op = reduce_op::sum;
    uint64_t id = 0;
    double timeout_s = 2.0;
    bool check_in = false;
    bool reduce = true;            // all_reduce(op)
    bool receive = false;          // then (or only) broadcast from member 0
    double first_timeout_s = 60;   // the broadcast's first round
    shm_group::round_hook hook;
  };
  using done_fn = std::function<void(uint64_t id, const status&)>;

  explicit shm_worker(done_fn done) : done_(std::move(done)), thread_([this] { run(); }) {}
  ~shm_worker() {
    {
      std::lock_guard lk(m_);
      stop_ = true;
      abort_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // False (and nothing submitted) while a job runs: one at a time.
  bool submit(job j) {
    {
      std::lock_guard lk(m_);
      if (busy_) return false;
      job_ = std::move(j);
      busy_ = true;
    }
    cv_.notify_all();
    return true;
  }
  // Set while the actor gives up the collective in flight (abort_and_wait).
  const std::atomic<bool>& aborting() const noexcept { return abort_; }
  // Stops the collective in flight (if any) and waits until the worker has
  // let go of its buffers.
  void abort_and_wait() {
    std::unique_lock lk(m_);
    if (!busy_) return;
    abort_ = true;
    cv_.wait(lk, [&] { return !busy_; });
    abort_ = false;
  }

private:
  void run() {
    for (;;) {
      job j;
      {
        std::unique_lock lk(m_);
        cv_.wait(lk, [&] { return stop_ || job_.has_value(); });
        if (stop_) return;
        j = std::move(*job_);
        job_.reset();
      }
      status s;
      if (j.check_in) s = j.group->check_in(j.timeout_s, abort_);
      if (s.ok() && j.reduce) s = j.group->all_reduce(*j.buf, j.op, j.id, j.timeout_s, abort_, j.hook);
      if (s.ok() && j.receive)
        s = j.group->broadcast(*j.buf, 0, j.id, j.timeout_s, j.first_timeout_s, abort_, j.hook);
      bool aborted;
      {
        std::lock_guard lk(m_);
        aborted = abort_;
        busy_ = false;
      }
      cv_.notify_all();
      if (!aborted) done_(j.id, s);
    }
  }

  done_fn done_;
  std::mutex m_;
  std::condition_variable cv_;
  std::optional<job> job_;
  bool busy_ = false, stop_ = false;
  std::atomic<bool> abort_{false};
  std::thread thread_;  // last: starts after the members above exist
};

struct member_state : job_actor_state {
  ring_config cfg;
  // The ring this member runs: every member (flat), or the hosts' leaders
  // (hierarchical; a non-leader runs none and talks to its leader only).
  uint32_t rank = 0;
  uint32_t n = 1;
  std::string left, right;
  uint32_t total = 1;                // members of the job's ring (all hosts)
  bool hier = false;
  bool leader = true;
  std::string leader_name;           // hierarchical, non-leader: its leader
  uint32_t local_index = 0;          // hierarchical, non-leader: among the leader's locals
  std::vector<std::string> locals;   // hierarchical, leader: the others on its host
  std::map<std::string, std::string> node_host;  // node -> host (topology)
  std::string probe_target;          // whom the stall probe in flight asks
  std::deque<request_ref> queue;
  request_ref current;
  // Failover: the generation (re-formings so far) and who was dropped.
  uint32_t gen = 0;
  std::vector<std::string> lost;
  uint64_t stale_chunks = 0;         // of an older generation, dropped
  std::vector<bucket> buckets;
  std::size_t next_bucket = 0;
  uint64_t next_id = 0;
  std::optional<active_collective> active;
  std::map<uint64_t, std::vector<std::pair<std::string, wire_buffer_ref>>> early;
  // Outgoing chunk messages: recycled once the data plane has sent them, so
  // chunks land in memory that is already faulted in (and, from 1 MiB, on
  // huge pages) instead of fresh pages per chunk.
  std::shared_ptr<buffer_pool> pool;
  schemas::message_builder::allocator allocate;
  bool probing = false;
  bool tick_pending = false;
  bool closed = false;
  bool finished = false;
  int64_t chunks_handled = 0;
  // statistics
  uint64_t collectives = 0;
  uint64_t elems_reduced = 0;
  double busy_s = 0;
  kernels::trace::track_id tk = 0;  // this member's trace track
  // Shared memory (cfg.shm "auto" and every member of the ring on this
  // member's host): the segment of generation shm_gen, the first member's
  // offer of it when it came before this member needed it, and the worker
  // thread that runs the collectives. The worker is declared last so that
  // it stops before the collective whose buffer it uses is destroyed.
  bool shm_mode = false;
  // Hierarchical: the host's members (leader first) share a segment instead
  // of sending their vectors to the leader (cfg.shm "auto", >= 2 of them).
  bool host_shm = false;
  std::vector<std::string> host_members;
  std::unique_ptr<shm_group> shm;
  uint32_t shm_gen = UINT32_MAX;
  bool shm_checked_in = false;
  struct shm_offer {
    uint32_t gen = 0;
    uint64_t nonce = 0;
    std::string name;
  };
  std::optional<shm_offer> offer;
  std::unique_ptr<shm_worker> worker;
  static inline const char* name = "hetflow.ring_member";
};

using member_actor = caf::stateful_actor<member_state>;

std::string who(const member_state& st, const std::string& member) {
  std::string node = st.svc->node_of(member);
  return "ring member '" + member + "'" + (node.empty() ? "" : " (node '" + node + "')");
}

void try_start(member_actor* self);
bool check_lost(member_actor* self);
double stall_limit(const member_state& st, uint64_t id);
void configure_ring(member_state& st, std::size_t me);

// Completes the request in progress and every queued one with `err`, and
// drops the collective in flight.
void complete_all(member_state& st, const status& err) {
  if (st.worker) st.worker->abort_and_wait();  // lets go of the caller's tensors first
  if (st.current) st.current->complete(err);
  for (auto& r : st.queue) r->complete(err);
  st.current.reset();
  st.queue.clear();
  st.active.reset();
}

void fail(member_actor* self, const std::string& why) {
  auto& st = self->state;
  if (st.finished) return;
  st.finished = true;
  std::string msg = st.active ? "collective " + std::to_string(st.active->id) + ": " + why : why;
  log_error("ring member '" + st.me + "': " + msg);
  complete_all(st, make_error(errc::peer_down, msg));
  st.early.clear();
  st.svc->report_done(st.me, false, msg, {});
  self->quit();
}

void finish_ok(member_actor* self) {
  auto& st = self->state;
  if (st.finished) return;
  st.finished = true;
  json_writer w;
  w.begin_object().field("members", static_cast<int64_t>(st.total)).field("rank", static_cast<int64_t>(st.rank));
  w.field("hierarchical", st.hier).field("leader", st.leader).field("shm", st.shm_mode || st.host_shm);
  w.field("collectives", st.collectives).field("elements", st.elems_reduced);
  w.field("generation", int64_t{st.gen}).field("stale_chunks", st.stale_chunks);
  w.key("lost").begin_array();
  for (const auto& l : st.lost) w.value(l);
  w.end_array();
  w.field("busy_s", st.busy_s).end_object();
  const std::string role =
      !st.hier    ? "rank " + std::to_string(st.rank) + " of " + std::to_string(st.n)
      : st.leader ? "leader " + std::to_string(st.rank) + " of " + std::to_string(st.n) + " hosts, " +
                        std::to_string(st.locals.size()) + " local members"
                  : "local member of " + st.leader_name;
  st.svc->report_done(st.me, true,
                      std::to_string(st.collectives) + " collectives as " + role +
                          (st.shm_mode || st.host_shm ? " (shared memory)" : ""),
                      w.str());
  self->quit();
}

// Builds one chunk message; `fill` writes the elements into the tensor.
template <class Fill>
wire_buffer_ref build_chunk(const member_state& st, const active_collective& a, uint8_t phase,
                            uint32_t segment, uint64_t chunk, elem_range r, Fill&& fill,
                            const std::string* target = nullptr) {
  std::size_t es = element_size(a.type);
  schemas::tensor_meta meta{wire_dtype(a.type),
                            {static_cast<int64_t>(a.type == ring_dtype::f64 ? r.size() * es
                                                                             : r.size())}};
  schemas::envelope_header h{kind_ring_chunk, a.id, st.me, target != nullptr ? *target : st.right};
  schemas::message_builder b(h, std::span<const schemas::tensor_meta>(&meta, 1), sizeof(chunk_header),
                             st.allocate);
  chunk_header ch;
  ch.phase = phase;
  ch.type = static_cast<uint8_t>(a.type);
  ch.op = static_cast<uint8_t>(a.op);
  ch.members = st.total;
  ch.segment = segment;
  ch.chunk = chunk;
  ch.collective = a.id;
  ch.total_elems = a.len;
  ch.chunk_elems = a.chunk_elems;
  std::memcpy(b.payload().data(), &ch, sizeof ch);
  fill(b.tensor_data(0).data());
  return std::make_shared<const wire_buffer>(std::move(b).finish());
}

// False when the collective cannot go on from here (the caller returns at
// once: the collective may be gone).
bool send_to(member_actor* self, const std::string& target, wire_buffer_ref msg) {
  auto& st = self->state;
  if (auto s = st.svc->send_wire(target, std::move(msg)); !s.ok()) {
    std::string why = "cannot send to " + who(st, target) + ": " + s.to_string();
    if (st.cfg.failover && st.active) {
      // The target's node may be going down: the ring re-forms when the
      // node runtime says so (now, or at a tick within a second).
      if (check_lost(self)) return false;
      if (st.active->send_error.empty()) {
        st.active->send_error = std::move(why);
        st.active->send_error_at = clock_type::now();
      }
      return false;
    }
    fail(self, why);
    return false;
  }
  return true;
}

bool send_right(member_actor* self, wire_buffer_ref msg) { return send_to(self, self->state.right, std::move(msg)); }

// Step 0 of reduce-scatter: this member's own segment, up to the window.
void send_own_chunks(member_actor* self) {
  auto& st = self->state;
  auto& a = *st.active;
  elem_range seg = segment_range(a.len, st.n, st.rank);
  uint64_t limit = a.own_chunks;
  if (st.cfg.window > 0 && a.left_step0_seen < a.left_step0)
    limit = std::min(limit, st.cfg.window + a.left_step0_seen);
  while (a.own_sent < limit) {
    uint64_t c = a.own_sent++;
    elem_range r = chunk_range(seg, a.chunk_elems, c);
    auto msg = build_chunk(st, a, phase_rs, st.rank, c, r,
                           [&](std::byte* dst) { a.buf.copy_out(r, dst); });
    if (!send_right(self, std::move(msg))) return;
  }
}

void finish_collective(member_actor* self) {
  auto& st = self->state;
  auto& a = *st.active;
  st.busy_s += std::chrono::duration<double>(clock_type::now() - a.started).count();
  kernels::waits::progress();
  if (kernels::trace::enabled() && a.started_us > 0)
    kernels::trace::complete(st.tk, "allreduce", a.started_us, kernels::trace::now_us() - a.started_us, "bytes",
                             int64_t(a.len * element_size(a.type)));
  st.elems_reduced += a.len;
  ++st.collectives;
  st.active.reset();
  try_start(self);
}

void handle_chunk(member_actor* self, const std::string& from_node, const wire_buffer_ref& buf);
void dispatch_shm(member_actor* self);
void start_by_messages(member_actor* self);

// Everything this member expects has arrived: a hierarchical leader sends
// the result to its locals first.
void maybe_finish(member_actor* self) {
  auto& st = self->state;
  if (!st.active || st.finished) return;
  auto& a = *st.active;
  if (a.received != a.expected) return;
  if (st.host_shm && st.leader) {
    // The ring's result back to the host's members through the segment,
    // once (maybe_finish runs again after the held chunks are replayed).
    if (a.shm_stage != 2) return;
    a.shm_stage = 3;
    a.shm = true;
    return dispatch_shm(self);
  }
  if (st.hier && st.leader && !st.locals.empty()) {
    const elem_range whole{0, a.len};
    for (uint64_t c = 0; c < a.whole_chunks; ++c) {
      elem_range r = chunk_range(whole, a.chunk_elems, c);
      auto msg = build_chunk(st, a, phase_lb, 0, c, r, [&](std::byte* dst) { a.buf.copy_out(r, dst); },
                             &st.locals.front());
      for (const auto& l : st.locals)
        if (!send_to(self, l, msg)) return;  // one message, shared by every local
    }
  }
  finish_collective(self);
}

// The ring part of a collective (all of it in flat mode; among the leaders
// in hierarchical mode, once the locals' vectors are summed in). Returns
// the chunks this member will receive in it.
uint64_t setup_ring(member_state& st, active_collective& a) {
  if (st.n < 2) return 0;
  uint64_t total = 0;
  a.chunk_base.resize(st.n);
  for (uint32_t g = 0; g < st.n; ++g) {
    a.chunk_base[g] = total;
    total += chunk_count(segment_range(a.len, st.n, g), a.chunk_elems);
  }
  a.seen.assign(2 * total, 0);
  a.own_chunks = chunk_count(segment_range(a.len, st.n, st.rank), a.chunk_elems);
  a.left_step0 = chunk_count(segment_range(a.len, st.n, rs_recv_segment(st.rank, st.n, 0)),
                             a.chunk_elems);
  return expected_receives(a.len, st.n, st.rank, a.chunk_elems);
}

// Hierarchical leader: the locals' vectors are in; run the ring (or finish
// at once when this is the only host) and replay ring chunks held so far.
void start_ring_part(member_actor* self) {
  auto& st = self->state;
  auto& a = *st.active;
  a.ring_started = true;
  uint64_t id = a.id;
  if (st.n >= 2) send_own_chunks(self);
  if (!st.active || st.active->id != id) return;
  auto held = std::move(a.held);
  a.held.clear();
  for (auto& [node, m] : held) {
    if (!st.active || st.active->id != id) return;
    handle_chunk(self, node, m);
  }
  if (st.active && st.active->id == id) maybe_finish(self);
}

// At most one tick is pending: it checks whatever collective is active
// when it fires (one timer per collective cost the actor clock's thread 15%
// of a core at thousands of small collectives a second).
void schedule_tick(member_actor* self) {
  auto& st = self->state;
  if (st.tick_pending) return;
  st.tick_pending = true;
  auto period = std::chrono::duration<double>(std::max(0.05, st.cfg.timeout_s / 4));
  self->delayed_send(self, std::chrono::duration_cast<std::chrono::milliseconds>(period), ringtick_atom::value);
}

// ---- shared memory ----------------------------------------------------------

// The first member's offer of this generation's segment to member `target`.
// An empty name: no segment this generation, sum by messages.
wire_buffer_ref build_offer(const member_state& st, const std::string& target, uint64_t nonce,
                            const std::string& name) {
  schemas::tensor_meta meta{dtype::u8, {static_cast<int64_t>(name.size())}};
  const uint64_t id = uint64_t(st.gen) << gen_shift;
  schemas::envelope_header h{kind_ring_chunk, id, st.me, target};
  schemas::message_builder b(h, std::span<const schemas::tensor_meta>(&meta, 1), sizeof(chunk_header), st.allocate);
  chunk_header ch;
  ch.phase = phase_shm;
  ch.members = st.total;
  ch.segment = st.gen;
  ch.chunk = nonce;
  ch.collective = id;
  std::memcpy(b.payload().data(), &ch, sizeof ch);
  if (!name.empty()) std::memcpy(b.tensor_data(0).data(), name.data(), name.size());
  return std::make_shared<const wire_buffer>(std::move(b).finish());
}

// A stall drill: 60 s of nothing, or until the node stops or `abort`.
void drill_stall(const node_services& svc, const std::atomic<bool>* abort = nullptr) {
  auto until = clock_type::now() + std::chrono::seconds(60);
  while (!svc.stopping() && !(abort && abort->load()) && clock_type::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// The fault drills in shared-memory mode count rounds (a round is one
// slot's worth of every member's vector) instead of chunks. Runs on the
// worker thread: nothing of the actor's state but copies.
shm_group::round_hook shm_drill_hook(member_state& st) {
  if (st.cfg.drill == "none") return {};
  const std::atomic<bool>* aborting = &st.worker->aborting();  // the worker outlives its jobs
  return [drill = st.cfg.drill, after = st.cfg.drill_after, me = st.me, svc = st.svc, aborting](uint64_t round) {
    if (static_cast<int64_t>(round) != after) return true;
    if (drill == "die") {
      log_warn("ring member '" + me + "': fault drill: dying after " + std::to_string(round) +
               " shared-memory rounds");
      return false;
    }
    log_warn("ring member '" + me + "': fault drill: stalling (shared-memory rounds stop) after " +
             std::to_string(round) + " rounds");
    // Like the message drill, then on (unless the collective was given up
    // meanwhile).
    drill_stall(*svc, aborting);
    return !aborting->load() && !svc->stopping();
  };
}

// Hands the active collective to the worker thread.
void dispatch_shm(member_actor* self) {
  auto& st = self->state;
  auto& a = *st.active;
  a.shm_waiting = false;
  if (!st.worker) {
    caf::actor_addr addr = self->address();
    st.worker = std::make_unique<shm_worker>([addr](uint64_t id, const status& s) {
      if (auto h = caf::actor_cast<caf::actor>(addr))
        caf::anon_send(h, ringshm_atom::value, id, static_cast<int32_t>(s.code()), s.message());
    });
  }
  shm_worker::job j;
  j.group = st.shm.get();
  j.buf = &a.buf;
  j.op = a.op;
  j.id = a.id;
  j.timeout_s = stall_limit(st, a.id);
  j.first_timeout_s = std::max(st.cfg.timeout_s, st.cfg.first_timeout_s);
  j.check_in = !st.shm_checked_in;
  j.hook = shm_drill_hook(st);
  if (st.host_shm) {
    // The host's sum (the ring divides for average), then the leader's
    // result back: a local waits for it in the same job.
    j.op = reduce_op::sum;
    j.reduce = !st.leader || a.shm_stage == 1;
    j.receive = !st.leader || a.shm_stage == 3;  // the leader is the broadcast's root
  }
  if (!st.worker->submit(std::move(j)))
    fail(self, "internal: a shared-memory collective was handed over while another one ran");
}

// This generation's segment: created by the first member (which offers it
// to the others), opened by the others from the offer. False when the
// member has failed or must wait for the offer.
bool ensure_shm(member_actor* self) {
  auto& st = self->state;
  if (st.shm && st.shm_gen == st.gen) return true;
  st.shm.reset();
  st.shm_checked_in = false;
  const auto& m = st.host_shm ? st.host_members : st.cfg.members;
  const auto rank = static_cast<uint32_t>(std::find(m.begin(), m.end(), st.me) - m.begin());
  const auto members = static_cast<uint32_t>(m.size());
  std::vector<std::string> names;
  for (const auto& name : m) names.push_back(who(st, name));
  if (rank == 0) {
    uint64_t nonce = 0;
    const std::vector<char> bytes = random_nonce(sizeof nonce);
    std::memcpy(&nonce, bytes.data(), sizeof nonce);
    shm_group::options opt;
    opt.slot_bytes = st.cfg.shm_slot_bytes;
    auto g = shm_group::create(members, nonce, opt);
    if (!g) {
      // No segment (no /dev/shm, or too small): this generation sums by
      // messages; an empty offer tells the others so.
      log_warn("ring member '" + st.me + "': no shared-memory segment (" + g.error().to_string() +
               "); the ring sums by messages instead (set shm = \"off\" to skip the attempt)");
      st.shm_mode = st.host_shm = false;
      for (const auto& other : m)
        if (other != st.me && !send_to(self, other, build_offer(st, other, 0, ""))) return false;
      if (st.active) start_by_messages(self);
      return false;
    }
    st.shm = std::move(*g);
    st.shm->set_names(std::move(names));
    st.shm->set_waiter(st.me, st.tk);
    st.shm_gen = st.gen;
    for (const auto& other : m)
      if (other != st.me && !send_to(self, other, build_offer(st, other, nonce, st.shm->name()))) return false;
    return true;
  }
  if (!st.offer || st.offer->gen != st.gen) return false;
  if (st.offer->name.empty()) {  // the creator could not make one: this generation by messages
    st.offer.reset();
    log_warn("ring member '" + st.me + "': the ring's first member has no shared-memory segment; the ring "
             "sums by messages");
    st.shm_mode = st.host_shm = false;
    if (st.active) start_by_messages(self);
    return false;
  }
  auto g = shm_group::open(st.offer->name, members, rank, st.offer->nonce);
  st.offer.reset();
  if (!g) {
    fail(self, "shared-memory ring: " + g.error().to_string());
    return false;
  }
  st.shm = std::move(*g);
  st.shm->set_names(std::move(names));
  st.shm->set_waiter(st.me, st.tk);
  st.shm_gen = st.gen;
  return true;
}

void start_shm(member_actor* self) {
  auto& st = self->state;
  const uint64_t id = st.active->id;
  if (!ensure_shm(self)) {
    if (st.finished || !st.active || st.active->id != id || !st.active->shm) return;  // failed, or by messages now
    st.active->shm_waiting = true;  // the offer comes with a message
    return;
  }
  dispatch_shm(self);
}

// The first member's offer (a wire message from it).
void on_offer(member_actor* self, const chunk_header& ch, const std::string& from,
              std::span<const std::byte> name_bytes) {
  auto& st = self->state;
  if (ch.segment < st.gen) return;  // an older generation's
  // A newer generation's: its sender noticed a lost member first. Catch
  // up (or keep the offer until this member does).
  if (ch.segment > st.gen && check_lost(self)) try_start(self);
  if (st.finished) return;
  const bool grouped = st.shm_mode || (st.host_shm && !st.leader);
  if (ch.segment == st.gen && (!grouped || (st.shm_mode && st.rank == 0) || ch.members != st.total))
    return fail(self, "shared-memory offer from " + from + " does not belong here (ring settings differ? "
                      "every member needs the same shm setting)");
  if (st.offer && st.offer->gen > ch.segment) return;  // a newer generation's (from a new creator) came first
  st.offer = member_state::shm_offer{ch.segment, ch.chunk,
                                     std::string(reinterpret_cast<const char*>(name_bytes.data()), name_bytes.size())};
  if (st.active && st.active->shm_waiting && ch.segment == st.gen) {
    const uint64_t id = st.active->id;
    if (!ensure_shm(self)) return;
    if (st.active && st.active->id == id) dispatch_shm(self);
  }
}

// The active collective by chunk messages through the data plane (a ring
// across hosts, hierarchical mode's host sums, or a shared-memory ring that
// fell back because its segment could not be made), then the chunks that
// came early: before the collective started, or while it waited for the
// segment's offer.
void start_by_messages(member_actor* self) {
  auto& st = self->state;
  auto& a = *st.active;
  const uint64_t id = a.id;
  a.shm = a.shm_waiting = false;
  a.shm_stage = 0;
  if (!st.hier) {
    a.expected = setup_ring(st, a);
    a.ring_started = true;
    send_own_chunks(self);
  } else {
    const elem_range whole{0, a.len};
    a.whole_chunks = chunk_count(whole, a.chunk_elems);
    if (!st.leader) {
      // The whole vector to the leader; the result comes back from it.
      a.expected = a.whole_chunks;
      a.seen_whole.assign(a.whole_chunks, 0);
      for (uint64_t c = 0; c < a.whole_chunks; ++c) {
        elem_range r = chunk_range(whole, a.chunk_elems, c);
        auto msg = build_chunk(st, a, phase_lr, st.local_index, c, r,
                               [&](std::byte* dst) { a.buf.copy_out(r, dst); }, &st.leader_name);
        if (!send_to(self, st.leader_name, std::move(msg))) return;
      }
    } else {
      a.lr_expected = st.locals.size() * a.whole_chunks;
      a.seen_whole.assign(a.lr_expected, 0);
      a.expected = a.lr_expected + setup_ring(st, a);
      if (a.lr_expected == 0) start_ring_part(self);
    }
  }
  if (!st.active || st.active->id != id) return;
  schedule_tick(self);
  std::vector<std::pair<std::string, wire_buffer_ref>> msgs;
  if (auto it = st.early.find(id); it != st.early.end()) {
    msgs = std::move(it->second);
    st.early.erase(it);
  }
  if (a.ring_started) {  // held while the segment's offer was awaited
    for (auto& m : a.held) msgs.push_back(std::move(m));
    a.held.clear();
  }
  for (auto& [node, m] : msgs) {
    if (!st.active || st.active->id != id) break;
    handle_chunk(self, node, m);
  }
}

void start_collective(member_actor* self, const bucket& b) {
  auto& st = self->state;
  auto& req = *st.current;
  std::vector<std::span<std::byte>> pieces;
  for (auto i : b.tensors) pieces.push_back(req.tensors[i].data);
  st.active.emplace();
  auto& a = *st.active;
  a.id = st.next_id++;
  a.type = b.type;
  a.op = req.op;
  a.len = b.elems;
  a.chunk_elems = chunk_elems_for(st.cfg.chunk_bytes, b.type);
  a.buf = fused_buffer(b.type, std::move(pieces));
  a.started = a.last_progress = clock_type::now();
  if (kernels::trace::enabled()) a.started_us = a.progress_us = kernels::trace::now_us();
  if (st.total < 2 || a.len == 0) return finish_collective(self);  // sum / average of one: as is
  uint64_t id = a.id;
  {
    std::string on = st.shm_mode   ? "its host's ring members (shared memory)"
                     : !st.hier       ? who(st, st.left)
                     : !st.leader   ? who(st, st.leader_name) + ", its host's leader"
                     : st.locals.empty() ? who(st, st.left)
                                    : "its host's members and " + who(st, st.left);
    a.wait.emplace(st.me, std::move(on),
                   "the chunks of collective " + std::to_string(id) + " (" + std::to_string(a.len) + " " +
                       to_string(a.type) + " elements)");
  }
  if (st.shm_mode || st.host_shm) {
    a.shm = true;
    a.shm_stage = 1;
    if (st.host_shm && st.leader) {
      // Ring chunks from leaders that are ahead wait until the host's sum is in.
      if (auto it = st.early.find(id); it != st.early.end()) {
        a.held = std::move(it->second);
        st.early.erase(it);
      }
    }
    start_shm(self);
    if (st.active && st.active->id == id) schedule_tick(self);
    return;
  }
  start_by_messages(self);
}

// Starts queued work until a collective is in flight (or nothing is left).
void try_start(member_actor* self) {
  auto& st = self->state;
  check_lost(self);
  while (!st.finished && !st.active) {
    if (st.current && st.next_bucket == st.buckets.size()) {
      st.current->complete({});
      st.current.reset();
    }
    if (!st.current) {
      if (st.queue.empty()) {
        if (st.closed) finish_ok(self);
        return;
      }
      st.current = std::move(st.queue.front());
      st.queue.pop_front();
      if (st.current->generation != any_generation && st.current->generation != st.gen) {
        st.current->complete(make_error(errc::peer_down, "the ring was re-formed (generation " +
                                                             std::to_string(st.gen) + ") after this all-reduce "
                                                             "was made for generation " +
                                                             std::to_string(st.current->generation)));
        st.current.reset();
        continue;
      }
      std::vector<tensor_desc> descs;
      std::string bad;
      for (std::size_t i = 0; i < st.current->tensors.size(); ++i) {
        const auto& t = st.current->tensors[i];
        if (t.data.size() % element_size(t.type) != 0 ||
            reinterpret_cast<uintptr_t>(t.data.data()) % element_size(t.type) != 0)
          bad = "tensor " + std::to_string(i) + " (" + std::to_string(t.data.size()) +
                " bytes) is not an aligned whole number of " + to_string(t.type) + " elements";
        descs.push_back({t.type, t.data.size() / element_size(t.type)});
      }
      if (bad.empty() && st.current->op == reduce_op::average)
        for (auto& d : descs)
          if (!is_float(d.type)) bad = std::string("average of ") + to_string(d.type) + " is not supported (use sum)";
      if (!bad.empty()) {
        // The caller's mistake; every member makes it alike, so no peer waits.
        st.current->complete(make_error(errc::invalid_argument, "all_reduce: " + bad));
        st.current.reset();
        continue;
      }
      st.buckets = plan_buckets(descs, st.cfg.bucket_bytes);
      st.next_bucket = 0;
      continue;
    }
    start_collective(self, st.buckets[st.next_bucket++]);
  }
}

void drill(member_actor* self) {
  auto& st = self->state;
  if (st.cfg.drill == "none" || ++st.chunks_handled != st.cfg.drill_after) return;
  if (st.cfg.drill == "die") {
    log_warn("ring member '" + st.me + "': fault drill: dying after " +
             std::to_string(st.chunks_handled) + " chunks");
    st.finished = true;
    self->quit(caf::make_error(caf::sec::runtime_error));
    return;
  }
  log_warn("ring member '" + st.me + "': fault drill: stalling (mailbox blocked) after " +
           std::to_string(st.chunks_handled) + " chunks");
  drill_stall(*st.svc);
}

void handle_chunk(member_actor* self, const std::string& from_node, const wire_buffer_ref& buf) {
  auto& st = self->state;
  auto msg = schemas::decode_message(buf, st.svc->read_limits(), "node '" + from_node + "'");
  if (!msg) return fail(self, msg.error().to_string());
  const auto& h = msg->header();
  std::string from = who(st, h.sender);
  chunk_header ch;
  if (h.kind != kind_ring_chunk || msg->payload().size() != sizeof ch || msg->tensor_count() != 1)
    return fail(self, "unexpected message (kind " + std::to_string(h.kind) + ") from " + from);
  std::memcpy(&ch, msg->payload().data(), sizeof ch);
  if (ch.magic != chunk_magic || ch.version != chunk_version || ch.collective != h.seq)
    return fail(self, "malformed ring chunk from " + from);
  if (ch.phase == phase_shm) {
    const auto& t = msg->tensor(0);
    return on_offer(self, ch, from, std::span<const std::byte>(t.data.data(), t.data.size()));
  }
  if ((ch.collective >> gen_shift) < st.gen) {  // from the ring before a member was lost
    ++st.stale_chunks;
    return;
  }
  if (!st.active || ch.collective != st.active->id) {
    if (ch.collective >= st.next_id) {  // a neighbour is ahead of us
      st.early[ch.collective].emplace_back(from_node, buf);
      return;
    }
    return fail(self, "chunk of collective " + std::to_string(ch.collective) + " from " + from +
                          " arrived after that collective ended (duplicate or misrouted)");
  }
  auto& a = *st.active;
  if (ch.members != st.total || ch.type != static_cast<uint8_t>(a.type) ||
      ch.op != static_cast<uint8_t>(a.op) || ch.total_elems != a.len ||
      ch.chunk_elems != a.chunk_elems)
    return fail(self, from + " runs it as " + std::to_string(ch.total_elems) + " elements of " +
                          (ch.type <= 3 ? to_string(static_cast<ring_dtype>(ch.type)) : "?") +
                          " with " + (ch.op <= 1 ? to_string(static_cast<reduce_op>(ch.op)) : "?") +
                          ", " + std::to_string(ch.members) + " members, chunks of " +
                          std::to_string(ch.chunk_elems) + "; here it is " + std::to_string(a.len) +
                          " elements of " + to_string(a.type) + " with " + to_string(a.op) + ", " +
                          std::to_string(st.total) + " members, chunks of " +
                          std::to_string(a.chunk_elems) +
                          ": every member must make the same all_reduce calls with the same "
                          "ring settings");
  // Trace: the time since this member last made progress on the collective
  // was spent waiting for this chunk (short gaps are left out: they are the
  // actor's own message handling, and would flood the bound).
  // The wait ends where the step begins: spans on one track must nest.
  if (kernels::trace::enabled() && a.progress_us > 0) {
    const int64_t now = kernels::trace::now_us();
    if (now - a.progress_us >= 50)
      kernels::trace::complete(st.tk, ch.phase >= phase_lr ? "wait: host member" : "wait: left ring member",
                               a.progress_us, now - a.progress_us, "collective", int64_t(a.id));
  }
  kernels::trace::scope t_step(ch.phase == phase_rs   ? "ring step: reduce-scatter"
                               : ch.phase == phase_ag ? "ring step: all-gather"
                                                      : "ring step: host-local",
                               st.tk, "chunk", int64_t(ch.chunk));
  auto step_done = [&] {
    t_step.end();
    if (kernels::trace::enabled()) a.progress_us = kernels::trace::now_us();
  };
  if (ch.phase == phase_lr || ch.phase == phase_lb) {
    // Hierarchical: a local's vector at its leader, or the result at a local.
    const bool lr = ch.phase == phase_lr;
    if (!st.hier || lr != st.leader || (lr && ch.segment >= st.locals.size()))
      return fail(self, "hierarchical chunk from " + from + " does not belong here (ring settings differ?)");
    if (ch.chunk >= a.whole_chunks)
      return fail(self, "chunk index " + std::to_string(ch.chunk) + " out of range from " + from);
    uint64_t slot = lr ? ch.segment * a.whole_chunks + ch.chunk : ch.chunk;
    if (a.seen_whole[slot]) return fail(self, "duplicate chunk from " + from);
    a.seen_whole[slot] = 1;
    elem_range r = chunk_range(elem_range{0, a.len}, a.chunk_elems, ch.chunk);
    const auto& t = msg->tensor(0);
    if (t.data.size() != r.size() * element_size(a.type))
      return fail(self, "chunk from " + from + " has " + std::to_string(t.data.size()) +
                            " bytes, expected " + std::to_string(r.size() * element_size(a.type)));
    if (lr)
      a.buf.add_final(r, t.data.data(), nullptr, reduce_op::sum, 1);  // local += recv
    else
      a.buf.copy_in(r, t.data.data());
    a.last_progress = clock_type::now();
    a.upstream_waits = 0;
    uint64_t id = a.id;
    ++a.received;
    step_done();
    drill(self);
    if (!st.active || st.active->id != id || st.finished) return;
    if (lr && ++a.lr_received == a.lr_expected) return start_ring_part(self);
    return maybe_finish(self);
  }
  if (st.hier && !st.leader)
    return fail(self, "ring chunk from " + from + " at a member that is not its host's leader");
  if (!a.ring_started) {  // a leader still summing its locals: later
    a.held.emplace_back(from_node, buf);
    return;
  }
  auto step = ch.phase == phase_rs ? rs_step_of(st.rank, st.n, ch.segment)
                                   : ag_step_of(st.rank, st.n, ch.segment);
  if (ch.phase > phase_ag || !step)
    return fail(self, "ring chunk from " + from + " for segment " + std::to_string(ch.segment) +
                          " does not belong here (ring order differs?)");
  elem_range seg = segment_range(a.len, st.n, ch.segment);
  if (ch.chunk >= chunk_count(seg, a.chunk_elems))
    return fail(self, "chunk index " + std::to_string(ch.chunk) + " out of range from " + from);
  uint64_t slot = ch.phase * (a.seen.size() / 2) + a.chunk_base[ch.segment] + ch.chunk;
  if (a.seen[slot]) return fail(self, "duplicate chunk from " + from);
  a.seen[slot] = 1;
  elem_range r = chunk_range(seg, a.chunk_elems, ch.chunk);
  const auto& t = msg->tensor(0);
  if (t.data.size() != r.size() * element_size(a.type))
    return fail(self, "chunk from " + from + " has " + std::to_string(t.data.size()) +
                          " bytes, expected " + std::to_string(r.size() * element_size(a.type)));
  const std::byte* recv = t.data.data();
  uint64_t id = a.id;
  if (ch.phase == phase_rs) {
    wire_buffer_ref out;
    if (*step + 2 < st.n) {
      out = build_chunk(st, a, phase_rs, ch.segment, ch.chunk, r,
                        [&](std::byte* dst) { a.buf.add_out(r, recv, dst); });
    } else {
      out = build_chunk(st, a, phase_ag, ch.segment, ch.chunk, r,
                        [&](std::byte* dst) { a.buf.add_final(r, recv, dst, a.op, st.total); });
    }
    if (!send_right(self, std::move(out))) return;
    if (*step == 0) {
      ++a.left_step0_seen;
      send_own_chunks(self);
      if (!st.active) return;
    }
  } else {
    a.buf.copy_in(r, recv);
    // Forward the received bytes themselves: they are valid at every hop.
    if (*step + 2 < st.n && !send_right(self, buf)) return;
  }
  a.last_progress = clock_type::now();
  a.upstream_waits = 0;
  step_done();
  drill(self);
  if (!st.active || st.active->id != id || st.finished) return;
  ++a.received;
  maybe_finish(self);
}

// How long a collective may go without progress before its member probes:
// the first one also absorbs start-up skew (nodes joining, callers loading
// data).
double stall_limit(const member_state& st, uint64_t id) {
  // Also the first of a generation: the survivors re-form one by one.
  return (id & in_gen_mask) == 0 ? std::max(st.cfg.timeout_s, st.cfg.first_timeout_s) : st.cfg.timeout_s;
}

// Whom a stalled collective probes: the left neighbour; a hierarchical
// leader still missing vectors from its locals asks the first such local; a
// local asks its leader.
std::string probe_target(const member_state& st) {
  const auto& a = *st.active;
  if (st.hier && st.leader && a.lr_received < a.lr_expected)
    for (std::size_t l = 0; l < st.locals.size(); ++l)
      for (uint64_t c = 0; c < a.whole_chunks; ++c)
        if (!a.seen_whole[l * a.whole_chunks + c]) return st.locals[l];
  return st.left;
}

void on_probe_answer(member_actor* self, uint64_t id, int32_t state, uint64_t next,
                     uint64_t received, uint64_t expected) {
  auto& st = self->state;
  st.probing = false;
  if (!st.active || st.active->id != id || st.finished) return;
  if (check_lost(self)) return try_start(self);  // the answer is about the old ring
  auto& a = *st.active;
  double waited = std::chrono::duration<double>(clock_type::now() - a.last_progress).count();
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f s", waited);
  std::string left = who(st, st.probe_target);
  bool left_active_on_id = state == 1 && next == id + 1;
  if (st.hier && !st.leader && left_active_on_id) {
    // A local hears back only at the end: its leader busy on this collective
    // is progress as far as the local can tell; the leaders' own probes name
    // whoever holds the collective up.
    a.last_progress = clock_type::now();
    a.upstream_waits = 0;
    return;
  }
  if (st.hier && st.leader && st.probe_target != st.left && left_active_on_id)
    return fail(self, "no chunk for " + std::string(secs) + ": " + left +
                          " started this collective but its vector has not arrived here (lost or "
                          "stuck in transit); waiting on " + left);
  if (state == 0 && next <= id)
    return fail(self, "no chunk for " + std::string(secs) + ": " + left +
                          " has not started this collective (its caller has not submitted it, or "
                          "is stuck); waiting on " + left);
  if (next > id + 1 || (state == 0 && next > id))
    return fail(self, left + " finished this collective, but " +
                          std::to_string(a.expected - a.received) +
                          " chunks never arrived here (lost); waiting on " + left);
  if (left_active_on_id || state == 1) {
    // The left waits as well: the culprit is further up and its right
    // neighbour reports it (after `timeout` and its 1 s probe). Give that
    // report two more half-timeouts: members' stall checks are not in step
    // (one tick per member, not per collective), and one was sometimes too
    // short for the report to reach the head first.
    if (++a.upstream_waits >= 3)
      return fail(self, "no chunk for " + std::string(secs) + ": waiting on " + left +
                            ", which is itself waiting (" + std::to_string(received) + "/" +
                            std::to_string(expected) + " chunks) on its left neighbour");
    a.last_progress = clock_type::now() - std::chrono::duration_cast<clock_type::duration>(
                                              std::chrono::duration<double>(stall_limit(st, id) / 2));
  }
}

// Flat: every member in one ring. Hierarchical (cfg.hierarchical "auto",
// when the members span several hosts and some host has more than one):
// per host the first member in ring order is the leader; the others
// send it their vectors, the leaders run the ring, and each leader sends the
// result back to its host's members.
void configure_ring(member_state& st, std::size_t me) {
  const auto& m = st.cfg.members;
  st.total = static_cast<uint32_t>(m.size());
  std::vector<std::string> hosts;
  for (const auto& name : m) {
    auto it = st.node_host.find(st.svc->node_of(name));
    hosts.push_back(it == st.node_host.end() ? std::string() : it->second);
  }
  std::vector<std::string> distinct;
  for (const auto& h : hosts)
    if (std::find(distinct.begin(), distinct.end(), h) == distinct.end()) distinct.push_back(h);
  const bool shared = distinct.size() < m.size();
  st.hier = st.cfg.hierarchical == "auto" && shared && distinct.size() > 1;
  // Every member on this member's host: one shared-memory segment instead
  // of chunk messages.
  st.shm_mode = st.cfg.shm == "auto" && distinct.size() == 1 && !distinct.front().empty() && m.size() >= 2 &&
                m.size() <= shm_group::max_members;
  st.host_shm = false;
  st.host_members.clear();
  if (!st.hier) {
    st.n = st.total;
    st.rank = static_cast<uint32_t>(me);
    st.left = m[mod_n(int64_t(st.rank) - 1, st.n)];
    st.right = m[mod_n(int64_t(st.rank) + 1, st.n)];
    return;
  }
  std::vector<std::string> leaders;
  for (const auto& h : distinct)
    for (std::size_t i = 0; i < m.size(); ++i)
      if (hosts[i] == h) {
        leaders.push_back(m[i]);
        break;
      }
  const std::string& my_host = hosts[me];
  st.leader_name = leaders[std::size_t(std::find(distinct.begin(), distinct.end(), my_host) - distinct.begin())];
  st.leader = st.leader_name == m[me];
  st.host_members = {st.leader_name};
  for (std::size_t i = 0; i < m.size(); ++i)
    if (hosts[i] == my_host && m[i] != st.leader_name) st.host_members.push_back(m[i]);
  st.host_shm = st.cfg.shm == "auto" && !my_host.empty() && st.host_members.size() >= 2 &&
                st.host_members.size() <= shm_group::max_members;
  st.locals.clear();
  uint32_t idx = 0;
  for (std::size_t i = 0; i < m.size(); ++i) {
    if (hosts[i] != my_host || m[i] == st.leader_name) continue;
    if (i == me) st.local_index = idx;
    st.locals.push_back(m[i]);
    ++idx;
  }
  if (st.leader) {
    st.n = static_cast<uint32_t>(leaders.size());
    st.rank = static_cast<uint32_t>(std::find(leaders.begin(), leaders.end(), m[me]) - leaders.begin());
    st.left = leaders[mod_n(int64_t(st.rank) - 1, st.n)];
    st.right = leaders[mod_n(int64_t(st.rank) + 1, st.n)];
  } else {
    st.n = 1;
    st.rank = 0;
    st.left = st.right = st.leader_name;  // stall probes ask the leader
    st.locals.clear();
  }
}

// Failover: drops the members whose nodes were lost, completes what was in
// flight or queued with peer_down and starts the next generation. True when
// the ring was re-formed.
bool check_lost(member_actor* self) {
  auto& st = self->state;
  if (!st.cfg.failover || st.finished) return false;
  std::vector<std::string> gone;
  for (const auto& m : st.cfg.members)
    if (m != st.me && st.svc->node_lost(st.svc->node_of(m))) gone.push_back(m);
  if (gone.empty()) return false;
  std::string names;
  for (const auto& g : gone) names += (names.empty() ? "" : ", ") + who(st, g);
  auto& m = st.cfg.members;
  for (const auto& g : gone) {
    m.erase(std::find(m.begin(), m.end(), g));
    st.lost.push_back(g);
  }
  ++st.gen;
  const std::string why = names + (gone.size() == 1 ? " was" : " were") + " lost with " +
                          (gone.size() == 1 ? "its node" : "their nodes") + "; the ring goes on with " +
                          std::to_string(m.size()) + " member" + (m.size() == 1 ? "" : "s") + " (generation " +
                          std::to_string(st.gen) + ")";
  complete_all(st, make_error(errc::peer_down, why));
  st.buckets.clear();
  st.next_bucket = 0;
  st.next_id = uint64_t(st.gen) << gen_shift;
  for (auto it = st.early.begin(); it != st.early.end();)
    it = (it->first >> gen_shift) < st.gen ? st.early.erase(it) : std::next(it);
  configure_ring(st, std::size_t(std::find(m.begin(), m.end(), st.me) - m.begin()));
  log_warn("ring member '" + st.me + "': " + why);
  return true;
}

caf::behavior ring_member_fn(member_actor* self, actor_env env) {
  init_job_actor(self, env);
  auto& st = self->state;
  st.tk = kernels::trace::track(st.me);
  const auto& args = env.spec.args;
  st.cfg.members = args.get_strings("ring");
  st.cfg.chunk_bytes = static_cast<uint64_t>(args.get_int("chunk_bytes", 1 << 20));
  st.cfg.bucket_bytes = static_cast<uint64_t>(args.get_int("bucket_bytes", 16 << 20));
  st.cfg.timeout_s = args.get_number("timeout", 2.0);
  st.cfg.first_timeout_s = args.get_number("first_timeout", 60.0);
  st.cfg.window = static_cast<uint64_t>(std::max<int64_t>(0, args.get_int("window", 0)));
  st.cfg.hierarchical = args.get_string("hierarchical", "auto");
  st.cfg.shm = args.get_string("shm", "auto");
  // Whole cache lines, at least a page (the key's lower bound).
  st.cfg.shm_slot_bytes =
      std::max<uint64_t>(4096, static_cast<uint64_t>(args.get_int("shm_slot_bytes", 256 << 10)) & ~uint64_t{63});
  st.cfg.failover = args.get_bool("failover", false);
  for (const auto& n : env.cluster.nodes) st.node_host[n.name] = n.host;
  st.cfg.drill = args.get_string("drill", "none");
  st.cfg.drill_after = args.get_int("drill_after", 0);
  // A few windows of chunks wait for reuse; the rest is freed.
  st.pool = buffer_pool::create(std::size_t{64} << 10,
                                std::max<std::size_t>(std::size_t{64} << 20, 16 * st.cfg.chunk_bytes));
  st.allocate = [pool = st.pool](std::size_t bytes) { return pool->allocate(bytes); };
  return {
    [self](start_atom) {
      auto& st = self->state;
      auto& m = st.cfg.members;
      auto it = std::find(m.begin(), m.end(), st.me);
      if (it == m.end())
        return fail(self, "ring member '" + st.me + "' is not in its own ring list");
      for (auto& name : m)
        if (!st.svc->find_actor(name))
          return fail(self, "ring list names '" + name + "', which is not an actor of this job");
      configure_ring(st, static_cast<std::size_t>(it - m.begin()));
      become_running(
          self,
          [self](ringreq_atom, request_ref& req) {
            auto& st = self->state;
            if (st.finished) return req->complete(make_error(errc::cancelled, "ring member has stopped"));
            st.queue.push_back(std::move(req));
            try_start(self);
          },
          [self](ringclose_atom) {
            self->state.closed = true;
            try_start(self);
          },
          [self](ringview_atom, view_ref& req) {
            auto& st = self->state;
            if (st.finished) return req->answer(make_error(errc::cancelled, "ring member has stopped"));
            const bool reformed = check_lost(self);
            req->answer(ring_view{st.gen, st.cfg.members});
            if (reformed) try_start(self);
          },
          [self](wire_atom, const std::string& node, const wire_buffer_ref& buf) {
            if (!self->state.finished) handle_chunk(self, node, buf);
          },
          // The worker finished a shared-memory collective.
          [self](ringshm_atom, uint64_t id, int32_t code, const std::string& why) {
            auto& st = self->state;
            if (st.finished || !st.active || st.active->id != id || !st.active->shm) return;
            if (code == 0) {
              st.shm_checked_in = true;
              auto& a = *st.active;
              a.shm = false;
              if (st.host_shm && st.leader && a.shm_stage == 1) {
                // The host's sum is in: the leaders' ring, by messages.
                a.shm_stage = 2;
                a.last_progress = clock_type::now();
                a.upstream_waits = 0;
                a.expected = setup_ring(st, a);
                return start_ring_part(self);
              }
              return finish_collective(self);
            }
            if (why == "fault drill" && st.cfg.drill == "die") {  // as the chunk drill does (a stall that
                                                                  // ends with the job reports as any failure)
              st.finished = true;
              if (st.worker) st.worker->abort_and_wait();
              self->quit(caf::make_error(caf::sec::runtime_error));
              return;
            }
            if (check_lost(self)) return try_start(self);
            fail(self, why);
          },
          // A neighbour asks what we are doing: 0 idle / 1 in a collective,
          // the next collective id, chunks received / expected.
          [self](ringprobe_atom, uint64_t) -> caf::message {
            auto& st = self->state;
            int32_t state = st.active ? 1 : 0;
            uint64_t rcv = st.active ? st.active->received : 0;
            uint64_t exp = st.active ? st.active->expected : 0;
            return caf::make_message(ringprobe_atom::value, state, st.next_id, rcv, exp);
          },
          [self](ringtick_atom) {
            auto& st = self->state;
            st.tick_pending = false;
            if (st.finished || !st.active) return;
            const uint64_t id = st.active->id;
            if (check_lost(self)) return try_start(self);
            if (!st.active->send_error.empty() &&
                clock_type::now() - st.active->send_error_at > std::chrono::seconds(1))
              return fail(self, st.active->send_error + " (and its node was not lost)");
            schedule_tick(self);
            double idle = std::chrono::duration<double>(clock_type::now() -
                                                        st.active->last_progress).count();
            if (st.active->shm) {
              // The worker names a member that stalls; here only the offer
              // of the segment can be late.
              if (st.active->shm_waiting && idle >= stall_limit(st, id)) {
                char secs[32];
                std::snprintf(secs, sizeof secs, "%.1f s", idle);
                // The offer comes from the group's first member: the ring's
                // (flat) or the host's leader (hierarchical).
                const std::string& from = st.host_shm ? st.host_members.front() : st.cfg.members.front();
                fail(self, "no shared-memory offer for " + std::string(secs) + " (is its node up? shm = \"off\" "
                           "sums by messages); waiting on " + who(st, from));
              }
              return;
            }
            if (idle < stall_limit(st, id) || st.probing) return;
            st.probe_target = probe_target(st);
            caf::actor left = st.svc->find_actor(st.probe_target);
            if (!left) return fail(self, who(st, st.probe_target) + " is not running");
            st.probing = true;
            self->request(left, std::chrono::seconds(1), ringprobe_atom::value, id)
                .then(
                    [self, id](ringprobe_atom, int32_t state, uint64_t next, uint64_t rcv,
                               uint64_t exp) { on_probe_answer(self, id, state, next, rcv, exp); },
                    [self, id](caf::error& err) {
                      auto& st = self->state;
                      st.probing = false;
                      if (!st.active || st.active->id != id || st.finished) return;
                      if (check_lost(self)) return try_start(self);
                      auto& a = *st.active;
                      double idle = std::chrono::duration<double>(clock_type::now() - a.last_progress).count();
                      char secs[32];
                      std::snprintf(secs, sizeof secs, "%.1f s", idle);
                      if (err == caf::sec::request_receiver_down && ++a.upstream_waits < 3) {
                        // The left member has stopped: it failed (its own
                        // report, naming the cause, is on its way to the
                        // head and stops the job) or its node went down.
                        // Give that one more timeout before blaming it.
                        a.last_progress = clock_type::now() -
                                          std::chrono::duration_cast<clock_type::duration>(
                                              std::chrono::duration<double>(stall_limit(st, id) / 2));
                        return;
                      }
                      fail(self, "no chunk for " + std::string(secs) + " and " + who(st, st.probe_target) +
                                     (err == caf::sec::request_receiver_down
                                          ? " has stopped; waiting on "
                                          : " does not answer within 1 s: it is stalled; waiting on ") +
                                     who(st, st.probe_target));
                    });
          });
      try_start(self);
    },
  };
}

}  // namespace

void all_reduce(const caf::actor& member, std::vector<ring_tensor> tensors, reduce_op op,
                completion done, uint32_t generation) {
  auto req = std::make_shared<detail::collective_request>();
  req->tensors = std::move(tensors);
  req->generation = generation;
  req->op = op;
  req->done = std::move(done);
  if (!member) {
    req->complete(make_error(errc::not_found, "all_reduce: no ring member"));
    return;
  }
  caf::anon_send(member, ringreq_atom::value, std::move(req));
}

std::future<status> all_reduce(const caf::actor& member, std::vector<ring_tensor> tensors,
                               reduce_op op, uint32_t generation) {
  auto p = std::make_shared<std::promise<status>>();
  auto f = p->get_future();
  all_reduce(member, std::move(tensors), op, [p](status s) { p->set_value(std::move(s)); }, generation);
  return f;
}

std::future<expected<ring_view>> current_view(const caf::actor& member) {
  auto req = std::make_shared<detail::view_request>();
  auto f = req->promise.get_future();
  if (!member)
    req->answer(make_error(errc::not_found, "current_view: no ring member"));
  else
    caf::anon_send(member, ringview_atom::value, std::move(req));
  return f;
}

void close(const caf::actor& member) {
  if (member) caf::anon_send(member, ringclose_atom::value);
}

std::vector<topology::key_spec> ring_member_keys() {
  using topology::key_spec;
  using topology::key_type;
  std::vector<key_spec> k;
  k.push_back(key_spec{"chunk_bytes", key_type::size, false, int64_t{1} << 20,
                       "bytes per chunk message (pipelining grain)", 8.0, double(256 << 20), {}});
  k.push_back(key_spec{"bucket_bytes", key_type::size, false, int64_t{16} << 20,
                       "fuse consecutive small tensors of one dtype up to this size (0 = never)",
                       0.0, {}, {}});
  k.push_back(key_spec{"timeout", key_type::duration, false, 2.0,
                       "a collective with no chunk for this long probes its left neighbour and "
                       "fails naming the stalled member",
                       0.1, 3600.0, {}});
  k.push_back(key_spec{"first_timeout", key_type::duration, false, 60.0,
                       "the same for the first collective, which also waits out start-up skew "
                       "(nodes joining, callers loading data)",
                       0.1, 86400.0, {}});
  k.push_back(key_spec{"window", key_type::integer, false, int64_t{0},
                       "own step-0 chunks sent ahead of the left neighbour's (0 = all)", 0.0,
                       1e6, {}});
  k.push_back(key_spec{"hierarchical", key_type::string, false, std::string("auto"),
                       "members on one host sum into one leader, the leaders run the ring, the result "
                       "goes back (auto: when members span hosts and some share one; off: one flat ring)",
                       {}, {}, {"auto", "off"}});
  k.push_back(key_spec{"shm", key_type::string, false, std::string("auto"),
                       "when every member is on one host, sum through one shared-memory segment instead of chunk "
                       "messages (auto; off: messages through the data plane)",
                       {}, {}, {"auto", "off"}});
  k.push_back(key_spec{"shm_slot_bytes", key_type::size, false, int64_t{256} << 10,
                       "shared memory: bytes of each member's vector per round (4 rounds in flight)", 4096.0,
                       double(64 << 20), {}});
  k.push_back(key_spec{"failover", key_type::boolean, false, false,
                       "a member lost with its node is dropped: what was in flight fails with peer_down and the "
                       "ring goes on without it (false: the loss stops the job)",
                       {}, {}, {}});
  k.push_back(key_spec{"drill", key_type::string, false, std::string("none"),
                       "fault drill: stall (block the mailbox; shared memory: stop the rounds) or die after "
                       "drill_after chunks (shared memory: rounds)",
                       {}, {}, {"none", "stall", "die"}});
  k.push_back(key_spec{"drill_after", key_type::integer, false, int64_t{0},
                       "chunks (shared memory: rounds) handled before the fault drill", 0.0, {}, {}});
  return k;
}

caf::actor spawn_ring_member(caf::actor_system& sys, const actor_env& env) {
  return sys.spawn<caf::detached>(ring_member_fn, env);
}

void add_ring_member(registry& reg) {
  using topology::key_spec;
  using topology::key_type;
  topology::type_spec t{"ring_member",
                        "one member of a ring all-reduce (reduce-scatter + all-gather, chunked)",
                        {}};
  t.keys.push_back(key_spec{"ring", key_type::string_list, true, std::nullopt,
                            "ring_member actor names in ring order, this one included", {}, {}, {}});
  for (auto& k : ring_member_keys()) t.keys.push_back(std::move(k));
  (void)reg.add_actor_type(t, spawn_ring_member);
}

}  // namespace hetflow::actors::ring
