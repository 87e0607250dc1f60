// layer_spec / model_spec: a device-independent description of a model as a
// sequence of units. Plain data: the zoo produces it, a backend instantiates
// it (build_model in model.hpp), the planner can count it.
//
// A unit is one layer_spec; `residual` is composite (body and shortcut are
// sequences themselves). Activations that directly follow a linear, conv2d or
// batch_norm are fused into it (`relu = true`) because oneDNN applies them as a
// post-op at no extra memory pass.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/shape.hpp"

namespace hetflow::kernels {

enum class layer_kind : uint8_t {
  linear,          // y = x W^T + b; x is (N, in); out = `out`
  conv2d,          // NCHW, square kernel, `stride`, symmetric `padding`
  max_pool,        // square window `kernel`, `stride`, `padding`
  avg_pool,        // same; padding counted (PyTorch count_include_pad=True)
  global_avg_pool, // (N, C, H, W) -> (N, C, 1, 1)
  relu,
  batch_norm,      // per channel (dim 1) of (N, C) or (N, C, H, W)
  dropout,         // probability `p` of zeroing; scaled by 1/(1-p); eval: identity
  flatten,         // (N, ...) -> (N, prod(...)); a view
  residual,        // y = relu?(body(x) + shortcut(x)); empty shortcut = identity
  dlrm_interaction, // DLRM bottom MLP + embeddings + dot interaction, see dlrm_spec
  custom           // a plugin's layer (`custom_type`, kernels/custom_layer.hpp); cpu only
};

const char* to_string(layer_kind k) noexcept;

// DLRM's feature part, as one composite unit. Input is (N, dense + sparse):
// the first `dense_features` columns are dense features, the next
// `table_rows.size()` columns are embedding row ids stored as floats (exact
// below 2^24, which bounds table sizes; TODO(robustness): typed index input).
// Output is (N, embedding_dim + F*(F-1)/2) where F = tables + 1: the bottom
// MLP's output concatenated with the pairwise dot products.
struct dlrm_spec {
  int64_t dense_features = 13;
  std::vector<int64_t> table_rows;        // one embedding table per sparse feature
  int64_t embedding_dim = 16;
  std::vector<int64_t> bottom_mlp;        // hidden widths; a last layer of embedding_dim is added
};

struct layer_spec {
  layer_kind kind = layer_kind::relu;
  std::string name;        // unique within its model, e.g. "conv1"
  int64_t out = 0;         // linear: out features; conv2d: out channels
  int64_t kernel = 0;
  int64_t stride = 1;
  int64_t padding = 0;
  bool bias = true;
  bool relu = false;       // fused activation (linear, conv2d, batch_norm)
  double p = 0.0;          // dropout
  double eps = 1e-5;       // batch_norm
  double momentum = 0.1;   // batch_norm running-stat update (PyTorch meaning)
  std::vector<layer_spec> body, shortcut;  // residual
  dlrm_spec dlrm;          // dlrm_interaction
  std::string custom_type; // custom: the name a plugin registered
  // custom: its keys from `insert_layers = ["AFTER:TYPE(key=value, ...)"]`,
  // in the order given (the plugin parses the values; only keys it declared).
  std::vector<std::pair<std::string, std::string>> custom_args;

  static layer_spec linear(std::string name, int64_t out, bool relu = false, bool bias = true);
  static layer_spec conv2d(std::string name, int64_t out, int64_t kernel, int64_t stride = 1,
                           int64_t padding = 0, bool relu = false, bool bias = true);
  static layer_spec max_pool(std::string name, int64_t kernel, int64_t stride, int64_t padding = 0);
  static layer_spec avg_pool(std::string name, int64_t kernel, int64_t stride, int64_t padding = 0);
  static layer_spec global_avg_pool(std::string name);
  static layer_spec relu_layer(std::string name);
  static layer_spec batch_norm(std::string name, bool relu = false);
  static layer_spec dropout(std::string name, double p);
  static layer_spec flatten(std::string name);
  static layer_spec residual(std::string name, std::vector<layer_spec> body,
                             std::vector<layer_spec> shortcut, bool relu = true);
  static layer_spec dlrm_features(std::string name, dlrm_spec spec);
  static layer_spec custom(std::string name, std::string type);
};

struct model_spec {
  std::string name;          // "lenet5"
  shape input;               // one sample, e.g. {1, 28, 28}; dlrm: {dense + sparse}
  int64_t classes = 10;      // width of the last layer's output
  std::vector<layer_spec> layers;
};

}  // namespace hetflow::kernels
