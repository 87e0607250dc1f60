// Internal to the cpu backend: one constructor per unit kind (each defined in
// its own .cpp). Use make_unit (unit_factory.hpp) instead.
#pragma once

#include <string>

#include "kernels/cpu/unit_factory.hpp"

namespace hetflow::kernels::cpu {

expected<built_unit> make_linear(cpu_context&, const layer_spec&, const shape& in, rng&, const std::string& prefix);
expected<built_unit> make_conv2d(cpu_context&, const layer_spec&, const shape& in, rng&, const std::string& prefix);
expected<built_unit> make_pool(cpu_context&, const layer_spec&, const shape& in, rng&, const std::string& prefix);
expected<built_unit> make_batch_norm(cpu_context&, const layer_spec&, const shape& in, rng&, const std::string& prefix);
expected<built_unit> make_relu(cpu_context&, const layer_spec&, const shape& in, rng&, const std::string& prefix);
expected<built_unit> make_dropout(cpu_context&, const layer_spec&, const shape& in, rng&, const std::string& prefix);
expected<built_unit> make_flatten(cpu_context&, const layer_spec&, const shape& in, rng&, const std::string& prefix);
expected<built_unit> make_residual(cpu_context&, const layer_spec&, const shape& in, rng&, const std::string& prefix);
expected<built_unit> make_dlrm_features(cpu_context&, const layer_spec&, const shape& in, rng&, const std::string& prefix);

}  // namespace hetflow::kernels::cpu
