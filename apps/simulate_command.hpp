// `hetflow simulate FILE [--json] [--waves N]`: predicted throughput of a
// train job from profiles, without running it. Strategy "hetpipe": the
// planner's plan replayed event by event (topology/simulator.hpp); "dp" and
// "single": the cost model (topology/cost_model.hpp); "auto": every strategy
// it can estimate, and which it would choose.
//
// Also the HetPipe part of `hetflow plan` (strategies "hetpipe" and "auto"),
// and the up-front refusal of `hetflow run` / `node` for strategies whose
// runtime does not exist yet.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "schemas/error.hpp"
#include "topology/cluster.hpp"
#include "topology/profile_db.hpp"

namespace hetflow::actors {
class registry;
}

namespace hetflow::apps {

int simulate_command(const std::vector<std::string>& args, const actors::registry& reg);

// `hetflow plan` for a train job with strategy "hetpipe" or "auto" (the
// cluster is loaded and its actors placed already). Returns the exit code.
int plan_hetpipe_command(const topology::cluster& c, const std::string& file, bool json);

// The job's profiles: its `profile_file` (relative to the topology), else
// measured here on each distinct cpu device (kind "cpu-tN", N threads);
// `c` gets each device's profile kind filled in where it had none.
expected<topology::profile_db> job_profiles(topology::cluster& c);

// Strategy "auto" for `run` / `node`: the strategy `hetflow plan` would
// choose (single, dp or hetpipe: the shortest predicted epoch, from the
// job's profiles) and why. Every node must run the same one: `hetflow run`
// decides once and passes it to its nodes (`hetflow node --strategy S`); a
// node started on its own decides itself only from a profile_file (measured
// profiles differ from machine to machine).
expected<std::pair<std::string, std::string>> choose_auto_strategy(const topology::cluster& c);

// Before `run` / `node` start FILE's train job: resolves strategy "auto"
// (`strategy`: in, --strategy of `node` or empty; out, the strategy to run,
// empty when the file names one) and refuses, exit code 2 with a message,
// what only plan/simulate support ("hetpipe" with a cuda device; "auto" for
// a node on its own without a profile_file or --strategy); 0 otherwise (also
// when FILE does not parse: the command itself reports that).
// before_measuring: called just before "auto" measures profiles here (`run`
// starts itself again there under the nodes' OpenMP wait policy,
// kernels/cpu/omp_policy.hpp).
int resolve_strategy(const std::string& file, const actors::registry& reg, const char* command,
                     std::string& strategy, const std::function<void()>& before_measuring = {});

}  // namespace hetflow::apps
