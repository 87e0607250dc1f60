// model: a sequence of units built for one device from a model_spec, plus
// whole-model and unit-range forward/backward (a pipeline stage runs a range).
//
// Thread affinity: one thread drives a model, inside context().run(...) so
// that oneDNN and oneTBB use the device's thread count.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/device_context.hpp"
#include "kernels/layer_spec.hpp"
#include "kernels/unit.hpp"

namespace hetflow::kernels {

struct build_options {
  int threads = 0;        // cpu threads; <= 0: all hardware threads
  uint64_t seed = 1;      // parameter initialisation and dropout masks
};

class model {
public:
  model(model_spec spec, std::shared_ptr<device_context> ctx, std::vector<std::unique_ptr<unit>> units,
        std::vector<shape> sample_shapes);
  model(model&&) noexcept = default;
  model& operator=(model&&) noexcept = default;

  const model_spec& spec() const noexcept { return spec_; }
  const std::string& name() const noexcept { return spec_.name; }
  device where() const noexcept { return ctx_->where(); }
  device_context& context() noexcept { return *ctx_; }

  std::size_t size() const noexcept { return units_.size(); }
  unit& at(std::size_t i) noexcept { return *units_[i]; }
  // One sample's shape entering unit i (i == size(): the model's output).
  const shape& sample_shape(std::size_t i) const noexcept { return sample_shapes_[i]; }

  // Runs units [first, last) forward; input is (N, sample_shape(first)...).
  expected<tensor_view> forward(tensor_view input, mode m, std::size_t first = 0,
                                std::size_t last = std::size_t(-1));
  // Backward through units [first, last) (the same range as the forward
  // before it). Returns dL/d(input) when need_input_grad, else an empty view.
  expected<tensor_view> backward(tensor_view grad_output, bool need_input_grad = false,
                                 std::size_t first = 0, std::size_t last = std::size_t(-1));

  // Trainable parameters and saved state, in unit order (stable names).
  std::vector<parameter*> parameters();
  std::vector<state_tensor*> state();
  int64_t parameter_count();
  // Reseeds stochastic units (dropout).
  void set_seed(uint64_t seed);

private:
  // While tracing (--trace): one span per unit on the calling thread's track,
  // named after the unit ("conv1", "conv1 backward"); interned names, built
  // on the first traced pass. On a cuda device the spans time the launches.
  void note_trace_names();

  model_spec spec_;
  std::shared_ptr<device_context> ctx_;
  std::vector<std::unique_ptr<unit>> units_;
  std::vector<shape> sample_shapes_;
  std::vector<const char*> trace_names_;  // 2 per unit: forward, backward
};

// Instantiates `spec` on `where`. errc::unsupported, saying why, for a cuda
// device where the CUDA module, a driver or that device is missing;
// errc::invalid_argument naming the layer for specs that do not fit their
// input. The same seed gives the same initial parameters on cpu and cuda.
// A cuda model's tensors (parameters, state, unit outputs) live on the
// device: feed it device inputs (device_context::copy, copy_to_device).
expected<model> build_model(const model_spec& spec, device where, const build_options& options = {});

}  // namespace hetflow::kernels
