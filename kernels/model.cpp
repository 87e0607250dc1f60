#include "kernels/model.hpp"

#include <algorithm>
#include <functional>
#include <new>

#include "kernels/cpu/cpu_context.hpp"
#include "kernels/cpu/unit_factory.hpp"
#include "kernels/cuda/cuda_api.hpp"
#include "kernels/cuda/cuda_loader.hpp"
#include "kernels/trace.hpp"

namespace hetflow::kernels {

const char* to_string(math_mode m) noexcept {
  switch (m) {
    case math_mode::f32: return "f32";
    case math_mode::tf32: return "tf32";
    case math_mode::bf16: return "bf16";
    case math_mode::f16: return "f16";
  }
  return "?";
}

bool parse_math_mode(std::string_view text, math_mode& out) noexcept {
  for (math_mode m : {math_mode::f32, math_mode::tf32, math_mode::bf16, math_mode::f16})
    if (text == to_string(m)) {
      out = m;
      return true;
    }
  return false;
}

expected<std::shared_ptr<device_context>> make_device_context(device where, int threads) {
  if (where.kind == device_kind::cpu) return std::shared_ptr<device_context>(std::make_shared<cpu::cpu_context>(threads));
  // cuda: errc::unsupported naming what is missing (module, driver, device).
  HF_ASSIGN_OR_RETURN(std::shared_ptr<cuda::context> ctx, make_cuda_context(where.index));
  return std::shared_ptr<device_context>(std::move(ctx));
}

expected<tensor> copy_to_device(device_context& ctx, tensor_view v) {
  tensor t;
  try {
    auto mem = ctx.memory();
    t = mem ? tensor::empty_on(std::move(mem), v.shape(), v.type()) : tensor::empty(v.shape(), v.type());
  } catch (const std::bad_alloc&) {
    return make_error(errc::out_of_memory, ctx.where().to_string() + ": no room for " + v.shape().to_string());
  }
  HF_RETURN_IF_ERROR(ctx.copy(v, t.mutable_view()));
  return t;
}

expected<tensor> copy_to_host(device_context& ctx, tensor_view v) {
  tensor t = tensor::empty(v.shape(), v.type());
  HF_RETURN_IF_ERROR(ctx.copy(v, t.mutable_view()));
  return t;
}

model::model(model_spec spec, std::shared_ptr<device_context> ctx, std::vector<std::unique_ptr<unit>> units,
             std::vector<shape> sample_shapes)
    : spec_(std::move(spec)), ctx_(std::move(ctx)), units_(std::move(units)),
      sample_shapes_(std::move(sample_shapes)) {}

void model::note_trace_names() {
  if (trace_names_.size() == 2 * units_.size()) return;
  trace_names_.clear();
  for (const auto& u : units_) {
    trace_names_.push_back(trace::intern(u->name()));
    trace_names_.push_back(trace::intern(u->name() + " backward"));
  }
}

expected<tensor_view> model::forward(tensor_view input, mode m, std::size_t first, std::size_t last) {
  last = std::min(last, units_.size());
  const bool tracing = trace::enabled();
  if (tracing) note_trace_names();
  tensor_view x = input;
  for (std::size_t i = first; i < last; ++i) {
    const int64_t t0 = tracing ? trace::now_us() : 0;
    auto y = units_[i]->forward(x, m);
    if (!y) return y.error();
    if (tracing) trace::complete(trace::current_track(), trace_names_[2 * i], t0, trace::now_us() - t0);
    x = *y;
  }
  return x;
}

expected<tensor_view> model::backward(tensor_view grad_output, bool need_input_grad, std::size_t first,
                                      std::size_t last) {
  last = std::min(last, units_.size());
  const bool tracing = trace::enabled();
  if (tracing) note_trace_names();
  tensor_view g = grad_output;
  for (std::size_t i = last; i-- > first;) {
    const int64_t t0 = tracing ? trace::now_us() : 0;
    auto d = units_[i]->backward(g, i > first || need_input_grad);
    if (!d) return d.error();
    if (tracing) trace::complete(trace::current_track(), trace_names_[2 * i + 1], t0, trace::now_us() - t0);
    g = *d;
  }
  return need_input_grad ? g : tensor_view{};
}

std::vector<parameter*> model::parameters() {
  std::vector<parameter*> out;
  for (auto& u : units_) u->parameters(out);
  return out;
}

std::vector<state_tensor*> model::state() {
  std::vector<state_tensor*> out;
  for (auto& u : units_) u->state(out);
  return out;
}

int64_t model::parameter_count() {
  int64_t n = 0;
  for (parameter* p : parameters()) n += p->value.numel();
  return n;
}

void model::set_seed(uint64_t seed) {
  for (auto& u : units_) u->set_seed(seed = splitmix64(seed));
}

expected<model> build_model(const model_spec& spec, device where, const build_options& options) {
  HF_ASSIGN_OR_RETURN(std::shared_ptr<device_context> ctx, make_device_context(where, options.threads));
  // The backend's unit factory. The only cuda device_context is the module's
  // cuda::context (a static_cast: RTTI does not cross the dlopen boundary
  // reliably).
  std::function<expected<built_unit>(const layer_spec&, const shape&, rng&)> make;
  if (ctx->where().kind == device_kind::cuda) {
    auto& cuda_ctx = static_cast<cuda::context&>(*ctx);
    make = [&cuda_ctx](const layer_spec& ls, const shape& in, rng& r) { return cuda_ctx.make_unit(ls, in, r); };
  } else if (auto* cpu_ctx = dynamic_cast<cpu::cpu_context*>(ctx.get())) {
    make = [cpu_ctx](const layer_spec& ls, const shape& in, rng& r) { return cpu::make_unit(*cpu_ctx, ls, in, r); };
  } else {
    return make_error(errc::unsupported, "build_model: no backend for " + where.to_string());
  }
  rng init(options.seed);
  std::vector<std::unique_ptr<unit>> units;
  std::vector<shape> shapes{spec.input};
  status st;
  // Primitive creation may size work splits by the thread count (cpu) or
  // need the device current (cuda): build on the context's thread.
  ctx->run([&] {
    for (const layer_spec& ls : spec.layers) {
      auto b = make(ls, shapes.back(), init);
      if (!b) {
        st = b.error().with_context("model " + spec.name);
        return;
      }
      units.push_back(std::move(b->u));
      shapes.push_back(b->sample_output);
    }
  });
  if (!st.ok()) return st;
  model m(spec, std::move(ctx), std::move(units), std::move(shapes));
  m.set_seed(options.seed ^ 0xd209f0b7ull);
  return m;
}

}  // namespace hetflow::kernels
