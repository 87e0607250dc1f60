// The cpu backend's unit constructors: layer_spec -> unit running on oneDNN
// (conv, pool, batch norm, linear) and oneTBB (everything else).
#pragma once

#include <memory>

#include "kernels/cpu/cpu_context.hpp"
#include "kernels/layer_spec.hpp"
#include "kernels/random.hpp"
#include "kernels/unit.hpp"

namespace hetflow::kernels::cpu {

// `sample_input` is one sample's shape (no batch dimension). Parameters are
// initialised from `init` like PyTorch's defaults (uniform +-1/sqrt(fan_in)
// for linear and conv weights and biases; batch norm scale 1, shift 0).
// `prefix` is prepended to parameter names ("block1." ...).
expected<built_unit> make_unit(cpu_context& ctx, const layer_spec& spec, const shape& sample_input,
                               rng& init, const std::string& prefix = {});

// Parameter initialisation shared by the units: uniform(-bound, bound).
void init_uniform(tensor& t, float bound, rng& init);

}  // namespace hetflow::kernels::cpu
