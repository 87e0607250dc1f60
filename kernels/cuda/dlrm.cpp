// DLRM's feature part as one composite cuda unit (cpu/dlrm.cpp's layout):
//
//   input (N, dense + T) --dense cols--> bottom MLP --> b (N, D) ------------+
//                        --id cols-----> T embedding lookups into feat       |
//   feat (N, F=T+1, D) = [b, e_1..e_T] --> dot interaction z (N, F(F-1)/2)   |
//   output = concat(b, z) (N, D + F(F-1)/2) <--------------------------------+
//
// Embedding lookups write straight into feat's rows and the backward reads
// its gradient from dfeat's rows (strided kernels), so concat and split are
// strided 2-D copies. Ids travel as f32 in the input, on the device: they are
// copied to the host once per forward (N x T floats) to be checked like the
// cpu backend does and to plan the sparse backward.
#include <cmath>

#include "kernels/cuda/embedding.hpp"
#include "kernels/cuda/ops.hpp"
#include "kernels/cuda/units.hpp"

namespace hetflow::kernels::cuda {
namespace {

constexpr int64_t interaction_pairs(int64_t f) noexcept { return f * (f - 1) / 2; }

class dlrm_unit final : public unit {
public:
  dlrm_unit(context_impl& ctx, std::string name, const dlrm_spec& s, std::vector<std::unique_ptr<unit>> bottom)
      : unit(std::move(name)), ctx_(ctx), spec_(s), bottom_(std::move(bottom)) {
    tables_.resize(s.table_rows.size());
    for (std::size_t t = 0; t < tables_.size(); ++t) {
      parameter& p = tables_[t];
      p.name = this->name() + ".emb" + std::to_string(t);
      p.value = ctx.make_tensor({s.table_rows[t], s.embedding_dim});
      p.sparse = true;
    }
    plans_.resize(tables_.size());
    bufs_.resize(tables_.size());
    indices_.resize(tables_.size());
    offsets_.clear();
  }

  status init(rng& init) {
    for (std::size_t t = 0; t < tables_.size(); ++t)
      HF_RETURN_IF_ERROR(init_uniform(ctx_, tables_[t].value, std::sqrt(1.0f / float(spec_.table_rows[t])), init));
    return {};
  }

  layer_kind kind() const noexcept override { return layer_kind::dlrm_interaction; }

  int64_t features() const { return int64_t(tables_.size()) + 1; }
  int64_t out_width() const { return spec_.embedding_dim + interaction_pairs(features()); }

  expected<shape> prepare(const shape& input) override {
    const int64_t cols = spec_.dense_features + int64_t(tables_.size());
    if (input.rank() != 2 || input[1] != cols)
      return make_error(errc::invalid_argument, "dlrm " + name() + ": expects (N, " + std::to_string(cols) +
                                                    ") input, got " + input.to_string());
    const int64_t n = input[0], d = spec_.embedding_dim, f = features();
    shape cur{n, spec_.dense_features};
    for (auto& u : bottom_) {
      auto r = u->prepare(cur);
      if (!r) return r.error();
      cur = *r;
    }
    HF_RETURN_IF_ERROR(sized(ctx_, "dlrm " + name(), [&]() -> status {
      ensure(ctx_, dense_, {n, spec_.dense_features});
      ensure(ctx_, feat_, {n, f, d});
      ensure(ctx_, dfeat_, {n, f, d});
      ensure(ctx_, z_, {n, interaction_pairs(f)});
      ensure(ctx_, dz_, {n, interaction_pairs(f)});
      ensure(ctx_, db_, {n, d});
      ensure(ctx_, y_, {n, out_width()});
      ensure(ctx_, dx_, input);
      return {};
    }));
    ids_host_.resize(std::size_t(n) * tables_.size());
    for (auto& v : indices_) v.resize(std::size_t(n));
    offsets_.resize(std::size_t(n));
    for (int64_t i = 0; i < n; ++i) offsets_[std::size_t(i)] = i;
    in_shape_ = input;
    return shape{n, out_width()};
  }

  expected<tensor_view> forward(tensor_view x, mode m) override {
    if (!(x.shape() == in_shape_) || y_.memory() == nullptr) {
      auto r = prepare(x.shape());
      if (!r) return r.error();
    }
    auto r = do_forward(x, m);
    if (!r) return in_unit(r.error(), "dlrm", name());
    return r;
  }

  expected<tensor_view> backward(tensor_view dy, bool need_input_grad) override {
    auto r = do_backward(dy, need_input_grad);
    if (!r) return in_unit(r.error(), "dlrm", name());
    return r;
  }

  void parameters(std::vector<parameter*>& out) override {
    for (auto& u : bottom_) u->parameters(out);
    for (auto& t : tables_) out.push_back(&t);
  }
  void state(std::vector<state_tensor*>& out) override {
    for (auto& u : bottom_) u->state(out);
  }
  uint64_t activation_bytes() const override {
    uint64_t b = dense_.byte_size() + feat_.byte_size() + dfeat_.byte_size() + z_.byte_size() + dz_.byte_size() +
                 db_.byte_size() + y_.byte_size() + dx_.byte_size();
    for (auto& u : bottom_) b += u->activation_bytes();
    return b;
  }

private:
  // dst (rows, width) with row pitch dst_ld <- src (rows, width), pitch src_ld (floats).
  status copy2d(float* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t width, int64_t rows) {
    HF_CUDA_CHECK(cudaMemcpy2DAsync(dst, std::size_t(dst_ld) * 4, src, std::size_t(src_ld) * 4,
                                    std::size_t(width) * 4, std::size_t(rows), cudaMemcpyDeviceToDevice,
                                    ctx_.stream()));
    return {};
  }

  expected<tensor_view> do_forward(tensor_view x, mode m) {
    HF_RETURN_IF_ERROR(ctx_.check_here(x, "input"));
    HF_RETURN_IF_ERROR(ctx_.activate());
    const int64_t n = in_shape_[0], cols = in_shape_[1], nd = spec_.dense_features, d = spec_.embedding_dim,
                  f = features(), tables = int64_t(tables_.size());
    // Ids to the host: (N, T) floats out of the input's last T columns.
    HF_CUDA_CHECK(cudaMemcpy2DAsync(ids_host_.data(), std::size_t(tables) * 4, x.f32() + nd, std::size_t(cols) * 4,
                                    std::size_t(tables) * 4, std::size_t(n), cudaMemcpyDeviceToHost, ctx_.stream()));
    HF_RETURN_IF_ERROR(copy2d(dense_.f32(), nd, x.f32(), cols, nd, n));
    HF_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
    for (int64_t s = 0; s < n; ++s)
      for (int64_t t = 0; t < tables; ++t) {
        const float v = ids_host_[std::size_t(s * tables + t)];
        if (!(v >= 0.0f && v < float(spec_.table_rows[std::size_t(t)]) && v == std::floor(v)))
          return make_error(errc::invalid_argument, "sample " + std::to_string(s) + " has id " + std::to_string(v) +
                                                        " for table " + std::to_string(t) + " of " +
                                                        std::to_string(spec_.table_rows[std::size_t(t)]) + " rows");
        indices_[std::size_t(t)][std::size_t(s)] = int64_t(v);
      }
    tensor_view b = dense_.view();
    for (auto& u : bottom_) {
      auto r = u->forward(b, m);
      if (!r) return r.error();
      b = *r;
    }
    HF_RETURN_IF_ERROR(copy2d(feat_.f32(), f * d, b.f32(), d, d, n));
    for (std::size_t t = 0; t < tables_.size(); ++t) {
      plan_bags(indices_[t], offsets_, false, m == mode::train, plans_[t]);
      HF_RETURN_IF_ERROR(bag_forward(ctx_, bufs_[t], plans_[t], indices_[t], tables_[t].value.f32(), d, false,
                                     feat_.f32() + int64_t(t + 1) * d, f * d));
    }
    HF_CUDA_CHECK(ops::dot_interaction_forward(feat_.f32(), n, f, d, z_.f32(), ctx_.stream()));
    const int64_t pairs = interaction_pairs(f), w = out_width();
    HF_RETURN_IF_ERROR(copy2d(y_.f32(), w, b.f32(), d, d, n));
    HF_RETURN_IF_ERROR(copy2d(y_.f32() + d, w, z_.f32(), pairs, pairs, n));
    last_mode_ = m;
    return y_.view();
  }

  expected<tensor_view> do_backward(tensor_view dy, bool need_input_grad) {
    if (dy.numel() != y_.numel()) return make_error(errc::invalid_argument, "gradient size mismatch");
    HF_RETURN_IF_ERROR(ctx_.check_here(dy, "gradient"));
    HF_RETURN_IF_ERROR(ctx_.activate());
    const int64_t n = in_shape_[0], d = spec_.embedding_dim, f = features(), pairs = interaction_pairs(f),
                  w = out_width();
    HF_RETURN_IF_ERROR(copy2d(db_.f32(), d, dy.f32(), w, d, n));
    HF_RETURN_IF_ERROR(copy2d(dz_.f32(), pairs, dy.f32() + d, w, pairs, n));
    HF_CUDA_CHECK(ops::dot_interaction_backward(feat_.f32(), dz_.f32(), n, f, d, dfeat_.f32(), ctx_.stream()));
    HF_CUDA_CHECK(ops::add_rows(dfeat_.f32(), f * d, db_.f32(), d, n, d, ctx_.stream()));
    tensor_view g = db_.view();
    for (std::size_t i = bottom_.size(); i-- > 0;) {
      auto r = bottom_[i]->backward(g, i > 0 || need_input_grad);
      if (!r) return r.error();
      g = *r;
    }
    for (std::size_t t = 0; t < tables_.size(); ++t) {
      if (last_mode_ != mode::train) plan_bags(indices_[t], offsets_, false, true, plans_[t]);
      HF_RETURN_IF_ERROR(bag_backward(ctx_, bufs_[t], plans_[t], dfeat_.f32() + int64_t(t + 1) * d, f * d, d,
                                      tables_[t].sparse_grad));
    }
    if (!need_input_grad) return tensor_view{};
    // Ids have no gradient; dense columns get the bottom MLP's input gradient.
    const int64_t cols = in_shape_[1], nd = spec_.dense_features;
    dx_.zero();
    HF_RETURN_IF_ERROR(copy2d(dx_.f32(), cols, g.f32(), nd, nd, n));
    return dx_.view();
  }

  context_impl& ctx_;
  dlrm_spec spec_;
  std::vector<std::unique_ptr<unit>> bottom_;
  std::vector<parameter> tables_;
  shape in_shape_;
  mode last_mode_ = mode::train;
  tensor dense_, feat_, dfeat_, z_, dz_, db_, y_, dx_;
  std::vector<float> ids_host_;
  std::vector<std::vector<int64_t>> indices_;
  std::vector<int64_t> offsets_;
  std::vector<bag_plan> plans_;
  std::vector<bag_buffers> bufs_;
};

}  // namespace

expected<built_unit> make_dlrm_features(context_impl& ctx, const layer_spec& s, const shape& in, rng& init,
                                        const std::string& prefix) {
  const dlrm_spec& d = s.dlrm;
  const int64_t cols = d.dense_features + int64_t(d.table_rows.size());
  if (in.rank() != 1 || in[0] != cols)
    return make_error(errc::invalid_argument, "dlrm " + s.name + ": input must be (" + std::to_string(cols) +
                                                  "), got " + in.to_string());
  if (d.embedding_dim <= 0 || d.dense_features <= 0)
    return make_error(errc::invalid_argument, "dlrm " + s.name + ": needs dense features and embedding_dim > 0");
  for (int64_t r : d.table_rows)
    if (r <= 0 || r > (int64_t(1) << 24))
      return make_error(errc::invalid_argument,
                        "dlrm " + s.name + ": table sizes must be in [1, 2^24] (ids travel as f32)");
  const std::string inner = prefix + s.name + ".";
  std::vector<std::unique_ptr<unit>> bottom;
  shape cur{d.dense_features};
  std::vector<int64_t> widths = d.bottom_mlp;
  widths.push_back(d.embedding_dim);
  for (std::size_t i = 0; i < widths.size(); ++i) {
    auto b = ctx.make_unit(layer_spec::linear("bottom" + std::to_string(i + 1), widths[i], true), cur, init, inner);
    if (!b) return b.error();
    bottom.push_back(std::move(b->u));
    cur = b->sample_output;
  }
  auto u = std::make_unique<dlrm_unit>(ctx, prefix + s.name, d, std::move(bottom));
  HF_RETURN_IF_ERROR(u->init(init));
  const int64_t f = int64_t(d.table_rows.size()) + 1;
  return built_unit{std::move(u), shape{d.embedding_dim + interaction_pairs(f)}};
}

}  // namespace hetflow::kernels::cuda
