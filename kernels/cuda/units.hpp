// Inside libhetflow_cuda.so: one constructor per unit kind (each defined in
// its own .cpp), dispatched by context_impl::make_unit (unit_factory.cpp),
// plus helpers the units share. Mirrors kernels/cpu/units.hpp: same checks,
// same parameter names, same initialisation draws.
#pragma once

#include <new>
#include <string>

#include "kernels/cuda/cuda_context.hpp"

namespace hetflow::kernels::cuda {

using maker = expected<built_unit> (*)(context_impl&, const layer_spec&, const shape& in, rng&,
                                       const std::string& prefix);

expected<built_unit> make_linear(context_impl&, const layer_spec&, const shape& in, rng&, const std::string& prefix);
expected<built_unit> make_conv2d(context_impl&, const layer_spec&, const shape& in, rng&, const std::string& prefix);
expected<built_unit> make_pool(context_impl&, const layer_spec&, const shape& in, rng&, const std::string& prefix);
expected<built_unit> make_batch_norm(context_impl&, const layer_spec&, const shape& in, rng&, const std::string& prefix);
expected<built_unit> make_relu(context_impl&, const layer_spec&, const shape& in, rng&, const std::string& prefix);
expected<built_unit> make_dropout(context_impl&, const layer_spec&, const shape& in, rng&, const std::string& prefix);
expected<built_unit> make_flatten(context_impl&, const layer_spec&, const shape& in, rng&, const std::string& prefix);
expected<built_unit> make_residual(context_impl&, const layer_spec&, const shape& in, rng&, const std::string& prefix);
expected<built_unit> make_dlrm_features(context_impl&, const layer_spec&, const shape& in, rng&,
                                        const std::string& prefix);

// The cpu backend's initialisation (cpu::init_uniform): uniform(-bound,
// bound) drawn on the host in element order, then copied to `t`'s device.
status init_uniform(context_impl& ctx, tensor& t, float bound, rng& init);
// A device parameter of `s` filled with `value`.
status init_filled(context_impl& ctx, tensor& t, float value);

// Runs `fn` (which sizes device buffers) and turns std::bad_alloc into
// errc::out_of_memory naming the unit.
template <class Fn> status sized(context_impl& ctx, const std::string& who, Fn&& fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return make_error(errc::out_of_memory, who + ": " + ctx.where().to_string() +
                                               " is out of memory for this batch size");
  }
}

// Resizes a device buffer (creating it on first use).
inline void ensure(context_impl& ctx, tensor& t, const shape& s, dtype type = dtype::f32) {
  if (t.memory() == nullptr) t = ctx.make_tensor(s, type);
  else t.resize(s, type);
}

// dy must have as many elements as the unit's output y.
inline status check_gradient(const char* kind, const std::string& name, tensor_view dy, const tensor& y) {
  if (dy.numel() == y.numel()) return {};
  return make_error(errc::invalid_argument, std::string(kind) + " " + name + ": gradient " +
                                                dy.shape().to_string() + " does not match output " +
                                                y.shape().to_string());
}

// The gradient before a fused ReLU: dy itself, or dy masked by y > 0 into
// `scratch`.
expected<tensor_view> gradient_before_relu(context_impl& ctx, const char* kind, const std::string& name,
                                           tensor_view dy, const tensor& y, bool relu, tensor& scratch);

// Adds "kind name" to an error.
inline status in_unit(status st, const char* kind, const std::string& name) {
  if (st.ok()) return st;
  return st.with_context(std::string(kind) + " " + name);
}

}  // namespace hetflow::kernels::cuda
