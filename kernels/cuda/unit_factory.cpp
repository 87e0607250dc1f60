// context_impl::make_unit: layer_spec -> cuda unit, and the helpers the
// units share.
#include <vector>

#include "kernels/cuda/ops.hpp"
#include "kernels/cuda/units.hpp"

namespace hetflow::kernels::cuda {

status init_uniform(context_impl& ctx, tensor& t, float bound, rng& init) {
  std::vector<float> host(std::size_t(t.numel()));
  for (auto& v : host) v = init.uniform(-bound, bound);
  HF_RETURN_IF_ERROR(ctx.activate());
  HF_CUDA_CHECK(cudaMemcpyAsync(t.bytes(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice,
                                ctx.stream()));
  return {};
}

status init_filled(context_impl& ctx, tensor& t, float value) {
  HF_RETURN_IF_ERROR(ctx.activate());
  HF_CUDA_CHECK(ops::fill(t.f32(), value, t.numel(), ctx.stream()));
  return {};
}

expected<tensor_view> gradient_before_relu(context_impl& ctx, const char* kind, const std::string& name,
                                           tensor_view dy, const tensor& y, bool relu, tensor& scratch) {
  HF_RETURN_IF_ERROR(check_gradient(kind, name, dy, y));
  HF_RETURN_IF_ERROR(ctx.check_here(dy, std::string(kind) + " " + name));
  if (!relu) return dy;
  HF_CUDA_CHECK(ops::relu_backward(dy.f32(), y.f32(), scratch.f32(), y.numel(), ctx.stream()));
  return tensor_view(scratch.view());
}

expected<built_unit> context_impl::make_unit(const layer_spec& spec, const shape& sample_input, rng& init,
                                             const std::string& prefix) {
  if (!sample_input.valid() || sample_input.rank() == 0 || sample_input.numel() == 0)
    return make_error(errc::invalid_argument,
                      "unit " + spec.name + ": invalid input shape " + sample_input.to_string());
  HF_RETURN_IF_ERROR(activate());
  try {
    switch (spec.kind) {
      case layer_kind::linear: return make_linear(*this, spec, sample_input, init, prefix);
      case layer_kind::conv2d: return make_conv2d(*this, spec, sample_input, init, prefix);
      case layer_kind::max_pool:
      case layer_kind::avg_pool:
      case layer_kind::global_avg_pool: return make_pool(*this, spec, sample_input, init, prefix);
      case layer_kind::relu: return make_relu(*this, spec, sample_input, init, prefix);
      case layer_kind::batch_norm: return make_batch_norm(*this, spec, sample_input, init, prefix);
      case layer_kind::dropout: return make_dropout(*this, spec, sample_input, init, prefix);
      case layer_kind::flatten: return make_flatten(*this, spec, sample_input, init, prefix);
      case layer_kind::residual: return make_residual(*this, spec, sample_input, init, prefix);
      case layer_kind::dlrm_interaction: return make_dlrm_features(*this, spec, sample_input, init, prefix);
      case layer_kind::custom:
        return make_error(errc::unsupported, "unit " + prefix + spec.name + ": layer '" + spec.custom_type +
                                                 "' comes from a plugin and runs on cpu devices only, not on " +
                                                 where().to_string());
    }
  } catch (const std::bad_alloc&) {
    return make_error(errc::out_of_memory, "unit " + prefix + spec.name + ": " + where().to_string() +
                                               " has no room for its parameters");
  }
  return make_error(errc::invalid_argument, "unit " + spec.name + ": unknown layer kind");
}

}  // namespace hetflow::kernels::cuda
