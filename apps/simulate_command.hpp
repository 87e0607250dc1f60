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

#include <string>
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

// Exit code 2 with a message for `run` / `node` when FILE's train job asks
// for what only plan/simulate support (strategy "auto"; "hetpipe" with a
// cuda device); 0 otherwise (also when FILE does not parse: the command
// itself reports that).
int refuse_plan_only_strategy(const std::string& file, const actors::registry& reg, const char* command);

}  // namespace hetflow::apps
