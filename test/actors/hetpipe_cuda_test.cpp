// hp_core's stage_core on a cuda device (label gpu; exit 77 without one):
// overlapped waves (weight stashing, per-wave sums of the local steps, the
// rebase onto a pulled G) keep the local weights, the slot copies and the
// sums on the device; the same schedule on a cpu stage_core with the same
// weights is the reference. TF32 off, so both agree to float rounding.
#define BOOST_TEST_MODULE hetpipe_cuda
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <random>

#include "actors/hetpipe/hp_core.hpp"
#include "kernels/cuda/cuda_api.hpp"
#include "kernels/cuda/cuda_loader.hpp"
#include "kernels/zoo.hpp"

using namespace hetflow;
using namespace hetflow::hetpipe;

int main(int argc, char** argv) {
  ::setenv("HETFLOW_CUDA_TF32", "0", 1);
  auto ctx = kernels::make_cuda_context(0);
  if (!ctx) {
    std::printf("SKIP: no usable CUDA device: %s\n", ctx.error().to_string().c_str());
    return 77;
  }
  return boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
}

namespace {

const kernels::shape k_input{1, 28, 28};
constexpr int64_t k_classes = 10;
constexpr int64_t k_rows = 8;

kernels::model_spec lenet() {
  kernels::zoo_options zo;
  zo.input = k_input;
  zo.classes = k_classes;
  auto spec = kernels::make_model_spec("lenet5", zo);
  BOOST_REQUIRE(spec.has_value());
  return *spec;
}

kernels::model build(const kernels::model_spec& spec, kernels::device where, uint64_t seed) {
  auto m = kernels::build_model(spec, where, {1, seed});
  BOOST_REQUIRE_MESSAGE(m.has_value(), m.error().message());
  return std::move(*m);
}

kernels::optimizer_config momentum() { return {kernels::optimizer_kind::sgd, 0.05, 0.9, false, 1e-4}; }

std::unique_ptr<stage_core> make_stage(const kernels::model_spec& whole, const kernels::shape& in, std::size_t first,
                                       std::size_t last, int slots, bool is_last, int nm, kernels::device where) {
  auto spec = slice_spec(whole, first, last, in);
  BOOST_REQUIRE_MESSAGE(spec.has_value(), spec.error().message());
  std::vector<kernels::model> ms;
  for (int s = 0; s < slots; ++s) ms.push_back(build(*spec, where, 500 + uint64_t(s)));
  auto sc = stage_core::make(std::move(ms), is_last, momentum(), nm);
  BOOST_REQUIRE_MESSAGE(sc.has_value(), sc.error().message());
  return std::move(*sc);
}

kernels::tensor random_tensor(const kernels::shape& s, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 r(seed);
  std::normal_distribution<float> n(0.0f, scale);
  auto t = kernels::tensor::empty(s);
  for (auto& x : t.f32_span()) x = n(r);
  return t;
}

std::vector<int32_t> labels_of(int64_t p) {
  std::mt19937_64 r(uint64_t(p) * 7919u + 3);
  std::vector<int32_t> l;
  for (int64_t i = 0; i < k_rows; ++i) l.push_back(int32_t(r() % uint64_t(k_classes)));
  return l;
}

// Largest |a - b| over the largest |b| (the sums of a wave's steps are
// small: an absolute tolerance would not see a step missing).
double worst(std::span<const float> a, std::span<const float> b) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  double d = 0.0, m = 1e-30;
  for (std::size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
    m = std::max(m, std::fabs(double(b[i])));
  }
  return d / m;
}

std::vector<kernels::tensor> copies(const std::vector<kernels::tensor_view>& v) {
  std::vector<kernels::tensor> out;
  for (auto& x : v) out.push_back(kernels::tensor::from(x));
  return out;
}

std::vector<kernels::tensor_view> views(const std::vector<kernels::tensor>& ts) {
  std::vector<kernels::tensor_view> v;
  for (auto& t : ts) v.push_back(t.view());
  return v;
}

}  // namespace

// accumulate: y += a - b, y = a - b, y += a.
BOOST_AUTO_TEST_CASE(accumulate_on_the_device) {
  auto c = kernels::make_cuda_context(0);
  BOOST_REQUIRE(c.has_value());
  auto& cc = **c;
  const kernels::shape s{1000, 3};
  auto y = random_tensor(s, 1), a = random_tensor(s, 2), b = random_tensor(s, 3);
  auto dy = kernels::copy_to_device(cc, y.view()), da = kernels::copy_to_device(cc, a.view()),
       db = kernels::copy_to_device(cc, b.view());
  BOOST_REQUIRE(dy && da && db);
  BOOST_REQUIRE(cc.accumulate(dy->mutable_view(), da->view(), db->view()).ok());
  auto h = kernels::copy_to_host(cc, dy->view());
  BOOST_REQUIRE(h.has_value());
  for (int64_t i = 0; i < y.numel(); ++i) BOOST_REQUIRE_EQUAL(h->f32()[i], y.f32()[i] + (a.f32()[i] - b.f32()[i]));
  BOOST_REQUIRE(cc.accumulate(dy->mutable_view(), da->view(), db->view(), false).ok());
  h = kernels::copy_to_host(cc, dy->view());
  for (int64_t i = 0; i < y.numel(); ++i) BOOST_REQUIRE_EQUAL(h->f32()[i], a.f32()[i] - b.f32()[i]);
  BOOST_REQUIRE(cc.accumulate(dy->mutable_view(), da->view()).ok());
  h = kernels::copy_to_host(cc, dy->view());
  for (int64_t i = 0; i < y.numel(); ++i) BOOST_REQUIRE_EQUAL(h->f32()[i], (a.f32()[i] - b.f32()[i]) + a.f32()[i]);
  // Host tensors and size mismatches are refused.
  BOOST_CHECK(!cc.accumulate(y.mutable_view(), da->view()).ok());
  auto small = kernels::copy_to_device(cc, random_tensor({7}, 4).view());
  BOOST_CHECK(!cc.accumulate(dy->mutable_view(), small->view()).ok());
}

// accumulate_many and copy_many: the per-tensor results, bit for bit, over
// more tensors than one launch takes (64), empty ones among them; bad
// arguments refused. record_point / wait_for: a second stream's copy waits
// for the first stream's long sum.
BOOST_AUTO_TEST_CASE(batched_sums_and_copies) {
  auto c = kernels::make_cuda_context(0);
  BOOST_REQUIRE(c.has_value());
  auto& cc = **c;
  const int count = 150;
  std::vector<kernels::tensor> hy, ha, hb, dy, da, db, dz;
  for (int k = 0; k < count; ++k) {
    const int64_t n = k % 37 == 5 ? 0 : (k * 7919) % 5000 + (k % 3 == 0 ? 70000 : 1);
    hy.push_back(random_tensor({n}, 10 + uint64_t(k)));
    ha.push_back(random_tensor({n}, 1000 + uint64_t(k)));
    hb.push_back(random_tensor({n}, 5000 + uint64_t(k)));
    for (auto* p : {&hy, &ha, &hb}) {
      auto d = kernels::copy_to_device(cc, p->back().view());
      BOOST_REQUIRE(d.has_value());
      (p == &hy ? dy : p == &ha ? da : db).push_back(std::move(*d));
    }
    auto z = kernels::copy_to_device(cc, kernels::tensor::zeros({n}).view());
    BOOST_REQUIRE(z.has_value());
    dz.push_back(std::move(*z));
  }
  std::vector<kernels::mutable_tensor_view> ys, zs;
  std::vector<kernels::tensor_view> as, bs;
  for (int k = 0; k < count; ++k) {
    ys.push_back(dy[k].mutable_view());
    zs.push_back(dz[k].mutable_view());
    as.push_back(da[k].view());
    bs.push_back(db[k].view());
  }
  auto host = [&](const kernels::tensor& t) {
    auto h = kernels::copy_to_host(cc, t.view());
    BOOST_REQUIRE(h.has_value());
    return std::move(*h);
  };
  BOOST_REQUIRE(cc.accumulate_many(ys, as, bs).ok());  // y += a - b
  for (int k = 0; k < count; ++k) {
    auto h = host(dy[k]);
    for (int64_t i = 0; i < h.numel(); ++i)
      BOOST_REQUIRE_EQUAL(h.f32()[i], hy[k].f32()[i] + (ha[k].f32()[i] - hb[k].f32()[i]));
  }
  BOOST_REQUIRE(cc.accumulate_many(ys, as, {}, false).ok());  // y = a
  BOOST_REQUIRE(cc.accumulate_many(ys, as, {}).ok());         // y += a
  BOOST_REQUIRE(cc.copy_many(as, zs).ok());                   // z = a
  for (int k = 0; k < count; ++k) {
    auto h = host(dy[k]), z = host(dz[k]);
    for (int64_t i = 0; i < h.numel(); ++i) {
      BOOST_REQUIRE_EQUAL(h.f32()[i], ha[k].f32()[i] + ha[k].f32()[i]);
      BOOST_REQUIRE_EQUAL(z.f32()[i], ha[k].f32()[i]);
    }
  }
  // Counts that differ, a host tensor, sizes that differ: refused.
  BOOST_CHECK(!cc.accumulate_many(ys, std::span(as).first(3), {}).ok());
  BOOST_CHECK(!cc.copy_many(as, std::span(zs).first(3)).ok());
  std::vector<kernels::tensor_view> with_host = as;
  with_host[1] = ha[1].view();
  BOOST_CHECK(!cc.copy_many(with_host, zs).ok());
  std::vector<kernels::tensor_view> shifted(as.begin() + 1, as.end());
  shifted.push_back(as[0]);
  BOOST_CHECK(!cc.copy_many(shifted, zs).ok());

  // Stream A: 200 sums into 32M floats (tens of ms of device time, queued
  // in well under that); stream B, made beforehand, waits for A's point and
  // copies to the host at once: it must see all 200 (without the wait it
  // would copy while A is still summing).
  const int64_t big = int64_t(1) << 25;
  const int rounds = 200;
  auto other = kernels::make_cuda_context(0);
  BOOST_REQUIRE(other.has_value());
  auto ones = kernels::copy_to_device(cc, kernels::tensor::filled({big}, 1.0f).view());
  auto acc = kernels::copy_to_device(cc, kernels::tensor::zeros({big}).view());
  BOOST_REQUIRE(ones && acc);
  BOOST_REQUIRE(cc.synchronize().ok());
  for (int r = 0; r < rounds; ++r) BOOST_REQUIRE(cc.accumulate(acc->mutable_view(), ones->view()).ok());
  auto point = cc.record_point();
  BOOST_REQUIRE(point.has_value());
  BOOST_REQUIRE((*other)->wait_for(*point).ok());
  auto seen = kernels::copy_to_host(**other, acc->view());
  BOOST_REQUIRE(seen.has_value());
  BOOST_CHECK_EQUAL(seen->f32()[0], float(rounds));
  BOOST_CHECK_EQUAL(seen->f32()[big - 1], float(rounds));
  BOOST_CHECK(!(*other)->wait_for(nullptr).ok());
}

// Two stages of LeNet-5 (units 0-3 | 4-end), Nm = 3, overlapped waves, one
// VW, as the runtime runs them (strict 1F1B; a rebase at each wave's first
// forward onto G = init + every wave <= w - 2). Stage 0 on cuda:0 and
// stage 1 on cpu, against both stages on cpu: the same losses, wave sums
// and final weights to float rounding; the slots stash their forward's
// weights on the device too.
BOOST_AUTO_TEST_CASE(overlapped_cuda_stage_matches_cpu) {
  const auto whole = lenet();
  auto ref = build(whole, kernels::device::cpu(), 42);
  const std::size_t cut = 3, units = whole.layers.size();
  const int nm = 3;
  const int64_t steps = 14;  // waves 0-4, the last one short
  struct pipe {
    std::unique_ptr<stage_core> s0, s1;
    std::vector<std::vector<kernels::tensor>> shard0, shard1;  // G per stage
    std::map<int64_t, std::vector<kernels::tensor>> pushed0, pushed1;
    std::vector<double> losses;
  };
  // G of wave 0 (any weights; the same for both runs): a slice built with its own seed.
  auto init = [&](std::size_t first, std::size_t last) {
    auto spec = slice_spec(whole, first, last, ref.sample_shape(first));
    BOOST_REQUIRE(spec.has_value());
    auto m = build(*spec, kernels::device::cpu(), 42 + first);
    std::vector<kernels::tensor> v;
    for (auto* q : m.parameters()) v.push_back(kernels::tensor::from(q->value.view()));
    return v;
  };
  const auto g0 = init(0, cut), g1 = init(cut + 1, units - 1);
  auto run = [&](kernels::device d0, kernels::device d1) {
    pipe P;
    P.s0 = make_stage(whole, ref.sample_shape(0), 0, cut, 2, false, nm, d0);
    P.s1 = make_stage(whole, ref.sample_shape(cut + 1), cut + 1, units - 1, 1, true, nm, d1);
    auto rebase = [&](stage_core& s, const std::vector<kernels::tensor>& g0v,
                      std::map<int64_t, std::vector<kernels::tensor>>& pushed, int64_t w) {
      // G holds the waves <= w - 2 (mark w - 1); odd tensors one wave fewer
      // (mark w - 2: the stage adds that wave's kept sum itself).
      std::vector<kernels::tensor> G;
      std::vector<int64_t> marks;
      for (std::size_t i = 0; i < g0v.size(); ++i) {
        const int64_t x = std::max<int64_t>(0, i % 2 == 1 ? w - 2 : w - 1);
        G.push_back(kernels::tensor::from(g0v[i].view()));
        for (auto& [t, d] : pushed)
          if (t < x)
            for (int64_t k = 0; k < G[i].numel(); ++k) G[i].f32()[k] += d[i].f32()[k];
        marks.push_back(x);
      }
      if (!s.on_device() || w % 2 == 1) {  // G from the host (one copy per tensor)
        BOOST_REQUIRE(s.rebase(views(G), marks).ok());
        return;
      }
      // ... or already on the device, as the uploader leaves it (one launch for all)
      std::vector<kernels::tensor> dG;
      for (auto& t : G) {
        auto d = kernels::copy_to_device(s.slot(0).context(), t.view());
        BOOST_REQUIRE(d.has_value());
        dG.push_back(std::move(*d));
      }
      BOOST_REQUIRE(s.rebase(views(dG), marks).ok());
    };
    auto update = [&](stage_core& s, std::map<int64_t, std::vector<kernels::tensor>>& pushed, int64_t p) {
      BOOST_REQUIRE(s.local_update(p, 0.05).ok());
      const int64_t w = p / nm;
      if (p + 1 == steps || (p + 1) % nm == 0) {
        if (s.on_device()) {  // as the push thread takes them: on a stream of its own, after the point
          auto dd = s.wave_delta_on_device(w);
          BOOST_REQUIRE_MESSAGE(dd.has_value(), dd.error().to_string());
          auto other = kernels::make_cuda_context(0);
          BOOST_REQUIRE(other.has_value());
          BOOST_REQUIRE((*other)->wait_for(dd->ready).ok());
          std::vector<kernels::tensor> got;
          for (auto& v : dd->update) {
            auto h = kernels::copy_to_host(**other, v);
            BOOST_REQUIRE(h.has_value());
            got.push_back(std::move(*h));
          }
          auto d = s.wave_delta(w);  // the host copies, on the stage's stream: the same bits
          BOOST_REQUIRE_MESSAGE(d.has_value(), d.error().to_string());
          BOOST_REQUIRE_EQUAL(d->size(), got.size());
          for (std::size_t i = 0; i < got.size(); ++i)
            BOOST_REQUIRE(std::memcmp(got[i].f32(), (*d)[i].f32(), (*d)[i].byte_size()) == 0);
          pushed[w] = std::move(got);
          return;
        }
        auto d = s.wave_delta(w);
        BOOST_REQUIRE_MESSAGE(d.has_value(), d.error().to_string());
        pushed[w] = copies(*d);
      }
    };
    // Stage 0 keeps 2 in flight: forward p, then (once 2 wait) the backward
    // of the oldest, whose gradient the last stage computes at once.
    std::deque<std::pair<int64_t, kernels::tensor>> waiting;  // minibatch, dL/d(stage 0 output)
    auto finish_oldest = [&] {
      auto& [q, g] = waiting.front();
      P.s0->slot(0).context().run([&] {
        auto dx = P.s0->backward(q, g.view(), false);
        BOOST_REQUIRE_MESSAGE(dx.has_value(), dx.error().to_string());
      });
      update(*P.s0, P.pushed0, q);
      waiting.pop_front();
    };
    for (int64_t p = 0; p < steps; ++p) {
      if (p % nm == 0) {
        rebase(*P.s0, g0, P.pushed0, p / nm);
        rebase(*P.s1, g1, P.pushed1, p / nm);
      }
      if (waiting.size() == 2) finish_oldest();
      auto x = random_tensor({k_rows, k_input[0], k_input[1], k_input[2]}, 100 + uint64_t(p));
      kernels::tensor act;
      P.s0->slot(0).context().run([&] {
        auto y = P.s0->forward(p, x.view());
        BOOST_REQUIRE_MESSAGE(y.has_value(), y.error().to_string());
        act = kernels::tensor::from(*y);
      });
      const auto labels = labels_of(p);
      kernels::tensor gin;
      P.s1->slot(0).context().run([&] {
        auto r = P.s1->forward_backward_last(p, act.view(), labels, true);
        BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().to_string());
        P.losses.push_back(r->loss.loss);
        gin = kernels::tensor::from(r->input_grad);
      });
      update(*P.s1, P.pushed1, p);
      waiting.emplace_back(p, std::move(gin));
    }
    while (!waiting.empty()) finish_oldest();
    return P;
  };
  pipe cpu = run(kernels::device::cpu(), kernels::device::cpu());
  // Stage 0 on the device (two slots), then both (stage 1: one slot, whose
  // update takes the weights before its step from the slot).
  for (const bool both : {false, true}) {
    pipe gpu = run(kernels::device::cuda(0), both ? kernels::device::cuda(0) : kernels::device::cpu());
    const char* which = both ? "cuda stages 0 and 1" : "cuda stage 0";
    BOOST_REQUIRE_EQUAL(cpu.losses.size(), gpu.losses.size());
    for (std::size_t p = 0; p < cpu.losses.size(); ++p) {
      BOOST_TEST_MESSAGE("minibatch " << p << ": loss cpu " << cpu.losses[p] << " " << which << " " << gpu.losses[p]);
      BOOST_CHECK_CLOSE(gpu.losses[p], cpu.losses[p], 0.05);  // percent
    }
    for (auto side : {&pipe::pushed0, &pipe::pushed1}) {
      BOOST_REQUIRE_EQUAL((cpu.*side).size(), (gpu.*side).size());
      for (auto& [w, d] : cpu.*side)
        for (std::size_t i = 0; i < d.size(); ++i) {
          const double e = worst((gpu.*side).at(w)[i].f32_span(), d[i].f32_span());
          BOOST_CHECK_MESSAGE(e <= 1e-3, which << ": stage " << (side == &pipe::pushed0 ? 0 : 1) << " wave " << w
                                               << " sum of tensor " << i << " differs by " << e);
        }
    }
    if (!both) BOOST_CHECK(!gpu.s0->wave_delta(99).has_value());
  }
}
