// DLRM's feature part as one composite unit:
//
//   input (N, dense + T)  --dense cols-->  bottom MLP  --> b (N, D) ----------------+
//                         --id cols----->  T embedding lookups e_1..e_T (N, D)      |
//   features (N, F=T+1, D) = [b, e_1..e_T] --> dot interaction z (N, F(F-1)/2)      |
//   output = concat(b, z) (N, D + F(F-1)/2)  <--------------------------------------+
//
// Embedding tables get sparse gradients (only the rows of this batch).
#include <cmath>

#include <tbb/parallel_for.h>

#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/embedding.hpp"
#include "kernels/cpu/interaction.hpp"
#include "kernels/cpu/units.hpp"

namespace hetflow::kernels::cpu {
namespace {

class dlrm_unit final : public unit {
public:
  dlrm_unit(std::string name, const dlrm_spec& s, std::vector<std::unique_ptr<unit>> bottom, rng& init)
      : unit(std::move(name)), spec_(s), bottom_(std::move(bottom)) {
    const int64_t d = s.embedding_dim;
    tables_.resize(s.table_rows.size());
    for (std::size_t t = 0; t < tables_.size(); ++t) {
      parameter& p = tables_[t];
      p.name = this->name() + ".emb" + std::to_string(t);
      p.value = tensor::empty({s.table_rows[t], d});
      p.sparse = true;
      init_uniform(p.value, std::sqrt(1.0f / float(s.table_rows[t])), init);
    }
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
    in_shape_ = input;
    dense_.resize({n, spec_.dense_features});
    indices_.assign(tables_.size(), std::vector<int64_t>(std::size_t(n)));
    offsets_.resize(std::size_t(n));
    for (int64_t i = 0; i < n; ++i) offsets_[std::size_t(i)] = i;
    emb_.resize(tables_.size());
    demb_.resize(tables_.size());
    for (std::size_t t = 0; t < tables_.size(); ++t) {
      emb_[t].resize({n, d});
      demb_[t].resize({n, d});
    }
    feat_.resize({n, f, d});
    dfeat_.resize({n, f, d});
    z_.resize({n, interaction_pairs(f)});
    dz_.resize({n, interaction_pairs(f)});
    db_.resize({n, d});
    db_int_.resize({n, d});
    y_.resize({n, out_width()});
    dx_.resize(input);
    return shape{n, out_width()};
  }

  expected<tensor_view> forward(tensor_view x, mode m) override {
    if (!(x.shape() == in_shape_)) {
      auto r = prepare(x.shape());
      if (!r) return r.error();
    }
    const int64_t n = in_shape_[0], cols = in_shape_[1], nd = spec_.dense_features, d = spec_.embedding_dim;
    const float* in = x.f32();
    float* dense = dense_.f32();
    for (int64_t s = 0; s < n; ++s) {
      std::copy_n(in + s * cols, nd, dense + s * nd);
      for (std::size_t t = 0; t < tables_.size(); ++t) {
        float v = in[s * cols + nd + int64_t(t)];
        if (!(v >= 0.0f && v < float(spec_.table_rows[t]) && v == std::floor(v)))
          return make_error(errc::invalid_argument, "dlrm " + name() + ": sample " + std::to_string(s) +
                                                        " has id " + std::to_string(v) + " for table " +
                                                        std::to_string(t) + " of " +
                                                        std::to_string(spec_.table_rows[t]) + " rows");
        indices_[t][std::size_t(s)] = int64_t(v);
      }
    }
    tensor_view b = dense_.view();
    for (auto& u : bottom_) {
      auto r = u->forward(b, m);
      if (!r) return r.error();
      b = *r;
    }
    std::vector<status> errs(tables_.size());
    tbb::parallel_for(std::size_t(0), tables_.size(), [&](std::size_t t) {
      errs[t] = embedding_bag_forward(args(t), emb_[t].f32());
    });
    for (auto& e : errs) HF_RETURN_IF_ERROR(e);
    std::vector<const float*> parts{b.f32()};
    std::vector<int64_t> widths{d};
    for (auto& e : emb_) {
      parts.push_back(e.f32());
      widths.push_back(d);
    }
    concat_rows(parts, widths, n, feat_.f32());
    dot_interaction_forward(feat_.f32(), n, features(), d, z_.f32());
    const float* outs[] = {b.f32(), z_.f32()};
    const int64_t ow[] = {d, interaction_pairs(features())};
    concat_rows(outs, ow, n, y_.f32());
    return y_.view();
  }

  expected<tensor_view> backward(tensor_view dy, bool need_input_grad) override {
    const int64_t n = in_shape_[0], d = spec_.embedding_dim;
    if (dy.numel() != y_.numel())
      return make_error(errc::invalid_argument, "dlrm " + name() + ": gradient size mismatch");
    {
      float* parts[] = {db_.f32(), dz_.f32()};
      const int64_t widths[] = {d, interaction_pairs(features())};
      split_rows(dy.f32(), widths, n, parts);
    }
    dot_interaction_backward(feat_.f32(), dz_.f32(), n, features(), d, dfeat_.f32());
    {
      std::vector<float*> parts{db_int_.f32()};
      std::vector<int64_t> widths{d};
      for (auto& e : demb_) {
        parts.push_back(e.f32());
        widths.push_back(d);
      }
      split_rows(dfeat_.f32(), widths, n, parts);
    }
    add(db_.f32(), db_int_.f32(), db_.f32(), db_.numel());
    tensor_view g = db_.view();
    for (std::size_t i = bottom_.size(); i-- > 0;) {
      auto r = bottom_[i]->backward(g, i > 0 || need_input_grad);
      if (!r) return r.error();
      g = *r;
    }
    tbb::parallel_for(std::size_t(0), tables_.size(), [&](std::size_t t) {
      embedding_bag_backward(args(t), demb_[t].f32(), tables_[t].sparse_grad);
    });
    if (!need_input_grad) return tensor_view{};
    // Ids have no gradient; dense columns get the bottom MLP's input gradient.
    const int64_t cols = in_shape_[1], nd = spec_.dense_features;
    dx_.zero();
    for (int64_t s = 0; s < n; ++s) std::copy_n(g.f32() + s * nd, nd, dx_.f32() + s * cols);
    return dx_.view();
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
                 db_.byte_size() + db_int_.byte_size() + y_.byte_size() + dx_.byte_size();
    for (auto& e : emb_) b += 2 * e.byte_size();
    for (auto& u : bottom_) b += u->activation_bytes();
    return b;
  }

private:
  embedding_bag_args args(std::size_t t) const {
    embedding_bag_args a;
    a.table = tables_[t].value.f32();
    a.rows = spec_.table_rows[t];
    a.dim = spec_.embedding_dim;
    a.indices = indices_[t];
    a.offsets = offsets_;
    return a;
  }

  dlrm_spec spec_;
  std::vector<std::unique_ptr<unit>> bottom_;
  std::vector<parameter> tables_;
  shape in_shape_;
  tensor dense_, feat_, dfeat_, z_, dz_, db_, db_int_, y_, dx_;
  std::vector<tensor> emb_, demb_;
  std::vector<std::vector<int64_t>> indices_;
  std::vector<int64_t> offsets_;
};

}  // namespace

expected<built_unit> make_dlrm_features(cpu_context& ctx, const layer_spec& s, const shape& in, rng& init,
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
      return make_error(errc::invalid_argument, "dlrm " + s.name + ": table sizes must be in [1, 2^24] (ids travel as f32)");
  const std::string inner = prefix + s.name + ".";
  std::vector<std::unique_ptr<unit>> bottom;
  shape cur{d.dense_features};
  std::vector<int64_t> widths = d.bottom_mlp;
  widths.push_back(d.embedding_dim);
  for (std::size_t i = 0; i < widths.size(); ++i) {
    auto b = make_unit(ctx, layer_spec::linear("bottom" + std::to_string(i + 1), widths[i], true), cur, init, inner);
    if (!b) return b.error();
    bottom.push_back(std::move(b->u));
    cur = b->sample_output;
  }
  auto u = std::make_unique<dlrm_unit>(prefix + s.name, d, std::move(bottom), init);
  int64_t f = int64_t(d.table_rows.size()) + 1;
  return built_unit{std::move(u), shape{d.embedding_dim + interaction_pairs(f)}};
}

}  // namespace hetflow::kernels::cpu
