// `hetflow run`: starts every node of a topology whose host is this machine
// as a child process, prefixes their output with the node name, forwards
// SIGINT/SIGTERM (a second one kills), never leaves an orphan (children die
// with the launcher via PR_SET_PDEATHSIG), and exits with the job's status.
#pragma once

#include <filesystem>
#include <optional>

namespace hetflow::actors {
class registry;
}

namespace hetflow::apps {

struct launch_options {
  std::filesystem::path topology;
  std::filesystem::path report;  // combined JSON report; empty = none
  std::optional<double> join_timeout_s;
  bool resume = false;  // --resume, passed to every node
};

int run_local_cluster(const launch_options& opts, const actors::registry& reg);

}  // namespace hetflow::apps
