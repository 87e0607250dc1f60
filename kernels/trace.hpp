// trace: a process-wide, bounded timeline recorder; `hetflow run/node
// --trace PATH` writes it as Chrome trace JSON (the Trace Event Format,
// opens in Perfetto and chrome://tracing).
//
//   {"traceEvents":[
//   {"name":"process_name","ph":"M","pid":0,"args":{"name":"node n0"}},
//   {"name":"thread_name","ph":"M","pid":0,"tid":1,"args":{"name":"trainer"}},
//   {"name":"forward+backward","ph":"X","pid":0,"tid":1,"ts":...,"dur":...,"args":{"step":3}},
//   ...
//   ],
//   "displayTimeUnit":"ms",
//   "otherData":{...}}
//
// pid = the node's index in the topology, tid = a track (one per actor,
// registered by name with track()). ts/dur are microseconds of
// CLOCK_REALTIME, so the nodes of one machine line up in a merged file;
// nodes on several hosts line up only as well as their clocks are
// synchronised (NTP/PTP).
//
// Cost. Off (the default): enabled() is one relaxed atomic load and a scope
// does nothing else. On: an event is two clock reads, one fetch_add on a
// shared counter and a 48-byte store into a preallocated-on-demand slot; no
// lock, no allocation except one chunk of slots per 8192 events. Events
// beyond max_events are dropped and counted (the count goes into the file),
// so memory stays bounded (max_events * 48 bytes) whatever the job's length.
//
// Thread affinity: record from any thread (CAF scheduler threads, detached
// actors, oneTBB workers). start(), write_file() and reset() are called by
// one thread (the node's main thread); write_file() may run while other
// threads still record (events that are not complete yet are left out).
//
// Names (event names, argument names) must be string literals or other
// strings that outlive the process's last write_file(): events keep the
// pointer. Track names are copied.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "schemas/error.hpp"

namespace hetflow::kernels::trace {

// A timeline track (a "thread" in the trace viewer): one per actor. 0: no
// track (events then go to a track named "(other)").
using track_id = uint32_t;

constexpr std::size_t default_max_events = 1'000'000;

namespace detail {
inline std::atomic<bool> on{false};
}  // namespace detail

// Whether recording is on (start() was called). One relaxed load.
inline bool enabled() noexcept { return detail::on.load(std::memory_order_relaxed); }

// Microseconds of CLOCK_REALTIME.
int64_t now_us() noexcept;

// Starts recording for node `node_name` with index `pid`. At most
// `max_events` events are kept (> 0). Calling it again while recording
// changes the node and bound only.
void start(std::string node_name, int pid, std::size_t max_events = default_max_events);

// The bound from the environment (HETFLOW_TRACE_MAX_EVENTS, a positive
// integer), else default_max_events; an error names the bad value.
expected<std::size_t> max_events_from_env();

// Stops recording and forgets every event and track (tests; the next
// start() begins afresh). No other thread may record meanwhile.
void reset();

// The track named `name`, registered on first use (same name, same id).
// Returns 0 while recording is off. Takes a lock: call it once per actor,
// not per event.
track_id track(std::string_view name);

// A copy of `s` that lives until the process ends, for event names built at
// run time (a model's unit names; the model may not outlive the trace). The
// same text gives the same pointer. Takes a lock: once per name, not per
// event.
const char* intern(std::string_view s);

// The calling thread's current track (0 if none): what kernels code records
// on when it does not know its actor (the trainer's loop).
track_id current_track() noexcept;

// Sets the calling thread's current track for its lifetime.
class track_scope {
public:
  explicit track_scope(track_id t) noexcept;
  ~track_scope();
  track_scope(const track_scope&) = delete;
  track_scope& operator=(const track_scope&) = delete;

private:
  track_id previous_;
};

// Records a complete event ("ph":"X") of `dur_us` microseconds from `ts_us`
// on track `t`, with up to one integer argument (arg_name null: none).
// Does nothing while recording is off.
void complete(track_id t, const char* name, int64_t ts_us, int64_t dur_us, const char* arg_name = nullptr,
              int64_t arg = 0) noexcept;

// One end of a flow arrow ("ph":"s" where it starts, "ph":"f" where it
// ends; both bound to the slice open on their track at that instant, which
// the caller records: a viewer draws an arrow from one slice to the other).
// Both ends carry the same `id`, also when they lie in two nodes' files
// (merged by trace-merge). Does nothing while recording is off.
void flow(track_id t, const char* name, int64_t ts_us, uint64_t id, bool start) noexcept;

// RAII span: a complete event from construction to destruction (or end()).
//   trace::scope s("optimizer", tk);
// A null name records nothing (an optional span without std::optional).
class scope {
public:
  explicit scope(const char* name, track_id t = current_track(), const char* arg_name = nullptr,
                 int64_t arg = 0) noexcept
      : name_(name), arg_name_(arg_name), arg_(arg), track_(t) {
    if (name != nullptr && enabled()) t0_ = now_us();
  }
  ~scope() { end(); }
  scope(const scope&) = delete;
  scope& operator=(const scope&) = delete;

  // Sets (or replaces) the event's integer argument.
  void arg(const char* arg_name, int64_t value) noexcept {
    arg_name_ = arg_name;
    arg_ = value;
  }
  // Ends the span now (once; the destructor then does nothing).
  void end() noexcept {
    if (t0_ < 0) return;
    complete(track_, name_, t0_, now_us() - t0_, arg_name_, arg_);
    t0_ = -1;
  }

private:
  const char* name_;
  const char* arg_name_;
  int64_t arg_;
  int64_t t0_ = -1;  // -1: not recording
  track_id track_;
};

struct counts {
  std::size_t events = 0;   // written (complete events)
  std::size_t dropped = 0;  // beyond max_events
  std::size_t tracks = 0;
};

// Events, tracks and drops recorded so far.
counts current_counts() noexcept;

// The trace document of everything recorded so far (events sorted by track,
// then start time). `note` goes into otherData.status (e.g. "job failed").
std::string to_json(std::string_view note = {});

// Writes to_json() to `path` (a temporary beside it, then renamed).
expected<counts> write_file(const std::filesystem::path& path, std::string_view note = {});

// Checks an output path before a job runs: a file name whose directory
// exists and is writable. Empty message: fine.
std::string check_output_path(const std::filesystem::path& path);

// Merges node trace files (written by write_file) into one document at
// `out`: every node's metadata and events, in order. Files that are missing
// or not trace files are skipped and named in `skipped`. `note` as above.
struct merge_result {
  std::size_t events = 0;   // events taken (metadata not counted)
  std::size_t files = 0;    // files merged
  std::size_t dropped = 0;  // the nodes' dropped events, summed
  std::vector<std::string> skipped;  // "FILE: why"
};
expected<merge_result> merge_files(const std::vector<std::filesystem::path>& inputs,
                                   const std::filesystem::path& out, std::string_view note = {});

}  // namespace hetflow::kernels::trace
