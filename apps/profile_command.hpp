// `hetflow profile FILE [--batch B]`: times every unit of the job's model on
// each device of this machine's nodes and prints the table the planner uses
// (forward/backward time, parameter, activation and output bytes).
#pragma once

#include <string>
#include <vector>

namespace hetflow::actors {
class registry;
}

namespace hetflow::apps {

int profile_command(const std::vector<std::string>& args, const actors::registry& reg);

}  // namespace hetflow::apps
