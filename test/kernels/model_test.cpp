// Models: the zoo's specs, building, forward shapes, training steps for each
// family, profiles, and the cuda seam.
#define BOOST_TEST_MODULE kernels_model
#include <boost/test/unit_test.hpp>

#include "kernels/cuda/cuda_loader.hpp"
#include "kernels/dataset.hpp"
#include "kernels/loss.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/profile.hpp"
#include "kernels/random.hpp"
#include "kernels/zoo.hpp"

using namespace hetflow;
using namespace hetflow::kernels;

namespace {

model build(const std::string& name, zoo_options o, int threads = 2) {
  auto spec = make_model_spec(name, o);
  BOOST_REQUIRE_MESSAGE(spec.has_value(), spec.error().to_string());
  auto m = build_model(*spec, device::cpu(), {threads, 3});
  BOOST_REQUIRE_MESSAGE(m.has_value(), m.error().to_string());
  return std::move(*m);
}

tensor random_batch(const model& m, int64_t n, uint64_t seed = 1) {
  shape s{n};
  for (int64_t d : m.spec().input.dims()) s.push_back(d);
  tensor x = tensor::empty(s);
  rng r(seed);
  for (float& v : x.f32_span()) v = r.normal();
  return x;
}

// One SGD step on a random batch; returns the loss before the step.
double train_step(model& m, optimizer& opt, const tensor& x, const std::vector<int32_t>& y) {
  double loss = 0;
  m.context().run([&] {
    auto logits = m.forward(x.view(), mode::train);
    BOOST_REQUIRE_MESSAGE(logits.has_value(), logits.error().to_string());
    tensor g = tensor::empty(logits->shape());
    auto r = softmax_cross_entropy(*logits, y, g.mutable_view());
    BOOST_REQUIRE(r.has_value());
    loss = r->loss;
    auto back = m.backward(g.view());
    BOOST_REQUIRE_MESSAGE(back.has_value(), back.error().to_string());
    auto params = m.parameters();
    BOOST_REQUIRE(opt.step(params, 0.05).ok());
  });
  return loss;
}

}  // namespace

BOOST_AUTO_TEST_CASE(zoo_names_build_specs) {
  for (const auto& n : zoo_names()) {
    zoo_options o;
    o.input = n == "lenet5" || n == "mlp" ? shape{1, 28, 28} : shape{3, 32, 32};
    auto s = make_model_spec(n, o);
    BOOST_CHECK_MESSAGE(s.has_value(), n << ": " << s.error().to_string());
    if (s) BOOST_CHECK(!s->layers.empty());
  }
  auto unknown = make_model_spec("alexnet");
  BOOST_REQUIRE(!unknown.has_value());
  BOOST_CHECK(unknown.error().code() == errc::not_found);
  BOOST_CHECK(unknown.error().message().find("resnet50") != std::string::npos);  // lists the known ones
  zoo_options tiny;
  tiny.input = shape{1, 4, 4};
  BOOST_CHECK(!make_model_spec("lenet5", tiny).has_value());
}

BOOST_AUTO_TEST_CASE(lenet5_shapes_and_parameters) {
  model m = build("lenet5", {});
  BOOST_CHECK_EQUAL(m.parameter_count(), 44426);  // the classic LeNet-5 on 28x28
  tensor x = random_batch(m, 7);
  m.context().run([&] {
    auto y = m.forward(x.view(), mode::eval);
    BOOST_REQUIRE_MESSAGE(y.has_value(), y.error().to_string());
    BOOST_CHECK(y->shape() == (shape{7, 10}));
  });
  BOOST_CHECK(m.sample_shape(1) == (shape{6, 24, 24}));
  BOOST_CHECK(m.sample_shape(m.size()) == (shape{10}));
  zoo_options cifar;
  cifar.input = shape{3, 32, 32};
  model c = build("lenet5", cifar);
  BOOST_CHECK(c.sample_shape(5) == (shape{400}));  // 16 x 5 x 5 after flatten
}

BOOST_AUTO_TEST_CASE(forward_rejects_wrong_input) {
  model m = build("lenet5", {});
  tensor bad = tensor::zeros({2, 3, 28, 28});
  m.context().run([&] {
    auto y = m.forward(bad.view(), mode::eval);
    BOOST_REQUIRE(!y.has_value());
    BOOST_CHECK(y.error().code() == errc::invalid_argument);
    BOOST_CHECK(y.error().message().find("conv1") != std::string::npos);
  });
}

BOOST_AUTO_TEST_CASE(mlp_loss_decreases_on_synthetic_data) {
  auto data = make_synthetic_images({1, 8, 8}, 256, 4, 5, 0.5f);
  zoo_options o;
  o.input = data.sample_shape();
  o.classes = 4;
  o.width = 0.25;
  model m = build("mlp", o);
  auto opt = make_optimizer({optimizer_kind::sgd, 0.05, 0.9});
  BOOST_REQUIRE(opt.has_value());
  tensor x = tensor::from(data.images.view().slice_outer(0, 64));
  std::vector<int32_t> y(data.labels.begin(), data.labels.begin() + 64);
  double first = train_step(m, **opt, x, y), last = first;
  for (int i = 0; i < 30; ++i) last = train_step(m, **opt, x, y);
  BOOST_TEST_MESSAGE("mlp loss " << first << " -> " << last);
  BOOST_CHECK_LT(last, 0.5 * first);
}

BOOST_AUTO_TEST_CASE(every_family_trains_one_step) {
  struct item {
    std::string name;
    shape input;
    double width;
  };
  // Small widths and inputs: these check wiring (shapes, residual blocks,
  // batch norm, dropout, partial batches), not accuracy.
  for (const item& it : {item{"vgg11", {3, 32, 32}, 0.125}, item{"resnet18", {3, 32, 32}, 0.125},
                         item{"resnet50", {3, 32, 32}, 0.0625}, item{"resnet18", {3, 64, 64}, 0.0625},
                         item{"vgg16", {1, 28, 28}, 0.0625}, item{"vgg19", {3, 64, 64}, 0.03125}}) {
    zoo_options o;
    o.input = it.input;
    o.width = it.width;
    model m = build(it.name, o);
    auto opt = make_optimizer({optimizer_kind::sgd, 0.01, 0.9});
    BOOST_REQUIRE(opt.has_value());
    tensor x = random_batch(m, 4);
    std::vector<int32_t> y{0, 1, 2, 3};
    double l0 = train_step(m, **opt, x, y);
    double l1 = train_step(m, **opt, x, y);
    BOOST_TEST_MESSAGE(it.name << " " << it.input.to_string() << ": loss " << l0 << " -> " << l1);
    BOOST_CHECK(std::isfinite(l0) && std::isfinite(l1));
    m.context().run([&] {
      auto e = m.forward(x.view().slice_outer(0, 3), mode::eval);  // another batch size, eval mode
      BOOST_REQUIRE_MESSAGE(e.has_value(), e.error().to_string());
      BOOST_CHECK(e->shape() == (shape{3, 10}));
    });
  }
}

BOOST_AUTO_TEST_CASE(resnet_structure) {
  zoo_options o;
  o.input = shape{3, 224, 224};
  auto r18 = make_model_spec("resnet18", o);
  auto r50 = make_model_spec("resnet50", o);
  auto r152 = make_model_spec("resnet152", o);
  BOOST_REQUIRE(r18 && r50 && r152);
  auto blocks = [](const model_spec& s) {
    int n = 0;
    for (const auto& l : s.layers) n += l.kind == layer_kind::residual;
    return n;
  };
  BOOST_CHECK_EQUAL(blocks(*r18), 8);
  BOOST_CHECK_EQUAL(blocks(*r50), 16);
  BOOST_CHECK_EQUAL(blocks(*r152), 50);
  // ResNet-18 for 1000 classes has torchvision's 11,689,512 parameters.
  o.classes = 1000;
  model m = build("resnet18", o, 1);
  BOOST_CHECK_EQUAL(m.parameter_count(), 11689512);
}

BOOST_AUTO_TEST_CASE(vgg16_parameter_count) {
  zoo_options o;
  o.input = shape{3, 224, 224};
  o.classes = 1000;
  auto s = make_model_spec("vgg16", o);
  BOOST_REQUIRE(s.has_value());
  int64_t params = 0;
  shape cur = o.input;
  for (const auto& l : s->layers) {
    if (l.kind == layer_kind::conv2d) {
      params += l.out * cur[0] * 9 + l.out;
      cur = shape{l.out, cur[1], cur[2]};
    } else if (l.kind == layer_kind::max_pool) {
      cur = shape{cur[0], cur[1] / 2, cur[2] / 2};
    } else if (l.kind == layer_kind::flatten) {
      cur = shape{cur.numel()};
    } else if (l.kind == layer_kind::linear) {
      params += l.out * cur[0] + l.out;
      cur = shape{l.out};
    }
  }
  BOOST_CHECK_EQUAL(params, 138357544);  // torchvision vgg16
}

BOOST_AUTO_TEST_CASE(dlrm_trains_with_sparse_gradients) {
  zoo_options o;
  o.classes = 2;
  o.dlrm = dlrm_spec{4, {50, 30, 20}, 8, {16}};
  o.dlrm_top_mlp = {16};
  model m = build("dlrm", o);
  const int64_t n = 32, cols = 4 + 3;
  tensor x = tensor::empty({n, cols});
  std::vector<int32_t> y(static_cast<std::size_t>(n));
  rng r(4);
  for (int64_t s = 0; s < n; ++s) {
    for (int j = 0; j < 4; ++j) x.f32()[s * cols + j] = r.normal();
    int64_t id0 = int64_t(r.below(50));
    x.f32()[s * cols + 4] = float(id0);
    x.f32()[s * cols + 5] = float(r.below(30));
    x.f32()[s * cols + 6] = float(r.below(20));
    y[std::size_t(s)] = id0 % 2;  // learnable from the first table
  }
  auto opt = make_optimizer({optimizer_kind::adam, 0.01});
  BOOST_REQUIRE(opt.has_value());
  double first = train_step(m, **opt, x, y), last = first;
  for (int i = 0; i < 40; ++i) last = train_step(m, **opt, x, y);
  BOOST_TEST_MESSAGE("dlrm loss " << first << " -> " << last);
  BOOST_CHECK_LT(last, 0.5 * first);
  int sparse = 0;
  for (parameter* p : m.parameters()) sparse += p->sparse;
  BOOST_CHECK_EQUAL(sparse, 3);
  // An id outside its table is an error naming the sample, not a crash.
  x.f32()[5 * cols + 5] = 30.0f;
  m.context().run([&] {
    auto e = m.forward(x.view(), mode::eval);
    BOOST_REQUIRE(!e.has_value());
    BOOST_CHECK(e.error().message().find("sample 5") != std::string::npos);
  });
}

BOOST_AUTO_TEST_CASE(profiles_every_unit) {
  model m = build("lenet5", {}, 1);
  auto p = profile_model(m, {16, 1, 2, 7});
  BOOST_REQUIRE_MESSAGE(p.has_value(), p.error().to_string());
  BOOST_REQUIRE_EQUAL(p->units.size(), m.size());
  BOOST_CHECK_EQUAL(p->batch, 16);
  uint64_t params = 0;
  for (const auto& u : p->units) {
    BOOST_CHECK_GE(u.forward_s, 0.0);
    params += u.parameter_bytes;
  }
  BOOST_CHECK_EQUAL(params, 44426u * 4);
  BOOST_CHECK_GT(p->units[0].forward_s, 0.0);
  BOOST_CHECK_GT(p->units[0].activation_bytes, 16u * 6 * 24 * 24 * 4 - 1);
  BOOST_CHECK_EQUAL(p->units.back().output_bytes, 16u * 10 * 4);
  // At least the passes asked for, more until the time floors are reached.
  BOOST_CHECK_GE(p->warmup_passes, 1);
  BOOST_CHECK_GE(p->timed_passes, 2);
  BOOST_CHECK_LE(p->timed_passes, 100);
}

BOOST_AUTO_TEST_CASE(profile_passes_follow_counts_and_time_floors) {
  model m = build("lenet5", {}, 1);
  profile_options counts{8, 3, 4, 7};
  counts.warmup_seconds = 0;
  counts.min_seconds = 0;
  auto p = profile_model(m, counts);
  BOOST_REQUIRE_MESSAGE(p.has_value(), p.error().to_string());
  BOOST_CHECK_EQUAL(p->warmup_passes, 3);
  BOOST_CHECK_EQUAL(p->timed_passes, 4);
  // A floor no pass count reaches: capped at max_iterations each.
  profile_options capped{8, 1, 1, 7};
  capped.warmup_seconds = 1e6;
  capped.min_seconds = 1e6;
  capped.max_iterations = 6;
  p = profile_model(m, capped);
  BOOST_REQUIRE_MESSAGE(p.has_value(), p.error().to_string());
  BOOST_CHECK_EQUAL(p->warmup_passes, 6);
  BOOST_CHECK_EQUAL(p->timed_passes, 6);
}

BOOST_AUTO_TEST_CASE(unit_ranges_compose_like_a_pipeline) {
  model m = build("lenet5", {});
  tensor x = random_batch(m, 5);
  m.context().run([&] {
    auto whole = m.forward(x.view(), mode::eval);
    BOOST_REQUIRE(whole.has_value());
    tensor expect = tensor::from(*whole);
    auto head = m.forward(x.view(), mode::eval, 0, 4);
    BOOST_REQUIRE(head.has_value());
    tensor mid = tensor::from(*head);  // what a stage boundary would carry
    auto tail = m.forward(mid.view(), mode::eval, 4);
    BOOST_REQUIRE(tail.has_value());
    BOOST_CHECK_EQUAL(max_abs_diff(*tail, expect.view()), 0.0f);
  });
}

BOOST_AUTO_TEST_CASE(cuda_without_a_device_is_refused_with_the_reason) {
  if (!probe_cuda().devices.empty()) {
    BOOST_TEST_MESSAGE("a CUDA device is present; the gpu suites cover it");
    return;
  }
  auto spec = make_model_spec("mlp");
  BOOST_REQUIRE(spec.has_value());
  auto m = build_model(*spec, device::cuda(0));
  BOOST_REQUIRE(!m.has_value());
  BOOST_CHECK(m.error().code() == errc::unsupported);
  BOOST_TEST(m.error().to_string().find("cuda:0") != std::string::npos, m.error().to_string());
}

BOOST_AUTO_TEST_CASE(vgg_head_width) {
  // The zoo's 32x32 VGG head is one layer of 512; head_width gives the
  // paper's two wide layers (fc1, fc2 of head_width, then fc3 of classes).
  zoo_options o;
  o.input = {3, 32, 32};
  auto plain = make_model_spec("vgg11", o);
  BOOST_REQUIRE(plain.has_value());
  BOOST_CHECK_EQUAL(plain->layers.back().name, "fc2");
  BOOST_CHECK_EQUAL(plain->layers[plain->layers.size() - 2].out, 512);
  o.head_width = 4096;
  auto wide = make_model_spec("vgg11", o);
  BOOST_REQUIRE(wide.has_value());
  std::vector<std::string> tail;
  for (std::size_t i = wide->layers.size() - 5; i < wide->layers.size(); ++i) tail.push_back(wide->layers[i].name);
  BOOST_CHECK((tail == std::vector<std::string>{"fc1", "drop1", "fc2", "drop2", "fc3"}));
  BOOST_CHECK_EQUAL(wide->layers[wide->layers.size() - 5].out, 4096);
  BOOST_CHECK_EQUAL(wide->layers[wide->layers.size() - 3].out, 4096);
  BOOST_CHECK_EQUAL(wide->layers.back().out, 10);
}
