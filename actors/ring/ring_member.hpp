// ring_member: one member of a ring all-reduce (actor type "ring_member").
//
// A ring member is a service actor next to a trainer (or a benchmark
// driver) on the same node. The trainer hands it borrowed tensors; the
// members exchange chunks of them with send_wire (by reference on one node,
// through the data plane across nodes) and reduce them in place:
//
//   trainer (detached)            ring_member (detached)          right neighbour
//     all_reduce(tensors) ---req--->  buckets -> collectives  --chunk-->  ...
//     ... keeps computing ...         chunks in, reduce, chunks out <-- left
//     future.get() / callback <-done- (status)
//
// The member never blocks its mailbox on a collective: it reacts to chunk
// messages one at a time, so several collectives can be queued and probes
// from peers are answered while a collective runs. See ring_schedule.hpp for
// the algorithm and ring_member.cpp for the wire format and failure handling.
//
// Members on one host (key `shm`, "auto" by default) do not exchange chunks:
// they share one memory segment (shm_group.hpp) and a worker thread per
// member runs each collective there; in hierarchical mode each host's
// members sum through their host's segment and only the leaders exchange
// chunks.
//
// Contract for callers:
//   - every member of a ring must submit the same sequence of all_reduce
//     calls (same tensor sizes, dtypes and op, in the same order): a
//     mismatch fails the collective with an error naming the member;
//   - the tensors' memory belongs to the caller, must stay alive and must
//     not be read or written until the completion has run;
//   - the completion runs exactly once, on the member's thread (keep it
//     short: set a promise, send a message), with ok or the error that
//     aborted the collective — also when the member stops (job stop).
//
// No CAF header beyond caf/fwd.hpp: callers outside actors/ see plain C++.
#pragma once

#include <caf/fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <span>
#include <string>
#include <vector>

#include "actors/ring/ring_schedule.hpp"
#include "schemas/error.hpp"
#include "topology/catalog.hpp"

namespace hetflow::actors {
class registry;
struct actor_env;
}  // namespace hetflow::actors

namespace hetflow::actors::ring {

// A borrowed tensor, reduced in place. data.size() must be a whole number of
// elements of `type`.
struct ring_tensor {
  ring_dtype type = ring_dtype::f32;
  std::span<std::byte> data;
};

using completion = std::function<void(status)>;

// Generations (failover, the `failover` key): a ring whose members may be
// lost with their nodes drops them and goes on as a smaller ring; each such
// re-forming starts a new generation. A request made for generation g runs
// only in generation g: one made before the caller learnt of the re-forming
// completes with errc::peer_down instead of running in a ring it was not
// meant for. any_generation: run in whatever ring there is (callers that
// never fail over).
constexpr uint32_t any_generation = UINT32_MAX;

// Submits one all-reduce of `tensors` (fused into buckets of up to the
// member's bucket_bytes; each bucket is one ring collective) to the local
// ring member `member`. Returns at once; thread-safe (any thread, any actor).
void all_reduce(const caf::actor& member, std::vector<ring_tensor> tensors, reduce_op op,
                completion done, uint32_t generation = any_generation);
// The same, as a future: for a detached trainer that submits buckets as
// backward produces them and waits for all of them before its optimizer step.
std::future<status> all_reduce(const caf::actor& member, std::vector<ring_tensor> tensors,
                               reduce_op op, uint32_t generation = any_generation);

// The ring as the member sees it now, after dropping members whose nodes
// were lost (failover): its generation and its members in ring order. A
// caller that saw an all-reduce fail asks this to learn whether the ring was
// re-formed (the generation moved on) and who is left.
struct ring_view {
  uint32_t generation = 0;
  std::vector<std::string> members;
};
std::future<expected<ring_view>> current_view(const caf::actor& member);
// No more collectives from this caller: the member finishes the queued ones,
// reports its statistics (report_done) and quits.
void close(const caf::actor& member);

// The actor type's keys (its [[actors]] args), for job kinds that place ring
// members themselves:
//   ring (string list, required): member names in ring order, this one included
//   chunk_bytes (1MiB), bucket_bytes (16MiB), timeout (2s), window (0 = all),
//   failover (false: a lost member stops the job; true: the ring drops the
//   members of lost nodes, fails what was in flight with peer_down and goes
//   on as a new generation), drill ("none" | "stall" | "die"), drill_after
//   (chunks; fault drills)
std::vector<topology::key_spec> ring_member_keys();

caf::actor spawn_ring_member(caf::actor_system& sys, const actor_env& env);

// Registers actor type "ring_member".
void add_ring_member(registry& reg);

}  // namespace hetflow::actors::ring
