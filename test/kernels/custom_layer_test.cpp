// Plugins' layers (kernels/custom_layer.hpp): the registry, insertion into
// zoo models (zoo_options::insert_layers) and models built with them. The
// layer here is the test's own: a per-channel scale (learnable, 1 at the
// start), so a model with it computes exactly what the model without it does
// until the scale trains.
#define BOOST_TEST_MODULE kernels_custom_layer
#include <boost/test/unit_test.hpp>

#include <cstring>

#include "gradcheck.hpp"
#include "kernels/custom_layer.hpp"
#include "kernels/model.hpp"
#include "kernels/random.hpp"
#include "kernels/zoo.hpp"

using namespace hetflow;
using namespace hetflow::kernels;

namespace {

class channel_scale final : public unit {
public:
  channel_scale(std::string name, int64_t channels, const std::string& prefix) : unit(std::move(name)) {
    scale_.name = prefix + this->name() + ".scale";
    scale_.value = tensor::filled(shape{channels}, 1.0f);
    scale_.grad = tensor::zeros(shape{channels});
  }
  layer_kind kind() const noexcept override { return layer_kind::custom; }
  expected<shape> prepare(const shape& in) override {
    if (in.rank() < 2 || in[1] != scale_.value.numel())
      return make_error(errc::invalid_argument, "channel_scale: bad input " + in.to_string());
    if (!(in == shape_)) {
      shape_ = in;
      out_ = tensor::empty(in);
      dx_ = tensor::empty(in);
    }
    return in;
  }
  expected<tensor_view> forward(tensor_view x, mode) override {
    if (!(x.shape() == shape_)) HF_RETURN_IF_ERROR(prepare(x.shape()).error());
    x_ = x;
    const int64_t c = shape_[1], inner = shape_.numel() / (shape_[0] * c);
    for (int64_t n = 0; n < shape_[0]; ++n)
      for (int64_t k = 0; k < c; ++k)
        for (int64_t i = 0, o = (n * c + k) * inner; i < inner; ++i)
          out_.f32()[o + i] = x.f32()[o + i] * scale_.value.f32()[k];
    return out_.view();
  }
  expected<tensor_view> backward(tensor_view dy, bool need_input_grad) override {
    const int64_t c = shape_[1], inner = shape_.numel() / (shape_[0] * c);
    float* ds = scale_.grad.f32();
    for (int64_t k = 0; k < c; ++k) ds[k] = 0;
    for (int64_t n = 0; n < shape_[0]; ++n)
      for (int64_t k = 0; k < c; ++k)
        for (int64_t i = 0, o = (n * c + k) * inner; i < inner; ++i) {
          ds[k] += dy.f32()[o + i] * x_.f32()[o + i];
          dx_.f32()[o + i] = dy.f32()[o + i] * scale_.value.f32()[k];
        }
    return need_input_grad ? dx_.view() : tensor_view{};
  }
  void parameters(std::vector<parameter*>& out) override { out.push_back(&scale_); }
  uint64_t activation_bytes() const override { return out_.view().byte_size() * 2; }

private:
  parameter scale_;
  shape shape_;
  tensor out_, dx_;
  tensor_view x_;
};

void register_once() {
  static bool done = [] {
    auto s = register_custom_layer("test_scale", [](const layer_spec& spec, const shape& in, rng&,
                                                    const std::string& prefix) -> expected<built_unit> {
      return built_unit{std::make_unique<channel_scale>(spec.name, in[0], prefix), in};
    });
    BOOST_REQUIRE_MESSAGE(s.ok(), s.to_string());
    return true;
  }();
  (void)done;
}

model build(const zoo_options& o) {
  auto spec = make_model_spec("lenet5", o);
  BOOST_REQUIRE_MESSAGE(spec.has_value(), spec.error().to_string());
  auto m = build_model(*spec, device::cpu(), {2, 3});
  BOOST_REQUIRE_MESSAGE(m.has_value(), m.error().to_string());
  return std::move(*m);
}

tensor batch(int64_t n, uint64_t seed) {
  tensor x = tensor::empty(shape{n, 1, 28, 28});
  testing::fill_normal(x, seed);
  return x;
}

bool same(tensor_view a, tensor_view b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.byte_size()) == 0;
}

}  // namespace

BOOST_AUTO_TEST_CASE(registry_refuses_duplicates_and_empty) {
  register_once();
  BOOST_TEST(find_custom_layer("test_scale") != nullptr);
  BOOST_TEST(find_custom_layer("nope") == nullptr);
  auto again = register_custom_layer("test_scale", [](const layer_spec&, const shape&, rng&, const std::string&)
                                                       -> expected<built_unit> { return status{}; });
  BOOST_TEST((again.code() == errc::already_exists));
  BOOST_TEST((register_custom_layer("", {}).code() == errc::invalid_argument));
}

// Inserted after conv1 (channels) and fc1 (features): the unit names, the
// parameters, and - with the scale still 1 - forwards bit-identical to the
// plain model in both modes and at several batch sizes (also after a change
// of batch size, as at an epoch's last batch).
BOOST_AUTO_TEST_CASE(inserted_identity_layers_change_nothing) {
  register_once();
  zoo_options plain_o;
  zoo_options o;
  o.insert_layers = {{"conv1", "test_scale", {}}, {"fc1", "test_scale", {}}};
  model plain = build(plain_o);
  model m = build(o);
  BOOST_REQUIRE_EQUAL(m.size(), plain.size() + 2);
  std::vector<std::string> names;
  for (std::size_t i = 0; i < m.size(); ++i) names.push_back(m.at(i).name());
  BOOST_TEST(std::count(names.begin(), names.end(), "conv1_test_scale") == 1);
  BOOST_TEST(std::count(names.begin(), names.end(), "fc1_test_scale") == 1);
  BOOST_TEST(m.parameter_count() == plain.parameter_count() + 6 + 120);
  bool found = false;
  for (parameter* p : m.parameters()) found |= p->name == "fc1_test_scale.scale";
  BOOST_TEST(found);
  for (int64_t n : {64, 400, 16, 64}) {
    for (mode md : {mode::eval, mode::train}) {
      tensor x = batch(n, uint64_t(n));
      auto a = plain.forward(x.view(), md);
      auto b = m.forward(x.view(), md);
      BOOST_REQUIRE(a.has_value() && b.has_value());
      BOOST_TEST(same(*a, *b), "batch " << n << (md == mode::eval ? " eval" : " train"));
    }
  }
}

BOOST_AUTO_TEST_CASE(the_layer_trains_and_its_gradients_are_right) {
  register_once();
  zoo_options o;
  o.insert_layers = {{"fc1", "test_scale", {}}};
  auto spec = make_model_spec("lenet5", o);
  BOOST_REQUIRE(spec.has_value());
  const auto at = std::find_if(spec->layers.begin(), spec->layers.end(),
                               [](const layer_spec& l) { return l.name == "fc1_test_scale"; });
  BOOST_REQUIRE(at != spec->layers.end());
  BOOST_TEST((at->kind == layer_kind::custom));
  BOOST_TEST(at->custom_type == "test_scale");
  rng init(5);
  auto u = make_custom_unit(*at, shape{120}, init, "");
  BOOST_REQUIRE_MESSAGE(u.has_value(), u.error().to_string());
  tensor x = tensor::empty(shape{3, 120});
  testing::fill_normal(x, 4);
  auto st = testing::check_unit(*u->u, x, mode::train);
  testing::require_ok("test_scale", st, {});
}

BOOST_AUTO_TEST_CASE(insertion_errors_name_what_is_wrong) {
  register_once();
  auto err = [](std::vector<inserted_layer> ins) {
    zoo_options o;
    o.insert_layers = std::move(ins);
    auto s = make_model_spec("lenet5", o);
    BOOST_REQUIRE(!s.has_value());
    return s.error().to_string();
  };
  auto e1 = err({{"fc1", "tset_scale", {}}});
  BOOST_TEST(e1.find("no plugin registered layer 'tset_scale' (registered: test_scale") != std::string::npos, e1);
  auto e2 = err({{"fc9", "test_scale", {}}});
  BOOST_TEST(e2.find("lenet5 has no unit 'fc9' (its units: conv1,") != std::string::npos, e2);
  auto e3 = err({{"fc1", "test_scale", {}}, {"fc1", "test_scale", {}}});
  BOOST_TEST(e3.find("inserted after 'fc1' twice") != std::string::npos, e3);
  // A spec naming an unregistered type fails at build, naming the unit.
  layer_spec ls = layer_spec::custom("odd", "never_registered");
  rng init(1);
  auto u = make_custom_unit(ls, shape{4}, init, "");
  BOOST_REQUIRE(!u.has_value());
  BOOST_TEST(u.error().to_string().find("unit odd: no plugin registered layer 'never_registered'") !=
             std::string::npos);
}
