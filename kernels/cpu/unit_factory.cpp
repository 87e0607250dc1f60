#include "kernels/cpu/unit_factory.hpp"

#include "kernels/cpu/units.hpp"
#include "kernels/custom_layer.hpp"

namespace hetflow::kernels::cpu {

void init_uniform(tensor& t, float bound, rng& init) {
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = init.uniform(-bound, bound);
}

expected<built_unit> make_unit(cpu_context& ctx, const layer_spec& spec, const shape& sample_input, rng& init,
                               const std::string& prefix) {
  if (!sample_input.valid() || sample_input.rank() == 0 || sample_input.numel() == 0)
    return make_error(errc::invalid_argument,
                      "unit " + spec.name + ": invalid input shape " + sample_input.to_string());
  switch (spec.kind) {
    case layer_kind::linear: return make_linear(ctx, spec, sample_input, init, prefix);
    case layer_kind::conv2d: return make_conv2d(ctx, spec, sample_input, init, prefix);
    case layer_kind::max_pool:
    case layer_kind::avg_pool:
    case layer_kind::global_avg_pool: return make_pool(ctx, spec, sample_input, init, prefix);
    case layer_kind::relu: return make_relu(ctx, spec, sample_input, init, prefix);
    case layer_kind::batch_norm: return make_batch_norm(ctx, spec, sample_input, init, prefix);
    case layer_kind::dropout: return make_dropout(ctx, spec, sample_input, init, prefix);
    case layer_kind::flatten: return make_flatten(ctx, spec, sample_input, init, prefix);
    case layer_kind::residual: return make_residual(ctx, spec, sample_input, init, prefix);
    case layer_kind::dlrm_interaction: return make_dlrm_features(ctx, spec, sample_input, init, prefix);
    case layer_kind::custom: return make_custom_unit(spec, sample_input, init, prefix);
  }
  return make_error(errc::invalid_argument, "unit " + spec.name + ": unknown layer kind");
}

}  // namespace hetflow::kernels::cpu
