// Job kind "preprocess": Criteo text -> packed records across the topology's
// nodes (preprocess.cpp). Registered by add_builtin_types.
#pragma once

namespace hetflow::actors {
class registry;
}

namespace hetflow::actors::builtin {

void add_preprocess(registry& reg);

}  // namespace hetflow::actors::builtin
