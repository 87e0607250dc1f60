#include "kernels/zoo.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/custom_layer.hpp"

namespace hetflow::kernels {
namespace {

int64_t scaled(int64_t base, double width) {
  return std::max<int64_t>(1, int64_t(std::llround(double(base) * width)));
}

status need_image_input(std::string_view name, const shape& in, int64_t min_side) {
  if (in.rank() != 3 || in[0] <= 0 || in[1] < min_side || in[2] < min_side)
    return make_error(errc::invalid_argument, std::string(name) + ": input must be (C, H, W) with H, W >= " +
                                                  std::to_string(min_side) + ", got " + in.to_string());
  return {};
}

model_spec mlp(const zoo_options& o) {
  model_spec m{"mlp", o.input, o.classes, {}};
  m.layers.push_back(layer_spec::flatten("flatten"));
  m.layers.push_back(layer_spec::linear("fc1", scaled(512, o.width), true));
  m.layers.push_back(layer_spec::linear("fc2", scaled(256, o.width), true));
  m.layers.push_back(layer_spec::linear("fc3", o.classes));
  return m;
}

model_spec lenet5(const zoo_options& o) {
  model_spec m{"lenet5", o.input, o.classes, {}};
  m.layers.push_back(layer_spec::conv2d("conv1", scaled(6, o.width), 5, 1, 0, true));
  m.layers.push_back(layer_spec::max_pool("pool1", 2, 2));
  m.layers.push_back(layer_spec::conv2d("conv2", scaled(16, o.width), 5, 1, 0, true));
  m.layers.push_back(layer_spec::max_pool("pool2", 2, 2));
  m.layers.push_back(layer_spec::flatten("flatten"));
  m.layers.push_back(layer_spec::linear("fc1", scaled(120, o.width), true));
  m.layers.push_back(layer_spec::linear("fc2", scaled(84, o.width), true));
  m.layers.push_back(layer_spec::linear("fc3", o.classes));
  return m;
}

model_spec vgg(std::string name, const std::vector<int>& cfg, const zoo_options& o) {
  model_spec m{std::move(name), o.input, o.classes, {}};
  int64_t side = std::min(o.input[1], o.input[2]);
  int conv = 0, pool = 0;
  for (int c : cfg) {
    if (c == 0) {
      if (side >= 2) {
        m.layers.push_back(layer_spec::max_pool("pool" + std::to_string(++pool), 2, 2));
        side /= 2;
      }
      continue;
    }
    m.layers.push_back(layer_spec::conv2d("conv" + std::to_string(++conv), scaled(c, o.width), 3, 1, 1, true));
  }
  m.layers.push_back(layer_spec::flatten("flatten"));
  if (std::min(o.input[1], o.input[2]) >= 64 || o.head_width > 0) {
    const int64_t h = o.head_width > 0 ? o.head_width : scaled(4096, o.width);
    m.layers.push_back(layer_spec::linear("fc1", h, true));
    m.layers.push_back(layer_spec::dropout("drop1", 0.5));
    m.layers.push_back(layer_spec::linear("fc2", h, true));
    m.layers.push_back(layer_spec::dropout("drop2", 0.5));
    m.layers.push_back(layer_spec::linear("fc3", o.classes));
  } else {
    m.layers.push_back(layer_spec::linear("fc1", scaled(512, o.width), true));
    m.layers.push_back(layer_spec::linear("fc2", o.classes));
  }
  return m;
}

// conv (no bias) + batch norm (+ fused ReLU)
void conv_bn(std::vector<layer_spec>& out, const std::string& name, int64_t channels, int64_t k, int64_t stride,
             int64_t pad, bool relu) {
  out.push_back(layer_spec::conv2d(name, channels, k, stride, pad, false, false));
  out.push_back(layer_spec::batch_norm(name + "_bn", relu));
}

model_spec resnet(std::string name, bool bottleneck, const std::vector<int>& blocks, const zoo_options& o) {
  model_spec m{std::move(name), o.input, o.classes, {}};
  const bool large = std::min(o.input[1], o.input[2]) >= 64;
  int64_t in_c = scaled(64, o.width);
  if (large) {
    conv_bn(m.layers, "stem", in_c, 7, 2, 3, true);
    m.layers.push_back(layer_spec::max_pool("stem_pool", 3, 2, 1));
  } else {
    conv_bn(m.layers, "stem", in_c, 3, 1, 1, true);
  }
  const int64_t expansion = bottleneck ? 4 : 1;
  for (int stage = 0; stage < 4; ++stage) {
    int64_t w = scaled(int64_t(64) << stage, o.width);
    for (int b = 0; b < blocks[std::size_t(stage)]; ++b) {
      int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
      std::string bn = "layer" + std::to_string(stage + 1) + "." + std::to_string(b);
      std::vector<layer_spec> body, shortcut;
      if (bottleneck) {
        conv_bn(body, "conv1", w, 1, 1, 0, true);
        conv_bn(body, "conv2", w, 3, stride, 1, true);
        conv_bn(body, "conv3", w * expansion, 1, 1, 0, false);
      } else {
        conv_bn(body, "conv1", w, 3, stride, 1, true);
        conv_bn(body, "conv2", w, 3, 1, 1, false);
      }
      if (stride != 1 || in_c != w * expansion) conv_bn(shortcut, "downsample", w * expansion, 1, stride, 0, false);
      m.layers.push_back(layer_spec::residual(bn, std::move(body), std::move(shortcut), true));
      in_c = w * expansion;
    }
  }
  m.layers.push_back(layer_spec::global_avg_pool("avgpool"));
  m.layers.push_back(layer_spec::flatten("flatten"));
  m.layers.push_back(layer_spec::linear("fc", o.classes));
  return m;
}

}  // namespace

std::vector<std::string> zoo_names() {
  return {"mlp", "lenet5", "vgg11", "vgg16", "vgg19", "resnet18", "resnet50", "resnet152", "dlrm"};
}

namespace {
expected<model_spec> make_zoo_spec(std::string_view name, const zoo_options& o);
}

expected<model_spec> make_model_spec(std::string_view name, const zoo_options& o) {
  HF_ASSIGN_OR_RETURN(model_spec m, make_zoo_spec(name, o));
  for (const inserted_layer& ins : o.insert_layers) {
    if (find_custom_layer(ins.type) == nullptr)
      return unknown_custom_layer("insert_layers", ins.type, "name the plugin in [cluster] plugins");
    auto at = std::find_if(m.layers.begin(), m.layers.end(), [&](const layer_spec& l) { return l.name == ins.after; });
    if (at == m.layers.end()) {
      std::string units;
      for (auto& l : m.layers) units += (units.empty() ? "" : ", ") + l.name;
      return make_error(errc::not_found, "insert_layers: " + std::string(name) + " has no unit '" + ins.after +
                                             "' (its units: " + units + ")");
    }
    std::string unit_name = ins.after + "_" + ins.type;
    for (auto& l : m.layers)
      if (l.name == unit_name)
        return make_error(errc::already_exists, "insert_layers: layer '" + ins.type + "' is inserted after '" +
                                                    ins.after + "' twice");
    HF_RETURN_IF_ERROR(check_custom_args(ins.type, ins.args).with_context("insert_layers"));
    layer_spec l = layer_spec::custom(std::move(unit_name), ins.type);
    l.custom_args = ins.args;
    m.layers.insert(at + 1, std::move(l));
  }
  return m;
}

namespace {
expected<model_spec> make_zoo_spec(std::string_view name, const zoo_options& o) {
  if (!(o.width > 0.0) || o.classes <= 0)
    return make_error(errc::invalid_argument, std::string(name) + ": width and classes must be positive");
  if (name == "mlp") {
    if (o.input.rank() == 0 || o.input.numel() <= 0)
      return make_error(errc::invalid_argument, "mlp: empty input shape");
    return mlp(o);
  }
  if (name == "lenet5") {
    HF_RETURN_IF_ERROR(need_image_input(name, o.input, 16));
    return lenet5(o);
  }
  if (name == "vgg11" || name == "vgg16" || name == "vgg19") {
    HF_RETURN_IF_ERROR(need_image_input(name, o.input, 8));
    static const std::vector<int> v11{64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0};
    static const std::vector<int> v16{64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0};
    static const std::vector<int> v19{64,  64,  0,   128, 128, 0,   256, 256, 256, 256, 0,
                                      512, 512, 512, 512, 0,   512, 512, 512, 512, 0};
    return vgg(std::string(name), name == "vgg11" ? v11 : name == "vgg16" ? v16 : v19, o);
  }
  if (name == "resnet18") {
    HF_RETURN_IF_ERROR(need_image_input(name, o.input, 8));
    return resnet("resnet18", false, {2, 2, 2, 2}, o);
  }
  if (name == "resnet50") {
    HF_RETURN_IF_ERROR(need_image_input(name, o.input, 8));
    return resnet("resnet50", true, {3, 4, 6, 3}, o);
  }
  if (name == "resnet152") {
    HF_RETURN_IF_ERROR(need_image_input(name, o.input, 8));
    return resnet("resnet152", true, {3, 8, 36, 3}, o);
  }
  if (name == "dlrm") {
    const dlrm_spec& d = o.dlrm;
    if (d.dense_features <= 0 || d.embedding_dim <= 0 || d.table_rows.empty())
      return make_error(errc::invalid_argument, "dlrm: needs dense features, an embedding dim and tables");
    model_spec m{"dlrm", shape{d.dense_features + int64_t(d.table_rows.size())}, o.classes, {}};
    dlrm_spec scaled_d = d;
    for (auto& w : scaled_d.bottom_mlp) w = scaled(w, o.width);
    m.layers.push_back(layer_spec::dlrm_features("features", scaled_d));
    int i = 0;
    for (int64_t w : o.dlrm_top_mlp) m.layers.push_back(layer_spec::linear("top" + std::to_string(++i), scaled(w, o.width), true));
    m.layers.push_back(layer_spec::linear("top" + std::to_string(++i), o.classes));
    return m;
  }
  std::string known;
  for (const auto& n : zoo_names()) known += (known.empty() ? "" : ", ") + n;
  return make_error(errc::not_found, "unknown model '" + std::string(name) + "'; known models: " + known);
}

}  // namespace

}  // namespace hetflow::kernels
