// Optimizers with PyTorch's update rules, applied in place to parameters:
//
//   sgd:  d = g + wd*w;  buf = momentum*buf + d (buf = d on the first step);
//         w -= lr * (nesterov ? d + momentum*buf : buf)        (momentum > 0)
//         w -= lr * d                                          (momentum = 0)
//   adam: g += wd*w; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
//         w -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
//
// Sparse parameters (embedding tables) are updated lazily: only the rows in
// their sparse gradient, with the same rules applied to those rows' state
// (weight decay only on touched rows; Adam's t counts optimizer steps).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/unit.hpp"
#include "schemas/error.hpp"

namespace hetflow::kernels {

class device_context;

enum class optimizer_kind : uint8_t { sgd, adam };

struct optimizer_config {
  optimizer_kind kind = optimizer_kind::sgd;
  double lr = 0.01;
  double momentum = 0.0;       // sgd
  bool nesterov = false;       // sgd
  double weight_decay = 0.0;
  double beta1 = 0.9;          // adam
  double beta2 = 0.999;        // adam
  double eps = 1e-8;           // adam
};

class optimizer {
public:
  virtual ~optimizer() = default;
  // Applies one update with learning rate `lr` (the schedule's value) to
  // every parameter from its current gradient, and bumps its version. The
  // same parameter list, in the same order, every step.
  virtual status step(std::span<parameter* const> params, double lr) = 0;
  // step(), and each weight's change added to `sums[i]` (numel floats of
  // parameter i, on the host): sums[i][k] += after - before, as a copy of the
  // weights before the step and a pass of d += a - b after it would (the
  // same floats), or with add = false stored there (sums[i][k] = after -
  // before: a wave's first step, into a reused buffer), for HetPipe's
  // overlapped waves. The cpu optimizers do it in the step's own pass over
  // the weights (no copy); others (the cuda optimizer, whose library does
  // without this file's) say unsupported.
  virtual status step_summed(std::span<parameter* const> params, double lr, std::span<float* const> sums,
                             bool add) {
    (void)params, (void)lr, (void)sums, (void)add;
    return status(errc::unsupported, "this optimizer cannot sum its steps into host buffers");
  }
  // Optimizer state (momentum buffers, Adam moments) for checkpoints; valid
  // after the first step.
  virtual std::vector<state_tensor*> state() = 0;
  int64_t steps() const noexcept { return steps_; }

protected:
  int64_t steps_ = 0;
};

expected<std::unique_ptr<optimizer>> make_optimizer(const optimizer_config& config);

// Restores a checkpointed optimizer (`state`: host tensors). The optimizer
// makes its state on its first step, so it is primed with steps of zero
// gradient at lr 0 (weights unchanged; Adam: `steps` of them, for its bias
// correction), then its state tensors are overwritten with `state` (names
// for errors). `where` names the checkpoint in errors. kernels::optimizer
// has no set_state(). `device`: the context of parameters and optimizer
// state that live on a device (a cuda optimizer), null for host ones.
status restore_optimizer(optimizer& opt, optimizer_kind kind, std::span<parameter* const> params, int64_t steps,
                         std::span<const tensor> state, std::span<const std::string> names, const std::string& where,
                         device_context* device = nullptr);

}  // namespace hetflow::kernels
