// waits: who waits on whom right now, and whether anything still advances;
// the node's watchdog (node_runtime, [cluster] `watchdog`) reads both and,
// when nothing has advanced for that long, logs every open wait, so a stall
// is explained before any timeout ends it.
//
//   waits::scope w("trainer", "stream_shard_1 on node 'n1'", "batch 3 of epoch 2");
//   ... blocking receive ...
//   // ~scope: the wait is over
//   waits::progress();  // a step, a segment, a collective finished
//
// A scope can also be the wait's span on a trace track (kernels/trace.hpp),
// so one object records the wait for both the watchdog and --trace.
//
// Thread-safe: begin/end take one mutex (a wait is per step or per batch,
// never per element); progress() is one relaxed atomic increment. Open waits
// are bounded by the number of waiting threads and actors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/trace.hpp"

namespace hetflow::kernels::waits {

using id = uint64_t;

// Opens a wait: `actor` waits on `on` (an actor, a node, "the ring") for
// `what`. Returns its id for end().
id begin(std::string actor, std::string on, std::string what);
// Closes a wait (unknown or 0 ids: nothing).
void end(id w) noexcept;

// The wait's trace span: an event `name` (a literal) on `track`, with one
// integer argument; no name: no span.
struct span {
  trace::track_id track = 0;
  const char* name = nullptr;
  const char* arg_name = nullptr;
  int64_t arg = 0;
};

class scope {
public:
  scope(std::string actor, std::string on, std::string what, span s = {})
      : id_(begin(std::move(actor), std::move(on), std::move(what))), span_(s.name, s.track, s.arg_name, s.arg) {}
  ~scope() { end(); }
  scope(const scope&) = delete;
  scope& operator=(const scope&) = delete;
  void end() noexcept {
    waits::end(id_);
    id_ = 0;
    span_.end();
  }

private:
  id id_;
  // Not std::optional: GCC 12 warned that its t0_ may be used uninitialized.
  trace::scope span_;  // a null span name: none
};

// The name of the actor this thread works for ("" if none): lets kernels
// code (the trainer) open waits without knowing its actor.
const std::string& current_actor() noexcept;
class actor_scope {
public:
  explicit actor_scope(std::string name);
  ~actor_scope();
  actor_scope(const actor_scope&) = delete;
  actor_scope& operator=(const actor_scope&) = delete;

private:
  std::string prev_;
};

// Something advanced (a training step, a preprocess segment, a batch built).
void progress() noexcept;
uint64_t progress_count() noexcept;

struct entry {
  std::string actor, on, what;
  double seconds = 0;  // open for
};
// The open waits, longest first.
std::vector<entry> snapshot();
// "trainer waits on stream_shard_1 on node 'n1' for batch 3 of epoch 2 (4.1 s); ..."
// or "no actor is waiting on another (a long computation, or a stuck one)".
std::string describe(const std::vector<entry>& open);

void reset();  // tests

}  // namespace hetflow::kernels::waits
