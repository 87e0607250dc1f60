// `hetflow run`: starts every node of a topology whose host is this machine
// as a child process, prefixes their output with the node name, forwards
// SIGINT/SIGTERM (a second one kills), never leaves an orphan (children die
// with the launcher via PR_SET_PDEATHSIG), and exits with the job's status.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace hetflow::actors {
class registry;
}
namespace hetflow::topology {
struct cluster;
}

namespace hetflow::apps {

struct launch_options {
  std::filesystem::path topology;
  std::filesystem::path report;  // combined JSON report; empty = none
  // After the job: its loss, accuracy and throughput as an SVG
  // (apps/plot_command.hpp); empty = none. Train jobs only: for any other
  // job, or a failed one, nothing is written and one line says why.
  std::filesystem::path plot;
  // Every local node's timeline merged into one Chrome trace JSON
  // (kernels/trace.hpp); each node writes its own file (--trace to a
  // temporary) and the launcher merges them, also after a failure. Empty =
  // none.
  std::filesystem::path trace;
  std::optional<double> join_timeout_s;
  bool resume = false;  // --resume, passed to every node
  // What strategy "auto" resolved to (apps::resolve_strategy), passed to
  // every node as --strategy; empty: the file's own.
  std::string strategy;
};

int run_local_cluster(const launch_options& opts, const actors::registry& reg);

// The nodes of `cl` on this machine (indices into cl.nodes) and the CPUs
// each will run on under `hetflow run`: its own `cpus`, or what
// pin_local_nodes = "auto" gives it; empty where it is not pinned.
struct local_pinning {
  std::vector<int> nodes;
  std::vector<std::vector<int>> cpus;
};
local_pinning local_node_pinning(const topology::cluster& cl);

}  // namespace hetflow::apps
