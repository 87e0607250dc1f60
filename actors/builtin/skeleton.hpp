// Built-in job kinds and actor types (registered by add_builtin_types).
#pragma once

namespace hetflow::actors {
class registry;
}

namespace hetflow::actors::builtin {

// job "skeleton": producer -> transformer -> checker (see skeleton.cpp).
void add_skeleton(registry& reg);

// job "transport_bench": latency and bandwidth between two nodes through the
// node runtime's data plane (see transport_bench.cpp).
void add_transport_bench(registry& reg);

// job "train": strategy "single" trains a zoo model on one device (train.cpp).
void add_train(registry& reg);

}  // namespace hetflow::actors::builtin
