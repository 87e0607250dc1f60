// The node runtime: what `hetflow node FILE --name N` runs.
//
//  main thread                         node actor (CAF)                 head's node actor
//  -----------                         ----------------                 -----------------
//  parse topology, make data plane
//  publish node actor on host:port
//  join: for each peer, connect with
//    retry+backoff until join_timeout,
//    hello(cluster, topology hash,
//    data plane) -> ack(address)
//  joined(peers) --------------------> monitor peers, spawn local
//                                      actors, ready(names, handles) -> all ready?
//                                                                       start(directory) -> every node
//                                      start -> local actors
//                                      ... job runs ...
//                                      done(actor, ok, metrics) ------> all done / one failed?
//                                                                       stop(code, reason) -> every node
//  wait for exit code  <-------------- stop: exit local actors
//  shut down, write report, exit(code)
//
// A peer's death (down_msg; hung peers via CAF heartbeats) stops every node
// with exit code 3 and a message naming the node. SIGINT/SIGTERM stop the
// whole job (exit 130). Nothing waits without a deadline.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace hetflow::actors {

class registry;

// Exit codes of `hetflow node` (and of `hetflow run`, which passes them on).
enum exit_code : int {
  exit_ok = 0,
  exit_job_failed = 1,    // an actor reported failure or died
  exit_usage = 2,         // bad command line or topology
  exit_peer = 3,          // a peer never came, refused us, or died
  exit_interrupted = 130, // SIGINT / SIGTERM
};

struct node_options {
  std::filesystem::path topology;
  std::string name;
  std::filesystem::path report;  // JSON report of this node; empty = none
  std::optional<double> join_timeout_s;  // overrides [cluster] join_timeout
  // --resume: jobs that checkpoint (train, strategy "ps") continue from their
  // newest complete checkpoint; the job sees it as the job parameter "resume".
  bool resume = false;
  // --strategy: what the file's strategy = "auto" resolved to (hetflow run
  // decides once for its nodes); the job sees it as its strategy.
  std::string strategy;
  // --trace: this node's timeline as Chrome trace JSON (kernels/trace.hpp),
  // written when the node ends, also after a failure; empty = none. The
  // caller has checked the path (kernels::trace::check_output_path).
  std::filesystem::path trace;
  // The recorder's bound (kernels::trace::default_max_events; `hetflow`
  // reads HETFLOW_TRACE_MAX_EVENTS).
  std::size_t trace_max_events = 1'000'000;
};

// Runs one node until the job ends; returns the process exit code.
int run_node(const node_options& opts, const registry& reg);

// The CPUs this process may run on (its affinity mask), ascending; every
// CPU of the machine when the mask cannot be read.
std::vector<int> usable_cpus();

}  // namespace hetflow::actors
