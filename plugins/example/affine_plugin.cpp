// Example plugin: a custom pre-processing transform actor.
//
//   actor type `affine`: y = scale * x + shift on every f32 tensor it gets,
//     forwarded to `to`. It speaks the skeleton job's protocol, so it can sit
//     between the built-in `producer` and `checker` (whose check is
//     y = 2x + 1):
//
//       producer --x--> affine(scale 2, shift 0) --2x--> affine(scale 1, shift 1) --2x+1--> checker
//          ^                                                                                   |
//          +----------------------------- credits -----------------------------------------+
//
//     2x is exact in f32, so the two steps give the checker's 2x + 1 bit for
//     bit; any other scale or shift fails the job (the checker names the
//     tensor and element).
//   job kind `affine_pipeline`: places that chain on the cluster's nodes
//     (producer on node 0, the two affines on nodes 1 and 2, the checker on
//     node 3, wrapping round on smaller clusters); keys as the skeleton job.
//   transform `cutout` (a per-sample image transform for streamed training,
//     DeVries & Taylor 2017): sets a size x size square of every channel to
//     `value`, at a position drawn from (seed, epoch, sample) - so any number
//     of shards trains the same. Use: [job] input = "stream",
//     transforms = ["cutout"], cutout = { size = 8 }. A size at least the
//     image's height and width erases the whole image.
//   layer `channel_affine` (a model layer for train jobs): y = x * scale[c]
//     + shift[c] per channel c (dim 1 of the batch), learnable, scale 1 and
//     shift 0 at the start, so the model first computes what it computes
//     without it (keys scale and shift set other initial values). Use: [job]
//     insert_layers = ["fc1:channel_affine"] or ["fc1:channel_affine(scale=0.5)"] (the
//     unit fc1_channel_affine, parameters fc1_channel_affine.scale/.shift).
//
// Build: plugins/example/CMakeLists.txt (hetflow_add_plugin). Use:
// plugins/example/affine.toml.
#include "actors/plugin_api.hpp"

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace {

using namespace hetflow;
using actors::actor_env;
using actors::credit_atom;
using actors::start_atom;
using actors::wire_atom;

constexpr uint32_t kind_output = 2;  // the skeleton transformer's message kind

struct affine_state : plugin::job_actor_state {
  std::string to;
  float scale = 2.0f, shift = 1.0f;
  int64_t count = 0;  // tensors to transform before reporting done
  int64_t seen = 0;
  static inline const char* name = "example.affine";
};

caf::behavior affine(caf::stateful_actor<affine_state>* self, actor_env env) {
  plugin::init_job_actor(self, env);
  auto& st = self->state;
  st.to = env.spec.args.get_string("to", "checker");
  st.scale = static_cast<float>(env.spec.args.get_number("scale", 2.0));
  st.shift = static_cast<float>(env.spec.args.get_number("shift", 1.0));
  st.count = env.spec.args.get_int("count", 0);
  if (st.count == 0) st.count = env.cluster.job.params.get_int("tensors", 64);
  return {
      [self](start_atom) {
        plugin::become_running(self, [self](wire_atom, const std::string& from, const wire_buffer_ref& buf) {
          auto& st = self->state;
          auto msg = plugin::decode_or_fail(self, from, buf);
          if (!msg) return;
          if (msg->tensor_count() != 1 || msg->tensor(0).type != dtype::f32)
            return plugin::fail_job_actor(self, "message " + std::to_string(msg->header().seq) + " from node '" +
                                                    from + "' is not one f32 tensor");
          const auto& x = msg->tensor(0);
          schemas::tensor_meta meta{dtype::f32, {x.shape.begin(), x.shape.end()}};
          schemas::envelope_header h{kind_output, msg->header().seq, st.me, st.to};
          schemas::message_builder b(h, {meta});
          auto out = b.tensor_data(0);
          const float* in = reinterpret_cast<const float*>(x.data.data());
          float* y = reinterpret_cast<float*>(out.data());
          const int64_t n = x.numel();
          for (int64_t j = 0; j < n; ++j) y[j] = st.scale * in[j] + st.shift;
          auto s = st.svc->send_wire(st.to, std::make_shared<const wire_buffer>(std::move(b).finish()));
          if (!s.ok()) return plugin::fail_job_actor(self, "cannot forward to '" + st.to + "': " + s.to_string());
          if (++st.seen == st.count)
            st.svc->report_done(st.me, true, "applied y = " + std::to_string(st.scale) + "x + " +
                                                 std::to_string(st.shift) + " to " + std::to_string(st.seen) +
                                                 " tensors",
                                {});
        });
      },
  };
}

topology::actor_spec place(std::string name, std::string type, std::string node) {
  topology::actor_spec a;
  a.name = std::move(name);
  a.type = std::move(type);
  a.node = std::move(node);
  return a;
}

uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The cutout transform for one job: `size` and `value` from [job] cutout.
actors::sample_transform make_cutout(int64_t size, float value) {
  return [size, value](std::span<float> img, const actors::sample_context& c) {
    const int64_t h = std::min(size, c.height), w = std::min(size, c.width);
    uint64_t r = mix64(mix64(mix64(c.seed ^ 0xC0707ull) + uint64_t(c.epoch)) + uint64_t(c.sample));
    const int64_t y0 = int64_t(r % uint64_t(c.height - h + 1));
    const int64_t x0 = int64_t((r >> 32) % uint64_t(c.width - w + 1));
    for (int64_t ch = 0; ch < c.channels; ++ch)
      for (int64_t y = y0; y < y0 + h; ++y) {
        float* row = img.data() + (ch * c.height + y) * c.width;
        std::fill(row + x0, row + x0 + w, value);
      }
  };
}

// The register function: called once per process, before the topology is
// checked. Everything it adds must be the same on every node.
// The channel_affine layer: a kernels::unit (kernels/unit.hpp's contract).
class channel_affine final : public kernels::unit {
public:
  channel_affine(std::string name, int64_t channels, const std::string& prefix, float scale, float shift)
      : unit(std::move(name)) {
    scale_.name = prefix + this->name() + ".scale";
    scale_.value = kernels::tensor::filled(kernels::shape{channels}, scale);
    scale_.grad = kernels::tensor::zeros(kernels::shape{channels});
    shift_.name = prefix + this->name() + ".shift";
    shift_.value = kernels::tensor::filled(kernels::shape{channels}, shift);
    shift_.grad = kernels::tensor::zeros(kernels::shape{channels});
  }
  kernels::layer_kind kind() const noexcept override { return kernels::layer_kind::custom; }

  expected<kernels::shape> prepare(const kernels::shape& in) override {
    if (in.rank() < 2 || in[1] != scale_.value.numel())
      return make_error(errc::invalid_argument, "unit " + name() + ": input " + in.to_string() + " has not " +
                                                    std::to_string(scale_.value.numel()) + " channels in dim 1");
    if (!(in == shape_)) {
      shape_ = in;
      out_ = kernels::tensor::empty(in);
      dx_ = kernels::tensor::empty(in);
    }
    return in;
  }
  expected<kernels::tensor_view> forward(kernels::tensor_view x, kernels::mode) override {
    // Models do not call prepare: a new batch shape arrives here.
    if (!(x.shape() == shape_)) HF_RETURN_IF_ERROR(prepare(x.shape()).error());
    x_ = x;
    const float* a = scale_.value.f32();
    const float* b = shift_.value.f32();
    const float* in = x.f32();
    float* out = out_.f32();
    const int64_t c = shape_[1], inner = shape_.numel() / (shape_[0] * c);
    for (int64_t n = 0; n < shape_[0]; ++n)
      for (int64_t k = 0; k < c; ++k)
        for (int64_t i = 0, o = (n * c + k) * inner; i < inner; ++i) out[o + i] = in[o + i] * a[k] + b[k];
    return out_.view();
  }
  expected<kernels::tensor_view> backward(kernels::tensor_view dy, bool need_input_grad) override {
    if (!(dy.shape() == shape_)) return shape_mismatch(dy.shape(), shape_);
    const float* a = scale_.value.f32();
    const float* g = dy.f32();
    const float* in = x_.f32();
    float* da = scale_.grad.f32();
    float* db = shift_.grad.f32();
    float* dx = dx_.f32();
    const int64_t c = shape_[1], inner = shape_.numel() / (shape_[0] * c);
    for (int64_t k = 0; k < c; ++k) da[k] = db[k] = 0.0f;
    for (int64_t n = 0; n < shape_[0]; ++n)
      for (int64_t k = 0; k < c; ++k)
        for (int64_t i = 0, o = (n * c + k) * inner; i < inner; ++i) {
          da[k] += g[o + i] * in[o + i];
          db[k] += g[o + i];
          if (need_input_grad) dx[o + i] = g[o + i] * a[k];
        }
    return need_input_grad ? dx_.view() : kernels::tensor_view{};
  }
  void parameters(std::vector<kernels::parameter*>& out) override {
    out.push_back(&scale_);
    out.push_back(&shift_);
  }
  uint64_t activation_bytes() const override { return out_.view().byte_size() + dx_.view().byte_size(); }

private:
  kernels::parameter scale_, shift_;
  kernels::shape shape_;
  kernels::tensor out_, dx_;
  kernels::tensor_view x_;
};

status register_types(plugin::host& host) {
  // Keys: the initial scale and shift of every channel ("fc1:channel_affine(scale=0.5)").
  HF_RETURN_IF_ERROR(host.add_layer(
      "channel_affine",
      [](const kernels::layer_spec& spec, const kernels::shape& in, kernels::rng&,
         const std::string& prefix) -> expected<kernels::built_unit> {
        if (in.rank() < 1 || in[0] <= 0)
          return make_error(errc::invalid_argument, "channel_affine needs a channel dimension, got " + in.to_string());
        HF_ASSIGN_OR_RETURN(double scale, kernels::custom_number(spec, "scale", 1.0));
        HF_ASSIGN_OR_RETURN(double shift, kernels::custom_number(spec, "shift", 0.0));
        return kernels::built_unit{
            std::make_unique<channel_affine>(spec.name, in[0], prefix, float(scale), float(shift)), in};
      },
      {"scale", "shift"}));

  using topology::key_spec;
  using topology::key_type;

  topology::type_spec aff{"affine", "example plugin: y = scale * x + shift on every f32 tensor", {}};
  aff.keys.push_back(key_spec{"to", key_type::string, false, std::string("checker"),
                              "actor that receives the results", {}, {}, {}});
  aff.keys.push_back(key_spec{"scale", key_type::number, false, 2.0, "the factor", {}, {}, {}});
  aff.keys.push_back(key_spec{"shift", key_type::number, false, 1.0, "the offset", {}, {}, {}});
  aff.keys.push_back(key_spec{"count", key_type::integer, false, int64_t{0},
                              "tensors to transform; 0 = the job's 'tensors'", 0.0, 1e9, {}});
  HF_RETURN_IF_ERROR(host.add_actor_type(aff, [](caf::actor_system& sys, const actor_env& env) {
    return sys.spawn(affine, env);
  }));

  actors::transform_entry cut;
  cut.name = "cutout";
  cut.help = "example plugin: a size x size square of each sample set to value, placed by (seed, epoch, sample)";
  cut.keys.push_back(key_spec{"size", key_type::integer, false, int64_t{8}, "side of the square, pixels", 1.0,
                              65536.0, {}});
  cut.keys.push_back(key_spec{"value", key_type::number, false, 0.0, "what the square is set to", {}, {}, {}});
  cut.make = [](const topology::settings& job) -> expected<actors::sample_transform> {
    const int64_t size = job.get_int("cutout.size", 8);
    if (size < 1) return make_error(errc::invalid_argument, "cutout.size must be at least 1");
    return make_cutout(size, static_cast<float>(job.get_number("cutout.value", 0.0)));
  };
  HF_RETURN_IF_ERROR(host.add_transform(std::move(cut)));

  // The skeleton job's keys: the built-in producer and checker read them.
  topology::type_spec job{"affine_pipeline",
                          "example plugin: producer -> affine(2x) -> affine(+1) -> checker", {}};
  job.keys.push_back(key_spec{"tensors", key_type::integer, false, int64_t{64}, "number of tensors", 1.0, 1e9, {}});
  job.keys.push_back(key_spec{"tensor_bytes", key_type::size, false, int64_t{1 << 20}, "bytes per tensor (f32)",
                              4.0, double(schemas::max_tensor_bytes), {}});
  job.keys.push_back(key_spec{"window", key_type::integer, false, int64_t{4}, "tensors in flight", 1.0, 1024.0, {}});
  job.keys.push_back(key_spec{"seed", key_type::integer, false, int64_t{1}, "seed of the contents", 0.0, {}, {}});
  return host.add_job_kind(
      job,
      [](const topology::cluster& c) -> expected<std::vector<topology::actor_spec>> {
        if (!c.actors.empty()) return std::vector<topology::actor_spec>{};  // the file places them
        const auto n = c.nodes.size();
        std::vector<topology::actor_spec> v;
        v.push_back(place("producer", "producer", c.nodes[0].name));
        v.back().args.set("to", std::string("double"));
        v.push_back(place("double", "affine", c.nodes[1 % n].name));
        v.back().args.set("to", std::string("increment"));
        v.back().args.set("scale", 2.0);
        v.back().args.set("shift", 0.0);
        v.push_back(place("increment", "affine", c.nodes[2 % n].name));
        v.back().args.set("to", std::string("checker"));
        v.back().args.set("scale", 1.0);
        v.back().args.set("shift", 1.0);
        v.push_back(place("checker", "checker", c.nodes[3 % n].name));
        return v;
      },
      [](const std::vector<actors::actor_result>& results) {
        for (auto& r : results)
          if (r.metrics_json.size() > 2) return "\"result\":" + r.metrics_json;
        return std::string{};
      });
}

}  // namespace

HETFLOW_PLUGIN("example-affine", register_types)
