// residual: y = relu?(body(x) + shortcut(x)), a composite unit of cuda units
// (ResNet's blocks). An empty shortcut is the identity.
#include "kernels/cuda/ops.hpp"
#include "kernels/cuda/units.hpp"

namespace hetflow::kernels::cuda {
namespace {

class residual_unit final : public unit {
public:
  residual_unit(context_impl& ctx, std::string name, std::vector<std::unique_ptr<unit>> body,
                std::vector<std::unique_ptr<unit>> shortcut, bool relu)
      : unit(std::move(name)), ctx_(ctx), body_(std::move(body)), shortcut_(std::move(shortcut)), relu_(relu) {}

  layer_kind kind() const noexcept override { return layer_kind::residual; }

  expected<shape> prepare(const shape& input) override {
    shape b = input, s = input;
    for (auto& u : body_) {
      auto r = u->prepare(b);
      if (!r) return r.error();
      b = *r;
    }
    for (auto& u : shortcut_) {
      auto r = u->prepare(s);
      if (!r) return r.error();
      s = *r;
    }
    if (!(b == s))
      return make_error(errc::invalid_argument, "residual " + name() + ": body output " + b.to_string() +
                                                    " != shortcut output " + s.to_string());
    HF_RETURN_IF_ERROR(sized(ctx_, "residual " + name(), [&]() -> status {
      ensure(ctx_, y_, b);
      if (relu_) ensure(ctx_, dpre_, b);
      ensure(ctx_, dx_, input);
      return {};
    }));
    in_shape_ = input;
    return b;
  }

  expected<tensor_view> forward(tensor_view x, mode m) override {
    if (!(x.shape() == in_shape_) || y_.memory() == nullptr) {
      auto r = prepare(x.shape());
      if (!r) return r.error();
    }
    tensor_view b = x, s = x;
    for (auto& u : body_) {
      auto r = u->forward(b, m);
      if (!r) return r.error();
      b = *r;
    }
    for (auto& u : shortcut_) {
      auto r = u->forward(s, m);
      if (!r) return r.error();
      s = *r;
    }
    HF_RETURN_IF_ERROR(ctx_.check_here(s, "residual " + name()));
    HF_CUDA_CHECK(ops::add(b.f32(), s.f32(), y_.f32(), y_.numel(), relu_, ctx_.stream()));
    return y_.view();
  }

  expected<tensor_view> backward(tensor_view dy, bool need_input_grad) override {
    HF_ASSIGN_OR_RETURN(tensor_view g, gradient_before_relu(ctx_, "residual", name(), dy, y_, relu_, dpre_));
    auto run_back = [&](std::vector<std::unique_ptr<unit>>& chain) -> expected<tensor_view> {
      tensor_view d = g;
      for (std::size_t i = chain.size(); i-- > 0;) {
        auto r = chain[i]->backward(d, i > 0 || need_input_grad);
        if (!r) return r.error();
        d = *r;
      }
      return d;
    };
    auto db = run_back(body_);
    if (!db) return db.error();
    auto ds = run_back(shortcut_);
    if (!ds) return ds.error();
    if (!need_input_grad) return tensor_view{};
    HF_CUDA_CHECK(ops::add(db->f32(), ds->f32(), dx_.f32(), dx_.numel(), false, ctx_.stream()));
    return dx_.view();
  }

  void parameters(std::vector<parameter*>& out) override {
    for (auto& u : body_) u->parameters(out);
    for (auto& u : shortcut_) u->parameters(out);
  }
  void state(std::vector<state_tensor*>& out) override {
    for (auto& u : body_) u->state(out);
    for (auto& u : shortcut_) u->state(out);
  }
  void set_seed(uint64_t seed) override {
    for (auto& u : body_) u->set_seed(seed = splitmix64(seed));
    for (auto& u : shortcut_) u->set_seed(seed = splitmix64(seed));
  }
  uint64_t activation_bytes() const override {
    uint64_t n = y_.byte_size() + dx_.byte_size() + (relu_ ? dpre_.byte_size() : 0);
    for (auto& u : body_) n += u->activation_bytes();
    for (auto& u : shortcut_) n += u->activation_bytes();
    return n;
  }

private:
  context_impl& ctx_;
  std::vector<std::unique_ptr<unit>> body_, shortcut_;
  bool relu_;
  shape in_shape_;
  tensor y_, dpre_, dx_;
};

}  // namespace

expected<built_unit> make_residual(context_impl& ctx, const layer_spec& s, const shape& in, rng& init,
                                   const std::string& prefix) {
  const std::string inner = prefix + s.name + ".";
  auto build_chain = [&](const std::vector<layer_spec>& specs,
                         std::vector<std::unique_ptr<unit>>& out) -> expected<shape> {
    shape cur = in;
    for (const layer_spec& c : specs) {
      auto b = ctx.make_unit(c, cur, init, inner);
      if (!b) return b.error();
      out.push_back(std::move(b->u));
      cur = b->sample_output;
    }
    return cur;
  };
  std::vector<std::unique_ptr<unit>> body, shortcut;
  auto bo = build_chain(s.body, body);
  if (!bo) return bo.error();
  auto so = build_chain(s.shortcut, shortcut);
  if (!so) return so.error();
  if (!(*bo == *so))
    return make_error(errc::invalid_argument, "residual " + s.name + ": body output " + bo->to_string() +
                                                  " != shortcut output " + so->to_string());
  if (body.empty()) return make_error(errc::invalid_argument, "residual " + s.name + ": empty body");
  return built_unit{
      std::make_unique<residual_unit>(ctx, prefix + s.name, std::move(body), std::move(shortcut), s.relu), *bo};
}

}  // namespace hetflow::kernels::cuda
