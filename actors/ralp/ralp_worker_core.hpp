// ralp_worker_core: one RALP worker's share of the model, in plain C++ (the
// ralp_worker actor wraps it; tests drive it directly against a server core).
//
// The worker builds the whole model (the job's seed: the same initial
// weights as the server) but trains only units [0, cut): it installs the
// lower weights it pulls, runs them forward on its batch, hands the cut's
// activations to the server, and runs them backward from the activation
// gradient the server returns; the lower gradients are then its push. With
// cut == units it runs everything and the loss itself (plain PS). Worker 0
// installs every weight (lower and upper) to evaluate and at the end.
//
// Thread affinity: one thread, inside model().context().run(...) for the
// forward/backward calls (the actor's training loop runs there).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "kernels/loss.hpp"
#include "kernels/model.hpp"
#include "schemas/error.hpp"

namespace hetflow::ralp {

class worker_core {
public:
  // errc::invalid_argument for a cut outside [1, units].
  static expected<worker_core> make(kernels::model m, std::size_t cut);

  kernels::model& model() noexcept { return model_; }
  std::size_t cut() const noexcept { return cut_; }
  bool has_upper() const noexcept { return cut_ < model_.size(); }
  const std::vector<kernels::parameter*>& lower_params() const noexcept { return lower_; }
  const std::vector<kernels::parameter*>& all_params() const noexcept { return all_; }

  // Copies `values` into the lower parameters (`full`: every parameter), in
  // order; sizes checked.
  status install(std::span<const kernels::tensor_view> values, bool full = false);
  // Units [0, cut) forward in train mode: the activations to send (a view
  // of the model's buffer, valid until the next forward).
  expected<kernels::tensor_view> forward_lower(kernels::tensor_view images);
  // Units [0, cut) backward from dL/d(activations): fills the lower
  // parameters' gradients (the push).
  status backward_lower(kernels::tensor_view act_grad);
  // cut == units: forward, loss and backward of the whole model.
  expected<kernels::loss_result> train_whole(kernels::tensor_view images, std::span<const int32_t> labels);

private:
  worker_core(kernels::model m, std::size_t cut);
  kernels::model model_;
  std::size_t cut_;
  std::vector<kernels::parameter*> lower_, all_;
  kernels::tensor grad_;
};

}  // namespace hetflow::ralp
