#include "actors/ralp/ralp_worker_core.hpp"

#include <cstring>

#include "actors/ralp/ralp_server_core.hpp"

namespace hetflow::ralp {

expected<worker_core> worker_core::make(kernels::model m, std::size_t cut) {
  if (cut < 1 || cut > m.size())
    return make_error(errc::invalid_argument, "ralp worker: cut " + std::to_string(cut) + " is outside [1, " +
                                                  std::to_string(m.size()) + "] for model " + m.name());
  return worker_core(std::move(m), cut);
}

worker_core::worker_core(kernels::model m, std::size_t cut) : model_(std::move(m)), cut_(cut) {
  lower_ = unit_parameters(model_, 0, cut_);
  all_ = model_.parameters();
}

status worker_core::install(std::span<const kernels::tensor_view> values, bool full) {
  const auto& params = full ? all_ : lower_;
  if (values.size() != params.size())
    return make_error(errc::internal, "ralp worker: got " + std::to_string(values.size()) + " weight tensors, want " +
                                          std::to_string(params.size()));
  for (std::size_t i = 0; i < params.size(); ++i) {
    auto* p = params[i];
    if (values[i].type() != dtype::f32 || values[i].byte_size() != p->value.byte_size())
      return make_error(errc::internal, "ralp worker: got " + std::to_string(values[i].byte_size()) + " bytes for " +
                                            p->name + ", want " + std::to_string(p->value.byte_size()));
    std::memcpy(p->value.f32(), values[i].f32(), p->value.byte_size());
    ++p->version;
  }
  return {};
}

expected<kernels::tensor_view> worker_core::forward_lower(kernels::tensor_view images) {
  return model_.forward(images, kernels::mode::train, 0, cut_);
}

status worker_core::backward_lower(kernels::tensor_view act_grad) {
  return model_.backward(act_grad, false, 0, cut_).error();
}

expected<kernels::loss_result> worker_core::train_whole(kernels::tensor_view images, std::span<const int32_t> labels) {
  HF_ASSIGN_OR_RETURN(kernels::tensor_view logits, model_.forward(images, kernels::mode::train));
  if (grad_.empty()) grad_ = kernels::tensor::empty(logits.shape());
  grad_.resize(logits.shape());
  HF_ASSIGN_OR_RETURN(kernels::loss_result r, kernels::softmax_cross_entropy(logits, labels, grad_.mutable_view()));
  HF_RETURN_IF_ERROR(model_.backward(grad_.view()).error());
  return r;
}

}  // namespace hetflow::ralp
