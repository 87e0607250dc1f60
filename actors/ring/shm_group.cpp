#include "actors/ring/shm_group.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <filesystem>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <thread>

#include "kernels/waits.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HETFLOW_CPU_RELAX() _mm_pause()
#else
#define HETFLOW_CPU_RELAX() std::atomic_signal_fence(std::memory_order_seq_cst)
#endif

namespace hetflow::actors::ring {
namespace {

using clock_type = std::chrono::steady_clock;

constexpr uint64_t shm_magic = 0x6873676e69726668ull;  // "hfringsh"
constexpr uint32_t shm_version = 1;
constexpr std::size_t line = 64;
// Spin before a futex wait: briefly where the awaited member may be far
// away (its caller still computing), longer where it is mid-collective.
constexpr int spin_short_us = 50;
constexpr int spin_long_us = 1000;

enum : int { c_checkin = 0, c_arrived = 1, c_reduced = 2, c_released = 3, c_kinds = 4 };
// A descriptor's op for broadcast (reduce_op's values are 0 and 1).
constexpr uint32_t op_broadcast = 0xb0;
const char* const what_of[c_kinds] = {"checked in", "arrived at", "reduced its part of", "released"};

// a reached b (round numbers wrap at 2^32)
inline bool reached(uint32_t a, uint32_t b) noexcept { return static_cast<int32_t>(a - b) >= 0; }

long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  // Shared (not FUTEX_PRIVATE_FLAG): the word lives in a mapping other
  // processes share.
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

std::string errno_text(int e) { return std::strerror(e); }

}  // namespace

struct shm_group::header {
  uint64_t magic;
  uint32_t version;
  uint32_t members;
  uint64_t nonce;
  uint64_t slot_bytes;
  uint32_t banks;
  uint32_t reserved;
  alignas(line) std::atomic<uint32_t> sleepers;  // members in a futex wait
};

struct alignas(line) shm_group::descriptor {
  std::atomic<uint64_t> id;
  uint64_t len;
  uint32_t type;
  uint32_t op;
};

namespace {
constexpr std::size_t header_bytes = 2 * line;
static_assert(sizeof(std::atomic<uint32_t>) == 4 && std::atomic<uint32_t>::is_always_lock_free);

struct layout {
  uint64_t counters, descriptors, slots, total;
};
layout layout_for(uint32_t n, uint32_t banks, uint64_t slot_bytes) {
  layout l;
  l.counters = header_bytes;
  l.descriptors = l.counters + uint64_t{c_kinds} * n * line;
  l.slots = (l.descriptors + uint64_t{banks} * n * line + 4095) & ~uint64_t{4095};
  l.total = l.slots + uint64_t{banks} * n * slot_bytes;
  return l;
}
// The layouts create() makes (and open() accepts: a header is read from
// shared memory): 2-64 banks, slots of 4 KiB to 64 MiB in whole cache lines.
bool valid_layout(uint32_t banks, uint64_t slot_bytes) noexcept {
  return banks >= 2 && banks <= 64 && slot_bytes >= 4096 && slot_bytes <= (uint64_t{64} << 20) && slot_bytes % 64 == 0;
}
}  // namespace

void shm_group::remove_stale_segments(std::chrono::seconds min_age) noexcept {
  // A creator removes its segment's name once every member has mapped it,
  // or when it goes away first; one that died before either left the name.
  // Its pid is in the name: remove those of processes that are gone. Only
  // names older than min_age: a creator in another pid namespace that
  // shares /dev/shm (containers of one pod) looks dead from here, but its
  // ring checks in within its first_timeout.
  std::error_code ec;
  const auto now = std::filesystem::file_time_type::clock::now();
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = entry.path().filename().string();
    constexpr std::string_view prefix = "hetflow-ring-";
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    std::error_code tec;
    const auto written = std::filesystem::last_write_time(entry.path(), tec);
    if (tec || now - written < min_age) continue;
    const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to ask)
    ::shm_unlink(("/" + name).c_str());
  }
}

shm_group::counter& shm_group::ctr(int which, uint32_t member) const noexcept {
  auto* p = static_cast<std::byte*>(base_) + header_bytes + (uint64_t(which) * n_ + member) * line;
  return *reinterpret_cast<counter*>(p);
}

shm_group::descriptor& shm_group::desc(uint32_t bank, uint32_t member) const noexcept {
  auto l = layout_for(n_, banks_, slot_bytes_);
  return *reinterpret_cast<descriptor*>(static_cast<std::byte*>(base_) + l.descriptors +
                                        (uint64_t{bank} * n_ + member) * line);
}

std::byte* shm_group::slot(uint32_t bank, uint32_t member) const noexcept {
  auto l = layout_for(n_, banks_, slot_bytes_);
  return static_cast<std::byte*>(base_) + l.slots + (uint64_t{bank} * n_ + member) * slot_bytes_;
}

status shm_group::map(int fd, uint64_t bytes) {
  void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return make_error(errc::io_error, "cannot map shared memory " + name_ + ": " + errno_text(errno));
  base_ = m;
  bytes_ = bytes;
  return {};
}

expected<std::unique_ptr<shm_group>> shm_group::create(uint32_t members, uint64_t nonce, options opt) {
  if (members == 0 || members > max_members)
    return make_error(errc::invalid_argument, "shared-memory ring: " + std::to_string(members) +
                                                  " members (1.." + std::to_string(max_members) + ")");
  if (!valid_layout(opt.banks, opt.slot_bytes))
    return make_error(errc::invalid_argument, "shared-memory ring: slots of " + std::to_string(opt.slot_bytes) +
                                                  " bytes in " + std::to_string(opt.banks) + " banks");
  std::unique_ptr<shm_group> g(new shm_group());
  g->n_ = members;
  g->rank_ = 0;
  g->banks_ = opt.banks;
  g->slot_bytes_ = opt.slot_bytes;
  if (std::getenv("HETFLOW_TEST_SHM_CREATE_FAIL"))  // tests: the fallback to messages
    return make_error(errc::io_error, "HETFLOW_TEST_SHM_CREATE_FAIL is set");
  remove_stale_segments();
  static std::atomic<uint64_t> serial{0};
  std::random_device rd;
  char name[96];
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    std::snprintf(name, sizeof name, "/hetflow-ring-%d-%llu-%08x", static_cast<int>(::getpid()),
                  static_cast<unsigned long long>(serial++), static_cast<unsigned>(rd()));
    fd = ::shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0)
    return make_error(errc::io_error, std::string("cannot create shared memory under /dev/shm for the ring: ") +
                                          errno_text(errno));
  g->name_ = name;
  g->owner_ = g->named_ = true;
  const auto l = layout_for(members, opt.banks, opt.slot_bytes);
  // fallocate, not only ftruncate: a /dev/shm too small for the segment (a
  // container's 64 MiB) is an error here, not a SIGBUS at the first touch.
  int e = ::ftruncate(fd, static_cast<off_t>(l.total)) != 0 ? errno : 0;
  if (e == 0) e = ::posix_fallocate(fd, 0, static_cast<off_t>(l.total));
  if (e != 0) {
    ::close(fd);
    return make_error(errc::io_error, "cannot size shared memory " + g->name_ + " to " + std::to_string(l.total) +
                                          " bytes: " + errno_text(e) + " (is /dev/shm big enough?)");
  }
  status s = g->map(fd, l.total);
  ::close(fd);
  if (!s.ok()) return s;
  auto* h = static_cast<header*>(g->base_);
  h->version = shm_version;
  h->members = members;
  h->nonce = nonce;
  h->slot_bytes = opt.slot_bytes;
  h->banks = opt.banks;
  std::atomic_thread_fence(std::memory_order_release);
  reinterpret_cast<std::atomic<uint64_t>*>(&h->magic)->store(shm_magic, std::memory_order_release);
  return g;
}

expected<std::unique_ptr<shm_group>> shm_group::open(const std::string& name, uint32_t members, uint32_t rank,
                                                     uint64_t nonce) {
  if (members == 0 || members > max_members || rank >= members)
    return make_error(errc::invalid_argument, "shared-memory ring: rank " + std::to_string(rank) + " of " +
                                                  std::to_string(members));
  std::unique_ptr<shm_group> g(new shm_group());
  g->name_ = name;
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0)
    return make_error(errc::not_found, "cannot open the ring's shared memory " + name + ": " + errno_text(errno) +
                                           " (are the members on one host? set the ring's shm = \"off\" if not)");
  struct stat sb{};
  if (::fstat(fd, &sb) != 0 || static_cast<uint64_t>(sb.st_size) < header_bytes) {
    ::close(fd);
    return make_error(errc::invalid_argument, "the ring's shared memory " + name + " is too small");
  }
  status s = g->map(fd, static_cast<uint64_t>(sb.st_size));
  ::close(fd);
  if (!s.ok()) return s;
  auto* h = static_cast<header*>(g->base_);
  const uint64_t magic = reinterpret_cast<std::atomic<uint64_t>*>(&h->magic)->load(std::memory_order_acquire);
  if (magic != shm_magic || h->version != shm_version || h->nonce != nonce || h->members != members)
    return make_error(errc::invalid_argument, "the ring's shared memory " + name +
                                          " belongs to another ring (nonce, version or member count differ)");
  g->n_ = members;
  g->rank_ = rank;
  g->banks_ = h->banks;
  g->slot_bytes_ = h->slot_bytes;
  if (!valid_layout(g->banks_, g->slot_bytes_) || layout_for(members, g->banks_, g->slot_bytes_).total > g->bytes_)
    return make_error(errc::invalid_argument, "the ring's shared memory " + name + " has an inconsistent layout");
  return g;
}

shm_group::~shm_group() {
  if (base_) ::munmap(base_, bytes_);
  if (owner_ && named_) ::shm_unlink(name_.c_str());
}

std::string shm_group::who(uint32_t member) const {
  if (member < names_.size()) return names_[member];
  return "member " + std::to_string(member);
}

void shm_group::publish(counter& c, uint32_t value) noexcept {
  c.v.store(value, std::memory_order_seq_cst);
  auto* h = static_cast<header*>(base_);
  if (h->sleepers.load(std::memory_order_seq_cst) > 0) futex(&c.v, FUTEX_WAKE, INT_MAX, nullptr);
}

status shm_group::wait_all(int which, uint32_t target, bool skip_self, double timeout_s,
                           const std::atomic<bool>& abort, const char* what, uint64_t id, int spin_us) {
  const auto t0 = clock_type::now();
  for (uint32_t j = 0; j < n_; ++j) {
    if (skip_self && j == rank_) continue;
    if (auto s = wait_one(which, j, target, t0, timeout_s, abort, what, id, spin_us); !s.ok()) return s;
  }
  return {};
}

status shm_group::wait_one(int which, uint32_t j, uint32_t target, clock_type::time_point t0, double timeout_s,
                           const std::atomic<bool>& abort, const char* what, uint64_t id, int spin_us) {
  auto* h = static_cast<header*>(base_);
  const auto limit = std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(timeout_s));
  auto& c = ctr(which, j).v;
  if (reached(c.load(std::memory_order_acquire), target)) return {};
  // Spin first: a member in the middle of a collective is a few
  // microseconds away, and waking from a futex costs tens of microseconds
  // (more in a VM). After the first microseconds the spin yields the core
  // between looks: with more members than cores the one it waits for may
  // need it.
  const auto spin_start = clock_type::now();
  const auto yield_from = spin_start + std::chrono::microseconds(spin_short_us / 2);
  const auto spin_until = spin_start + std::chrono::microseconds(spin_us);
  bool done = false;
  while (!done) {
    for (int i = 0; i < 64; ++i) {
      HETFLOW_CPU_RELAX();
      if (reached(c.load(std::memory_order_acquire), target)) {
        done = true;
        break;
      }
    }
    if (done) break;
    const auto now = clock_type::now();
    if (now >= spin_until) break;
    if (now >= yield_from) std::this_thread::yield();
  }
  std::optional<kernels::waits::scope> w;
  if (!done && !actor_.empty())
    w.emplace(actor_, who(j),
              "round " + std::to_string(target) + (id == UINT64_MAX ? "" : " of collective " + std::to_string(id)) +
                  " (shared memory)",
              kernels::waits::span{static_cast<kernels::trace::track_id>(track_), "wait: host ring member", "round",
                                   int64_t(target)});
  while (!done) {
    if (abort.load(std::memory_order_relaxed)) return make_error(errc::cancelled, "all-reduce aborted");
    if (clock_type::now() - t0 > limit) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%.1f s", timeout_s);
      if (id == UINT64_MAX)  // check_in: the member never mapped the segment
        return make_error(errc::timeout, who(j) + " has not " + what + " to the shared memory within " + secs +
                                             " (is its node up and on this host? shm = \"off\" sums by messages)");
      return make_error(errc::timeout, who(j) + " has not " + what + " round " + std::to_string(target) +
                                           " of collective " + std::to_string(id) + " within " + secs +
                                           " (shared memory; it stalled, died or was not called alike)");
    }
    h->sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t v = c.load(std::memory_order_seq_cst);
    if (!reached(v, target)) {
      timespec ts{0, 5'000'000};  // 5 ms: abort and the deadline are checked between waits
      futex(&c, FUTEX_WAIT, v, &ts);
    }
    h->sleepers.fetch_sub(1, std::memory_order_seq_cst);
    done = reached(c.load(std::memory_order_acquire), target);
  }
  return {};
}

status shm_group::check_in(double timeout_s, const std::atomic<bool>& abort) {
  publish(ctr(c_checkin, rank_), 1);
  status s = wait_all(c_checkin, 1, true, timeout_s, abort, what_of[c_checkin], UINT64_MAX, spin_short_us);
  if (s.ok() && owner_ && named_) {
    ::shm_unlink(name_.c_str());  // everyone has it mapped: no name left behind
    named_ = false;
  }
  return s;
}

void shm_group::describe(uint32_t bank, uint64_t id, uint64_t len, ring_dtype type, uint32_t op) {
  descriptor& mine = desc(bank, rank_);
  mine.len = len;
  mine.type = static_cast<uint32_t>(type);
  mine.op = op;
  mine.id.store(id, std::memory_order_relaxed);  // published with `arrived`
}

status shm_group::check_descriptor(uint32_t bank, uint32_t j, uint64_t id, uint64_t len, ring_dtype type,
                                   uint32_t op) const {
  const descriptor& d = desc(bank, j);
  const uint64_t did = d.id.load(std::memory_order_relaxed);
  if (did == id && d.len == len && d.type == static_cast<uint32_t>(type) && d.op == op) return {};
  auto op_name = [](uint32_t o) -> std::string {
    return o <= 1 ? to_string(static_cast<reduce_op>(o)) : o == op_broadcast ? "broadcast" : "?";
  };
  return make_error(errc::invalid_argument,
                    who(j) + " runs collective " + std::to_string(did) + " as " + std::to_string(d.len) +
                        " elements of " + (d.type <= 3 ? to_string(static_cast<ring_dtype>(d.type)) : "?") +
                        " with " + op_name(d.op) + "; here collective " + std::to_string(id) + " is " +
                        std::to_string(len) + " elements of " + to_string(type) + " with " + op_name(op) +
                        ": every member must make the same all_reduce calls");
}

status shm_group::all_reduce(fused_buffer& buf, reduce_op op, uint64_t id, double timeout_s,
                             const std::atomic<bool>& abort, const round_hook& hook) {
  const uint64_t len = buf.size();
  const ring_dtype type = buf.type();
  const std::size_t es = element_size(type);
  const uint64_t per_round = slot_bytes_ / es;
  const uint64_t rounds = (len + per_round - 1) / per_round;
  const uint64_t first = round_ + 1;  // this collective's first round
  // Round k's first element, elements, number and bank.
  auto off_of = [&](uint64_t k) { return k * per_round; };
  auto n_of = [&](uint64_t k) { return std::min(per_round, len - k * per_round); };
  auto bank_of = [&](uint64_t k) { return static_cast<uint32_t>((first + k - 1) % banks_); };
  // The first half of round k: its bank free (every other member released
  // the round that used it before), this member's descriptor, its copy of
  // the other members' segments (its own it sums from its vector), arrived.
  auto arrive = [&](uint64_t k) -> status {
    const uint64_t round = first + k;
    round_ = round;
    if (hook && !hook(round)) return make_error(errc::cancelled, "fault drill");
    const auto r = static_cast<uint32_t>(round);
    const uint32_t bank = bank_of(k);
    if (round > banks_)
      if (auto s = wait_all(c_released, r - banks_, true, timeout_s, abort, what_of[c_released], id, spin_long_us);
          !s.ok())
        return s;
    // The descriptor lives in the round's bank: read before the bank is
    // released, rewritten only when every member has released it.
    describe(bank, id, len, type, static_cast<uint32_t>(op));
    const uint64_t off = off_of(k), n_el = n_of(k);
    const elem_range seg = segment_range(n_el, n_, rank_);
    if (seg.begin > 0) buf.copy_out(elem_range{off, off + seg.begin}, slot(bank, rank_));
    if (seg.end < n_el) buf.copy_out(elem_range{off + seg.end, off + n_el}, slot(bank, rank_) + seg.end * es);
    publish(ctr(c_arrived, rank_), r);
    return {};
  };
  if (rounds == 0) return {};
  if (auto s = arrive(0); !s.ok()) return s;
  for (uint64_t k = 0; k < rounds; ++k) {
    const auto r = static_cast<uint32_t>(first + k);
    const uint32_t bank = bank_of(k);
    const uint64_t off = off_of(k), n_el = n_of(k);
    // The first round waits for the others' callers (they may still be
    // computing): spin briefly, then sleep. Later rounds wait for members
    // already in this collective.
    if (auto s = wait_all(c_arrived, r, true, timeout_s, abort, what_of[c_arrived], id,
                          k == 0 ? spin_short_us : spin_long_us);
        !s.ok())
      return s;
    for (uint32_t j = 0; j < n_; ++j)
      if (auto s = check_descriptor(bank, j, id, len, type, static_cast<uint32_t>(op)); !s.ok()) return s;
    // This member's segment of the round: its own values plus every other
    // slot's, in member order, into its vector and (the last addition) into
    // its slot for the others; only this member computes it.
    const elem_range seg = segment_range(n_el, n_, rank_);
    if (seg.size() > 0) {
      const elem_range mine_r{off + seg.begin, off + seg.end};
      std::byte* out = slot(bank, rank_) + seg.begin * es;
      uint32_t left = n_ - 1;
      if (left == 0) buf.copy_out(mine_r, out);
      for (uint32_t j = 0; j < n_; ++j) {
        if (j == rank_) continue;
        const bool last = --left == 0;
        buf.add_final(mine_r, slot(bank, j) + seg.begin * es, last ? out : nullptr, last ? op : reduce_op::sum,
                      n_);
      }
    }
    publish(ctr(c_reduced, rank_), r);
    // The next round's first half while the others finish this round's sums
    // (another bank, another range of the vector).
    if (k + 1 < rounds)
      if (auto s = arrive(k + 1); !s.ok()) return s;
    if (auto s = wait_all(c_reduced, r, true, timeout_s, abort, what_of[c_reduced], id, spin_long_us); !s.ok())
      return s;
    for (uint32_t j = 0; j < n_; ++j) {
      if (j == rank_) continue;
      const elem_range sj = segment_range(n_el, n_, j);
      if (sj.size() > 0) buf.copy_in(elem_range{off + sj.begin, off + sj.end}, slot(bank, j) + sj.begin * es);
    }
    publish(ctr(c_released, rank_), r);
  }
  return {};
}

status shm_group::broadcast(fused_buffer& buf, uint32_t root, uint64_t id, double timeout_s, double first_timeout_s,
                            const std::atomic<bool>& abort, const round_hook& hook) {
  if (root >= n_) return make_error(errc::invalid_argument, "broadcast from member " + std::to_string(root));
  const uint64_t len = buf.size();
  const ring_dtype type = buf.type();
  const uint64_t per_round = slot_bytes_ / element_size(type);
  for (uint64_t off = 0; off < len; off += per_round) {
    const uint64_t n_el = std::min(per_round, len - off);
    ++round_;
    if (hook && !hook(round_)) return make_error(errc::cancelled, "fault drill");
    const auto r = static_cast<uint32_t>(round_);
    const auto bank = static_cast<uint32_t>((round_ - 1) % banks_);
    if (rank_ == root) {
      if (round_ > banks_)
        if (auto s = wait_all(c_released, r - banks_, true, timeout_s, abort, what_of[c_released], id, spin_long_us);
            !s.ok())
          return s;
      describe(bank, id, len, type, op_broadcast);
      buf.copy_out(elem_range{off, off + n_el}, slot(bank, root));
      publish(ctr(c_arrived, rank_), r);
    } else {
      // Only the root's counter matters here: wait on it alone.
      const double limit = off == 0 ? std::max(timeout_s, first_timeout_s) : timeout_s;
      if (auto s = wait_one(c_arrived, root, r, clock_type::now(), limit, abort, what_of[c_arrived], id,
                            off == 0 ? spin_short_us : spin_long_us);
          !s.ok())
        return s;
      if (auto s = check_descriptor(bank, root, id, len, type, op_broadcast); !s.ok()) return s;
      buf.copy_in(elem_range{off, off + n_el}, slot(bank, root));
    }
    publish(ctr(c_released, rank_), r);
  }
  return {};
}

}  // namespace hetflow::actors::ring
