// unit: one step of a model's sequence, with forward and backward passes.
//
// Contract (all backends):
//  - prepare(input_shape) sizes the unit for a batch shape (batch first) and
//    returns the output shape. It creates primitives and buffers once per
//    shape: forward/backward then run without allocating. Calling it again
//    with the same shape is cheap; with another shape it re-plans.
//  - forward(x, mode) returns a view of the unit's own output buffer, valid
//    until the next forward/prepare. The unit may keep `x` (the previous
//    unit's output) for backward, so the caller keeps x alive and unchanged
//    until backward returns: models run units in lockstep.
//  - backward(dy, need_input_grad) takes the gradient of the loss w.r.t. the
//    last forward's output, OVERWRITES every parameter's gradient with the
//    gradient for that batch (no accumulation; callers that aggregate several
//    microbatches sum the grads themselves) and returns dL/dx (an empty view
//    when need_input_grad is false: the first unit skips that work).
//    Both must be linear in dy (as the chain rule makes them: no clipping or
//    normalising of gradients inside a unit): a data-parallel replica scales
//    the loss gradient by its share of the global batch instead of every
//    parameter gradient afterwards (kernels/trainer.cpp).
//  - Not thread-safe: one thread drives a unit (see cpu_context).
//
// Parameters use PyTorch's canonical layouts (linear (out, in), conv
// (out, in, kh, kw), per-channel vectors (C)) whatever layout a kernel prefers
// internally, so that save/load, parameter servers and all-reduce see one
// layout on every device.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/layer_spec.hpp"
#include "kernels/tensor.hpp"
#include "schemas/error.hpp"

namespace hetflow::kernels {

enum class mode : uint8_t { train, eval };

// Gradient rows of an embedding table: rows[i] is a distinct table row and
// values row i its gradient. Rows not listed have zero gradient.
struct sparse_rows {
  std::vector<int64_t> rows;
  tensor values;  // (rows.size(), dim)
};

struct parameter {
  std::string name;   // "conv1.weight"
  tensor value;
  tensor grad;        // dense gradient, shape of value (empty when sparse)
  bool sparse = false;
  sparse_rows sparse_grad;  // when sparse
  // Bumped by anything that changes `value` (optimizers, loads), so kernels
  // can cache derived copies (e.g. reordered weights) until it changes.
  uint64_t version = 0;
};

// Non-trainable state saved with the weights (batch norm running stats).
struct state_tensor {
  std::string name;   // "bn1.running_mean"
  tensor value;
};

class unit {
public:
  explicit unit(std::string name) : name_(std::move(name)) {}
  virtual ~unit() = default;
  unit(const unit&) = delete;
  unit& operator=(const unit&) = delete;

  const std::string& name() const noexcept { return name_; }
  virtual layer_kind kind() const noexcept = 0;

  virtual expected<shape> prepare(const shape& input) = 0;
  virtual expected<tensor_view> forward(tensor_view input, mode m) = 0;
  virtual expected<tensor_view> backward(tensor_view grad_output, bool need_input_grad) = 0;

  virtual void parameters(std::vector<parameter*>& out) { (void)out; }
  virtual void state(std::vector<state_tensor*>& out) { (void)out; }

  // Bytes of the buffers this unit sized for the prepared shape (output,
  // input gradient, masks, workspaces, oneDNN layout copies): an upper bound
  // of what one in-flight microbatch costs a pipeline stage.
  virtual uint64_t activation_bytes() const = 0;

  // Reseeds stochastic units (dropout); others ignore it.
  virtual void set_seed(uint64_t seed) { (void)seed; }

protected:
  status shape_mismatch(const shape& got, const shape& want) const {
    return make_error(errc::invalid_argument, "unit " + name_ + ": input shape " + got.to_string() +
                                                  " but prepared for " + want.to_string());
  }

private:
  std::string name_;
};

// What a backend's unit factory returns (cpu::make_unit,
// cuda::context::make_unit).
struct built_unit {
  std::unique_ptr<unit> u;
  shape sample_output;  // output shape of one sample (no batch dimension)
};

}  // namespace hetflow::kernels
