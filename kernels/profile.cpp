#include "kernels/profile.hpp"

#include <algorithm>
#include <chrono>

#include "kernels/device_context.hpp"
#include "kernels/random.hpp"

namespace hetflow::kernels {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

tensor random_input(const model& m, int64_t batch, uint64_t seed) {
  shape s{batch};
  for (int64_t d : m.spec().input.dims()) s.push_back(d);
  tensor x = tensor::empty(s);
  rng r(seed);
  float* p = x.f32();
  const auto& layers = m.spec().layers;
  if (!layers.empty() && layers.front().kind == layer_kind::dlrm_interaction) {
    const dlrm_spec& d = layers.front().dlrm;
    const int64_t cols = s[1];
    for (int64_t i = 0; i < batch; ++i) {
      for (int64_t j = 0; j < d.dense_features; ++j) p[i * cols + j] = r.normal();
      for (std::size_t t = 0; t < d.table_rows.size(); ++t)
        p[i * cols + d.dense_features + int64_t(t)] = float(r.below(uint64_t(d.table_rows[t])));
    }
    return x;
  }
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = r.normal();
  return x;
}

expected<model_profile> profile_model(model& m, const profile_options& o) {
  if (o.batch <= 0 || o.iterations <= 0 || o.warmup < 0)
    return make_error(errc::invalid_argument, "profile: batch and iterations must be > 0");
  if (o.input != nullptr && (o.input->shape().rank() == 0 || o.input->shape()[0] != o.batch))
    return make_error(errc::invalid_argument, "profile: the input's rows are not the batch");
  model_profile prof;
  prof.model = m.name();
  prof.where = m.where().to_string();
  prof.threads = m.context().threads();
  prof.batch = o.batch;
  status st;
  device_context& ctx = m.context();
  // Inputs and output gradients are made on the host and copied to the
  // model's device (a no-op copy for cpu); each timed call is bracketed by
  // synchronize() so asynchronous devices (cuda) are timed to completion.
  auto on_device = [&](tensor host) -> expected<tensor> {
    if (m.where().kind == device_kind::cpu) return host;
    return copy_to_device(ctx, host.view());
  };
  ctx.run([&] {
    using clk = std::chrono::steady_clock;
    auto xd = on_device(o.input != nullptr ? o.input->clone() : random_input(m, o.batch, o.seed));
    if (!xd) {
      st = xd.error();
      return;
    }
    tensor x = std::move(*xd);
    const std::size_t n = m.size();
    std::vector<std::vector<double>> fwd(n), bwd(n);
    std::vector<tensor> grads(n);
    // Whole passes: untimed until warmed up, then timed (see profile_options).
    const int cap = std::max(o.max_iterations, std::max(o.warmup, o.iterations));
    int warm = 0, timed = 0;
    double warm_s = 0, timed_s = 0;
    auto warming = [&] { return warm < o.warmup || (warm_s < o.warmup_seconds && warm < cap); };
    auto timing_more = [&] { return timed < o.iterations || (timed_s < o.min_seconds && timed < cap); };
    while (warming() || timing_more()) {
      const bool timing = !warming();
      const auto pass0 = clk::now();
      tensor_view cur = x.view();
      for (std::size_t i = 0; i < n; ++i) {
        if (st = ctx.synchronize(); !st.ok()) return;
        auto t0 = clk::now();
        auto y = m.at(i).forward(cur, mode::train);
        if (y) st = ctx.synchronize();
        double dt = std::chrono::duration<double>(clk::now() - t0).count();
        if (!y) {
          st = y.error();
          return;
        }
        if (!st.ok()) return;
        if (timing) fwd[i].push_back(dt);
        cur = *y;
        if (grads[i].shape() != cur.shape()) {
          tensor g = tensor::empty(cur.shape());
          rng r(o.seed + i);
          for (float& v : g.f32_span()) v = r.normal() * 1e-3f;
          auto gd = on_device(std::move(g));
          if (!gd) {
            st = gd.error();
            return;
          }
          grads[i] = std::move(*gd);
        }
      }
      for (std::size_t i = n; i-- > 0;) {
        if (st = ctx.synchronize(); !st.ok()) return;
        auto t0 = clk::now();
        auto d = m.at(i).backward(grads[i].view(), i > 0);
        if (d) st = ctx.synchronize();
        double dt = std::chrono::duration<double>(clk::now() - t0).count();
        if (!d) {
          st = d.error();
          return;
        }
        if (!st.ok()) return;
        if (timing) bwd[i].push_back(dt);
      }
      const double pass_s = std::chrono::duration<double>(clk::now() - pass0).count();
      if (timing) {
        ++timed;
        timed_s += pass_s;
      } else {
        ++warm;
        warm_s += pass_s;
      }
    }
    prof.warmup_passes = warm;
    prof.timed_passes = timed;
    for (std::size_t i = 0; i < n; ++i) {
      unit& u = m.at(i);
      unit_profile up;
      up.name = u.name();
      up.kind = u.kind();
      up.forward_s = median(fwd[i]);
      up.backward_s = median(bwd[i]);
      std::vector<parameter*> ps;
      u.parameters(ps);
      for (parameter* p : ps) up.parameter_bytes += p->value.byte_size();
      up.activation_bytes = u.activation_bytes();
      up.output_bytes = uint64_t(m.sample_shape(i + 1).numel()) * uint64_t(o.batch) * sizeof(float);
      prof.units.push_back(std::move(up));
    }
  });
  if (!st.ok()) return st.with_context("profiling " + m.name());
  return prof;
}

}  // namespace hetflow::kernels
