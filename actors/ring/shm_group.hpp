// shm_group: the ring members of one host reduce through one shared-memory
// segment instead of chunk messages (ring_member's `shm` key).
//
// No CAF: the ring member creates or opens the group, hands collectives to
// a worker thread that calls all_reduce, and a test drives it from threads.
//
// Layout. A header (magic, members, a nonce, sizes), per member four
// counters on their own cache lines (checked in, arrived, reduced, released:
// round numbers), per bank and member a descriptor of the collective the
// member runs in that bank's round, then `banks` banks of one slot per member
// of `slot_bytes` each.
//
// A collective of `len` elements runs in rounds of up to slot_bytes; round R
// uses bank R mod banks. Member i, in round R:
//   1. waits until every member released round R - banks (its bank is free);
//   2. copies its part of the vector into its slot, publishes arrived = R;
//   3. waits until every member arrived at R, then sums segment i of the
//      round (ring_schedule's segment_range over the members) over every
//      slot into its own slot (average: divided by the members) and into
//      its vector, publishes reduced = R;
//   4. waits until every member reduced R, copies the other segments from
//      their owners' slots into its vector, publishes released = R.
// Steps 1-2 of round R + 1 run between steps 3 and 4 of round R (another
// bank, another range of the vector): a member copies its next round in
// while the others finish their sums.
// Each element is summed by one member only, so every member ends with
// bit-identical values; integers sum exactly (wrapping). A member reads
// and writes about 3x the vector's bytes in all, in slots small enough to
// stay in the caches the members share, and nothing goes through the
// kernel except futex wake-ups of a member that had to sleep.
//
// Waiting: a short spin, then a futex wait on the counter (shared,
// cross-process), a few milliseconds at a time so that `abort` and the
// deadline are checked. A member whose counter does not move for `timeout`
// seconds is named in the error ("ring member 'r1' has not arrived at round
// 17 ..."); a member that dies leaves its counters where they were, so the
// others fail the same way.
//
// Every member must run the same collectives in the same order (ring_member's
// contract): each member's descriptor (collective id, elements, dtype, op) is
// compared at every round and a mismatch fails with both descriptions.
// Descriptors are per bank, so a member that already started its next
// collective cannot overwrite one another member is about to check.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/ring/fused_buffer.hpp"
#include "schemas/error.hpp"

namespace hetflow::actors::ring {

class shm_group {
public:
  struct options {
    uint64_t slot_bytes = uint64_t{256} << 10;  // per member and bank
    uint32_t banks = 4;
  };
  // The longest group (members on one host).
  static constexpr uint32_t max_members = 256;

  // Creates a fresh segment (a new name under /dev/shm) for `members`
  // members; this process is rank 0. `nonce` is written into the header for
  // the others to check.
  static expected<std::unique_ptr<shm_group>> create(uint32_t members, uint64_t nonce, options opt);
  // Maps the segment another member created; checks members and nonce.
  static expected<std::unique_ptr<shm_group>> open(const std::string& name, uint32_t members, uint32_t rank,
                                                   uint64_t nonce);
  ~shm_group();
  shm_group(const shm_group&) = delete;
  shm_group& operator=(const shm_group&) = delete;

  const std::string& name() const noexcept { return name_; }

  // Names for errors (`names[j]` describes member j) and how long a member
  // may go without moving before it is blamed.
  void set_names(std::vector<std::string> names) { names_ = std::move(names); }
  // A wait that outlasts the spin opens a kernels::waits entry ("ACTOR waits
  // on NAME for round R of collective C (shared memory)", what the node's
  // watchdog prints) and, when tracing, a span on `track`.
  void set_waiter(std::string actor, uint64_t track) {
    actor_ = std::move(actor);
    track_ = track;
  }

  // Waits until every member has mapped the segment; the creator then
  // removes its name (the memory lives on while mapped). Once per group.
  status check_in(double timeout_s, const std::atomic<bool>& abort);

  // Called once per round (fault drills): false stops the collective where
  // it is, as a member that stalls or dies would.
  using round_hook = std::function<bool(uint64_t round)>;

  // One all-reduce of `buf` in place. `id` is the collective's id (checked
  // against the others'). timeout_s: the longest wait for another member.
  status all_reduce(fused_buffer& buf, reduce_op op, uint64_t id, double timeout_s,
                    const std::atomic<bool>& abort, const round_hook& hook = {});

  // `root`'s buffer to every other member's, in rounds like all_reduce (the
  // root copies into its slot, the others copy out). Hierarchical rings: the
  // host's leader hands back the ring's result. first_timeout_s: the longest
  // wait for the root's first round (the root may still be running the
  // inter-host ring); later rounds use timeout_s.
  status broadcast(fused_buffer& buf, uint32_t root, uint64_t id, double timeout_s, double first_timeout_s,
                   const std::atomic<bool>& abort, const round_hook& hook = {});

  // Rounds run so far (every collective of every member adds the same).
  uint64_t rounds() const noexcept { return round_; }

  // Removes /dev/shm names of segments whose creator died before removing
  // them (the pid in the name is gone) and that are older than min_age.
  // create() calls it.
  static void remove_stale_segments(std::chrono::seconds min_age = std::chrono::seconds(600)) noexcept;

private:
  shm_group() = default;
  struct header;
  struct alignas(64) counter {
    std::atomic<uint32_t> v{0};
  };
  struct descriptor;

  counter& ctr(int which, uint32_t member) const noexcept;
  descriptor& desc(uint32_t bank, uint32_t member) const noexcept;
  std::byte* slot(uint32_t bank, uint32_t member) const noexcept;
  void publish(counter& c, uint32_t value) noexcept;
  // Waits until counter `which` of every member (but this one when
  // skip_self) reaches `target`.
  status wait_all(int which, uint32_t target, bool skip_self, double timeout_s, const std::atomic<bool>& abort,
                  const char* what, uint64_t id, int spin_us);
  status wait_one(int which, uint32_t member, uint32_t target, std::chrono::steady_clock::time_point since,
                  double timeout_s, const std::atomic<bool>& abort, const char* what, uint64_t id, int spin_us);
  std::string who(uint32_t member) const;
  // This member's descriptor of collective `id`, and the check of member j's.
  void describe(uint32_t bank, uint64_t id, uint64_t len, ring_dtype type, uint32_t op);
  status check_descriptor(uint32_t bank, uint32_t j, uint64_t id, uint64_t len, ring_dtype type, uint32_t op) const;
  status map(int fd, uint64_t bytes);

  std::string name_;
  bool owner_ = false;  // created it: removes the name after check_in
  bool named_ = false;  // the name still exists
  uint32_t n_ = 0, rank_ = 0, banks_ = 0;
  uint64_t slot_bytes_ = 0;
  void* base_ = nullptr;
  uint64_t bytes_ = 0;
  uint64_t round_ = 0;
  std::vector<std::string> names_;
  std::string actor_;
  uint64_t track_ = 0;
};

}  // namespace hetflow::actors::ring
