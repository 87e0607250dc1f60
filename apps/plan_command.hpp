// `hetflow plan FILE [--json] [--no-measure]`: what a job would run where,
// without running it. Every job: its actors and their nodes (the same
// expansion the nodes compute). Train jobs with strategy "dp": the replicas,
// the ring order (grouped by host), and how a global batch is split by
// replica speed (topology::split_rows, the rule the replicas apply).
#pragma once

#include <string>
#include <vector>

namespace hetflow::actors {
class registry;
}

namespace hetflow::apps {

int plan_command(const std::vector<std::string>& args, const actors::registry& reg);

}  // namespace hetflow::apps
