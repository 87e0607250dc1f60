// Training on CUDA against the same training on CPU (label gpu): LeNet-5
// step by step (loss each step, every parameter after the steps), a ResNet
// step (residual blocks, batch norm, global pooling end to end),
// train_single on cuda (the train job's path) including eval and saved
// weights; data parallelism with cuda replicas beside a cpu one and two
// cuda replicas on one device. Skipped (exit 77) without a device.
#define BOOST_TEST_MODULE kernels_cuda_training
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>

#include "cuda_test_util.hpp"
#include "kernels/loss.hpp"
#include "kernels/model.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/trainer.hpp"
#include "kernels/weights_io.hpp"
#include "kernels/zoo.hpp"
#include "test/kernels/replica_hub.hpp"

using namespace hetflow;
using namespace hetflow::kernels;
using namespace hetflow::kernels::testing;

int main(int argc, char** argv) { return run_or_skip(argc, argv); }

namespace {

model build(const std::string& name, zoo_options o, device where) {
  auto spec = make_model_spec(name, o);
  BOOST_REQUIRE_MESSAGE(spec.has_value(), spec.error().to_string());
  auto m = build_model(*spec, where, {2, 3});
  BOOST_REQUIRE_MESSAGE(m.has_value(), m.error().to_string());
  if (where.kind == device_kind::cuda) static_cast<cuda::context&>(m->context()).set_tf32(false);
  return std::move(*m);
}

void check_same_parameters(const std::string& what, model& c, model& g, double atol, double rtol) {
  auto pc = c.parameters(), pg = g.parameters();
  BOOST_REQUIRE_EQUAL(pc.size(), pg.size());
  for (std::size_t i = 0; i < pc.size(); ++i) {
    BOOST_CHECK_EQUAL(pc[i]->name, pg[i]->name);
    check_close(what + " " + pc[i]->name, pc[i]->value.view(), pg[i]->value.view(), atol, rtol);
  }
  auto sc = c.state(), sg = g.state();
  BOOST_REQUIRE_EQUAL(sc.size(), sg.size());
  for (std::size_t i = 0; i < sc.size(); ++i)
    check_close(what + " " + sc[i]->name, sc[i]->value.view(), sg[i]->value.view(), atol, rtol);
}

// `steps` SGD-momentum steps on the same random batches on both models;
// the loss of each step must agree.
void train_both(model& c, model& g, int64_t batch, int steps, double loss_rtol) {
  auto oc = make_optimizer({optimizer_kind::sgd, 0.05, 0.9, false, 1e-4});
  auto og = static_cast<cuda::context&>(g.context()).make_optimizer({optimizer_kind::sgd, 0.05, 0.9, false, 1e-4});
  BOOST_REQUIRE(oc.has_value());
  BOOST_REQUIRE(og.has_value());
  auto pc = c.parameters(), pg = g.parameters();
  shape in{batch};
  for (int64_t d : c.spec().input.dims()) in.push_back(d);
  for (int s = 0; s < steps; ++s) {
    tensor x = normal_host(in, 1000 + uint64_t(s));
    std::vector<int32_t> labels(static_cast<std::size_t>(batch));
    rng r(77 + uint64_t(s));
    for (auto& l : labels) l = int32_t(r.below(uint64_t(c.spec().classes)));
    tensor xg = to_gpu(x.view());
    double lc = 0, lg = 0;
    c.context().run([&] {
      auto y = c.forward(x.view(), mode::train);
      BOOST_REQUIRE(y.has_value());
      tensor grad = tensor::empty(y->shape());
      auto l = softmax_cross_entropy(*y, labels, grad.mutable_view());
      BOOST_REQUIRE(l.has_value());
      lc = l->loss;
      BOOST_REQUIRE(c.backward(grad.view()).has_value());
      BOOST_REQUIRE((*oc)->step(pc, 0.05).ok());
    });
    g.context().run([&] {
      auto y = g.forward(xg.view(), mode::train);
      BOOST_REQUIRE_MESSAGE(y.has_value(), y.error().to_string());
      tensor grad = tensor::empty_on(g.context().memory(), y->shape());
      auto l = static_cast<cuda::context&>(g.context()).softmax_cross_entropy(*y, labels, grad.mutable_view());
      BOOST_REQUIRE_MESSAGE(l.has_value(), l.error().to_string());
      lg = l->loss;
      auto b = g.backward(grad.view());
      BOOST_REQUIRE_MESSAGE(b.has_value(), b.error().to_string());
      auto st = (*og)->step(pg, 0.05);
      BOOST_REQUIRE_MESSAGE(st.ok(), st.to_string());
    });
    BOOST_TEST_MESSAGE("step " << s << ": cpu loss " << lc << ", cuda loss " << lg);
    BOOST_CHECK_LE(std::fabs(lc - lg), loss_rtol * std::fabs(lc) + 1e-5);
  }
}

// LeNet-5 on 1000 synthetic 28x28 images, 2 epochs of batch 50.
train_config small_lenet_config() {
  train_config cfg;
  cfg.model = "lenet5";
  cfg.data.kind = dataset_kind::synthetic;
  cfg.data.sample = {1, 28, 28};
  cfg.data.train_size = 1000;
  cfg.data.test_size = 200;
  cfg.epochs = 2;
  cfg.batch_size = 50;
  return cfg;
}

}  // namespace

BOOST_AUTO_TEST_CASE(lenet5_steps_match_cpu) {
  zoo_options o;
  model c = build("lenet5", o, device::cpu());
  model g = build("lenet5", o, device::cuda(0));
  BOOST_CHECK(g.where() == device::cuda(0));
  check_same_parameters("initial", c, g, 0.0, 0.0);
  train_both(c, g, 64, 8, 1e-3);
  check_same_parameters("after 8 steps", c, g, 2e-4, 5e-3);
  // Eval-mode logits after training.
  tensor x = normal_host({16, 1, 28, 28}, 5);
  tensor xg = to_gpu(x.view());
  auto yc = c.forward(x.view(), mode::eval);
  auto yg = g.forward(xg.view(), mode::eval);
  BOOST_REQUIRE(yc.has_value() && yg.has_value());
  check_close("eval logits", *yc, *yg, 5e-4, 5e-3);
}

BOOST_AUTO_TEST_CASE(resnet_and_vgg_steps_match_cpu) {
  zoo_options o;
  o.input = {3, 32, 32};
  o.width = 0.25;
  for (const char* name : {"resnet18", "vgg11"}) {
    BOOST_TEST_CONTEXT(name) {
      model c = build(name, o, device::cpu());
      model g = build(name, o, device::cuda(0));
      check_same_parameters("initial", c, g, 0.0, 0.0);
      train_both(c, g, 8, 3, 5e-3);
      // resnet18's stem gradient comes back through eight batch norms at
      // batch 8, which amplify the different summation orders of oneDNN and
      // cuDNN: on an H200 one stem weight of 0.006 differed by 0.0012 after
      // 3 steps (weights of that layer are ~0.3). Absolute 2e-3 there.
      const double atol = std::string(name) == "resnet18" ? 2e-3 : 1e-3;
      check_same_parameters("after 3 steps", c, g, atol, 2e-2);
    }
  }
}

BOOST_AUTO_TEST_CASE(train_single_on_cuda_matches_cpu) {
  // train_single makes its own context: strict f32 through the environment.
  setenv("HETFLOW_CUDA_TF32", "0", 1);
  train_config cfg = small_lenet_config();
  cfg.threads = 2;
  const auto dir = std::filesystem::temp_directory_path() / "hetflow_cuda_training_test";
  std::filesystem::create_directories(dir);
  cfg.save_weights = (dir / "cpu.hfw").string();
  auto rc = train_single(cfg);
  BOOST_REQUIRE_MESSAGE(rc.has_value(), rc.error().to_string());
  cfg.where = device::cuda(0);
  cfg.save_weights = (dir / "cuda.hfw").string();
  auto rg = train_single(cfg);
  BOOST_REQUIRE_MESSAGE(rg.has_value(), rg.error().to_string());
  BOOST_CHECK_EQUAL(rg->where, "cuda:0");
  BOOST_REQUIRE_EQUAL(rc->epochs.size(), rg->epochs.size());
  for (std::size_t e = 0; e < rc->epochs.size(); ++e) {
    const auto& a = rc->epochs[e];
    const auto& b = rg->epochs[e];
    BOOST_TEST_MESSAGE("epoch " << a.epoch << ": loss cpu " << a.loss << " cuda " << b.loss << "; test accuracy cpu "
                                << a.test_accuracy << " cuda " << b.test_accuracy << "; cuda " << b.samples_per_s
                                << " samples/s");
    BOOST_CHECK_CLOSE(a.loss, b.loss, 1.0);  // percent
    BOOST_CHECK_LE(std::fabs(a.test_accuracy - b.test_accuracy), 0.02);
    BOOST_CHECK_GT(b.samples_per_s, 0.0);
  }
  // The cuda run's weights file loads into a cpu model.
  auto spec = make_model_spec("lenet5");
  BOOST_REQUIRE(spec.has_value());
  auto mc = build_model(*spec, device::cpu(), {1, 9});
  auto mg = build_model(*spec, device::cpu(), {1, 9});
  BOOST_REQUIRE(mc.has_value() && mg.has_value());
  BOOST_REQUIRE(load_weights(*mc, (dir / "cpu.hfw").string()).ok());
  auto st = load_weights(*mg, cfg.save_weights);
  BOOST_REQUIRE_MESSAGE(st.ok(), st.to_string());
  check_same_parameters("saved weights", *mc, *mg, 2e-3, 2e-2);
  std::filesystem::remove_all(dir);
}

// precision bf16 and f16 train like f32 on the same device: close losses and
// accuracies (f16's skipped overflow steps and both formats' rounding move
// the trajectory a little), the report names the precision, and f16's
// dynamic loss scale stays usable.
BOOST_AUTO_TEST_CASE(train_single_in_bf16_and_f16) {
  train_config cfg = small_lenet_config();
  cfg.where = device::cuda(0);
  cfg.precision = math_mode::f32;
  auto ref = train_single(cfg);
  BOOST_REQUIRE_MESSAGE(ref.has_value(), ref.error().to_string());
  BOOST_CHECK_EQUAL(ref->precision, "f32");
  for (math_mode m : {math_mode::bf16, math_mode::f16}) {
    BOOST_TEST_CONTEXT(to_string(m)) {
      cfg.precision = m;
      auto r = train_single(cfg);
      BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().to_string());
      BOOST_CHECK_EQUAL(r->precision, to_string(m));
      BOOST_REQUIRE_EQUAL(r->epochs.size(), ref->epochs.size());
      for (std::size_t e = 0; e < r->epochs.size(); ++e) {
        BOOST_TEST_MESSAGE(to_string(m) << " epoch " << e + 1 << ": loss " << r->epochs[e].loss << " (f32 "
                                        << ref->epochs[e].loss << "), test accuracy " << r->epochs[e].test_accuracy
                                        << " (f32 " << ref->epochs[e].test_accuracy << "), "
                                        << r->epochs[e].samples_per_s << " samples/s; overflow steps "
                                        << r->overflow_steps << ", loss scale " << r->loss_scale);
        BOOST_CHECK_CLOSE(r->epochs[e].loss, ref->epochs[e].loss, 10.0);  // percent
        BOOST_CHECK_LE(std::fabs(r->epochs[e].test_accuracy - ref->epochs[e].test_accuracy), 0.1);
      }
      if (m == math_mode::f16) {
        BOOST_CHECK_LT(r->overflow_steps, 10);
        BOOST_CHECK_GE(r->loss_scale, 1.0);
      } else {
        BOOST_CHECK_EQUAL(r->overflow_steps, 0);
      }
    }
  }
}

// Data parallelism with cuda replicas (train_config::group): a cuda replica
// beside a cpu one, and two cuda replicas on the one device (two contexts),
// summing through an in-process group. Each cuda replica copies its
// gradients to a host copy of the model and steps it there, so every
// replica holds the same weights bit for bit after training. LeNet-5
// matches single-device cpu training (strict f32) within float rounding;
// resnet18's batch norm normalises each replica's rows by their own
// statistics (as DDP without SyncBatchNorm), so it trains close to, not
// like, the single device.
BOOST_AUTO_TEST_CASE(data_parallel_replicas_on_cuda_and_cpu_stay_identical) {
  setenv("HETFLOW_CUDA_TF32", "0", 1);
  for (std::string model : {"lenet5", "resnet18"}) {
    train_config cfg = small_lenet_config();
    cfg.model = model;
    cfg.threads = 2;
    if (model == "resnet18") cfg.width = 0.25;  // batch norm state crosses to the host and back
    auto single = train_single(cfg);
    BOOST_REQUIRE_MESSAGE(single.has_value(), single.error().to_string());
    for (auto devices : {std::vector<device>{device::cpu(), device::cuda(0)},
                         std::vector<device>{device::cuda(0), device::cuda(0)}}) {
      auto out = run_replicas(cfg, int(devices.size()), /*measured=*/true, nullptr, proportional,
                              [&](int r, train_config& c) { c.where = devices[std::size_t(r)]; });
      for (auto& r : out) BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().to_string());
      const std::string what = model + " on " + out[0]->where + " + " + out[1]->where;
      BOOST_TEST_CONTEXT(what) {
        BOOST_CHECK_EQUAL(out[1]->weights_checksum, out[0]->weights_checksum);
        BOOST_CHECK_EQUAL(out[1]->where, "cuda:0");
        BOOST_CHECK_GE(out[0]->epochs.back().test_accuracy, single->epochs.back().test_accuracy - 0.05);
        for (std::size_t e = 0; e < single->epochs.size(); ++e) {
          const auto& a = out[0]->epochs[e];
          BOOST_TEST_MESSAGE(what << " epoch " << e + 1 << ": loss " << a.loss << " (single cpu "
                                  << single->epochs[e].loss << "), test accuracy " << a.test_accuracy << " ("
                                  << single->epochs[e].test_accuracy << "), " << a.samples_per_s
                                  << " samples/s, split " << out[0]->splits[e][0] << "/" << out[0]->splits[e][1]);
          const double b = single->epochs[e].loss;
          if (model == "lenet5") {
            BOOST_CHECK_CLOSE(a.loss, b, 1.0);  // percent
            BOOST_CHECK_LE(std::fabs(a.test_accuracy - single->epochs[e].test_accuracy), 0.03);
          } else {
            BOOST_CHECK_LE(std::fabs(a.loss - b), 0.1 * b + 0.05);
          }
        }
      }
    }
  }
}
