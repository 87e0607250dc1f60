// The model zoo: model_spec by name. Image models adapt to the input shape
// (e.g. 1x28x28 Fashion-MNIST, 3x32x32 CIFAR, 3x224x224 ImageNet) and scale
// their channel and hidden widths by `width`.
//
//   mlp        flatten, 512, 256 hidden (ReLU), classes
//   lenet5     conv5x5x6, maxpool2, conv5x5x16, maxpool2, fc120, fc84, fc classes
//              (ReLU, no padding)
//   vgg11/16/19  3x3 conv stacks with max pools (a pool is skipped once the
//              feature map is 1x1); classifier 4096-4096 with dropout for
//              inputs >= 64 px, else 512
//   resnet18/50/152  basic / bottleneck blocks with batch norm; 7x7/2 stem
//              and max pool for inputs >= 64 px, else a 3x3 stem (CIFAR style)
//   dlrm       dlrm_features unit (bottom MLP, embeddings, dot interaction)
//              then the top MLP; input (dense + tables) columns, see dlrm_spec
//
// zoo_options::insert_layers adds plugins' layers (kernels/custom_layer.hpp)
// after named top-level units of any of them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kernels/layer_spec.hpp"
#include "schemas/error.hpp"

namespace hetflow::kernels {

// A plugin's layer to insert right after the top-level unit `after`; the
// unit is named "<after>_<type>" (parameters "<after>_<type>.<name>").
struct inserted_layer {
  std::string after;
  std::string type;
  std::vector<std::pair<std::string, std::string>> args;  // "AFTER:TYPE(key=value, ...)"
};

struct zoo_options {
  shape input{1, 28, 28};     // one sample, (C, H, W) for image models
  int64_t classes = 10;
  double width = 1.0;         // channel / hidden width multiplier
  // vgg only: hidden width of the two fully connected layers of the head
  // (0: 4096 for inputs of 64 px and more, as the paper; else one of 512).
  int64_t head_width = 0;
  // dlrm only:
  dlrm_spec dlrm{13, std::vector<int64_t>(26, 10000), 16, {512, 256, 64}};
  std::vector<int64_t> dlrm_top_mlp{512, 256};
  // In order; not_found names the units when `after` is none of them, and
  // the registered layers when `type` is not one.
  std::vector<inserted_layer> insert_layers;
};

std::vector<std::string> zoo_names();

expected<model_spec> make_model_spec(std::string_view name, const zoo_options& options = {});

}  // namespace hetflow::kernels
