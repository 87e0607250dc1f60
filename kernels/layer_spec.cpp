#include "kernels/layer_spec.hpp"

#include <utility>

namespace hetflow::kernels {

const char* to_string(layer_kind k) noexcept {
  switch (k) {
    case layer_kind::linear: return "linear";
    case layer_kind::conv2d: return "conv2d";
    case layer_kind::max_pool: return "max_pool";
    case layer_kind::avg_pool: return "avg_pool";
    case layer_kind::global_avg_pool: return "global_avg_pool";
    case layer_kind::relu: return "relu";
    case layer_kind::batch_norm: return "batch_norm";
    case layer_kind::dropout: return "dropout";
    case layer_kind::flatten: return "flatten";
    case layer_kind::residual: return "residual";
    case layer_kind::dlrm_interaction: return "dlrm_interaction";
    case layer_kind::custom: return "custom";
  }
  return "?";
}

namespace {
layer_spec make(layer_kind k, std::string name) {
  layer_spec s;
  s.kind = k;
  s.name = std::move(name);
  return s;
}
}  // namespace

layer_spec layer_spec::linear(std::string name, int64_t out, bool relu, bool bias) {
  layer_spec s = make(layer_kind::linear, std::move(name));
  s.out = out;
  s.relu = relu;
  s.bias = bias;
  return s;
}

layer_spec layer_spec::conv2d(std::string name, int64_t out, int64_t kernel, int64_t stride,
                              int64_t padding, bool relu, bool bias) {
  layer_spec s = make(layer_kind::conv2d, std::move(name));
  s.out = out;
  s.kernel = kernel;
  s.stride = stride;
  s.padding = padding;
  s.relu = relu;
  s.bias = bias;
  return s;
}

layer_spec layer_spec::max_pool(std::string name, int64_t kernel, int64_t stride, int64_t padding) {
  layer_spec s = make(layer_kind::max_pool, std::move(name));
  s.kernel = kernel;
  s.stride = stride;
  s.padding = padding;
  return s;
}

layer_spec layer_spec::avg_pool(std::string name, int64_t kernel, int64_t stride, int64_t padding) {
  layer_spec s = make(layer_kind::avg_pool, std::move(name));
  s.kernel = kernel;
  s.stride = stride;
  s.padding = padding;
  return s;
}

layer_spec layer_spec::global_avg_pool(std::string name) {
  return make(layer_kind::global_avg_pool, std::move(name));
}

layer_spec layer_spec::relu_layer(std::string name) { return make(layer_kind::relu, std::move(name)); }

layer_spec layer_spec::batch_norm(std::string name, bool relu) {
  layer_spec s = make(layer_kind::batch_norm, std::move(name));
  s.relu = relu;
  return s;
}

layer_spec layer_spec::dropout(std::string name, double p) {
  layer_spec s = make(layer_kind::dropout, std::move(name));
  s.p = p;
  return s;
}

layer_spec layer_spec::flatten(std::string name) { return make(layer_kind::flatten, std::move(name)); }

layer_spec layer_spec::residual(std::string name, std::vector<layer_spec> body,
                                std::vector<layer_spec> shortcut, bool relu) {
  layer_spec s = make(layer_kind::residual, std::move(name));
  s.body = std::move(body);
  s.shortcut = std::move(shortcut);
  s.relu = relu;
  return s;
}

layer_spec layer_spec::dlrm_features(std::string name, dlrm_spec spec) {
  layer_spec s = make(layer_kind::dlrm_interaction, std::move(name));
  s.dlrm = std::move(spec);
  return s;
}

layer_spec layer_spec::custom(std::string name, std::string type) {
  layer_spec s = make(layer_kind::custom, std::move(name));
  s.custom_type = std::move(type);
  return s;
}

}  // namespace hetflow::kernels
