// `hetflow shell HOST:PORT [--topology FILE] [-c COMMAND] [--json] [--timeout S]`:
// the interactive actor shell (issue 8), client side. The CAF part is
// actors/shell_client; each node answers about itself
// (actors/shell_service) and this file fans out, merges and prints.
#pragma once

#include <string>
#include <vector>

namespace hetflow::actors {
class registry;
}

namespace hetflow::apps {

// Exit status: 0 ok, 1 a command failed (unknown command or actor, a
// refused kill or pause, `set staleness` with no HetPipe shard), 2 bad
// usage, 3 the node at HOST:PORT is unreachable or refused the shell.
int shell_command(const std::vector<std::string>& args, actors::registry& reg);

}  // namespace hetflow::apps
