// `hetflow profile FILE [--batch B]`: times every unit of the job's model on
// each device of this machine's nodes and prints the table the planner uses
// (forward/backward time, parameter, activation and output bytes).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "actors/builtin/job_profiles.hpp"
#include "kernels/layer_spec.hpp"
#include "schemas/error.hpp"
#include "topology/cluster.hpp"

namespace hetflow::actors {
class registry;
}

namespace hetflow::apps {

int profile_command(const std::vector<std::string>& args, const actors::registry& reg);

// The topology in `file`, or nothing after printing every problem as
// FILE:LINE:COL: error: ... (what `plan` and `profile` do before their work).
std::optional<topology::cluster> load_or_report(const std::string& file, const actors::registry& reg);

// The model of a train job (actors/builtin/job_profiles.hpp).
using actors::train_model_spec;

}  // namespace hetflow::apps
