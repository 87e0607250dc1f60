// residual: y = relu?(body(x) + shortcut(x)), a composite unit (ResNet's basic
// and bottleneck blocks). An empty shortcut is the identity. Within the body
// and within the shortcut, adjacent conv2d and batch-norm units hand their
// data on in their primitives' layout (link_units).
#include "kernels/cpu/fused_relu.hpp"
#include "kernels/cpu/units.hpp"

namespace hetflow::kernels::cpu {
namespace {

class residual_unit final : public unit {
public:
  residual_unit(std::string name, std::vector<std::unique_ptr<unit>> body,
                std::vector<std::unique_ptr<unit>> shortcut, bool relu)
      : unit(std::move(name)), body_(std::move(body)), shortcut_(std::move(shortcut)), relu_(relu) {}

  layer_kind kind() const noexcept override { return layer_kind::residual; }

  expected<shape> prepare(const shape& input) override {
    // Until every unit is prepared and linked anew: a failure midway leaves
    // some units re-planned (their links cleared) and others still linked,
    // so the next forward must prepare and link them all again.
    in_shape_ = shape{};
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
    link_units(body_);
    link_units(shortcut_);
    in_shape_ = input;
    y_.resize(b);
    dpre_.resize(b);
    dx_.resize(input);
    return b;
  }

  expected<tensor_view> forward(tensor_view x, mode m) override {
    if (!(x.shape() == in_shape_)) {
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
    add(b.f32(), s.f32(), y_.f32(), y_.numel());
    if (relu_) relu_forward(y_.f32(), y_.f32(), y_.numel());
    return y_.view();
  }

  expected<tensor_view> backward(tensor_view dy, bool need_input_grad) override {
    HF_ASSIGN_OR_RETURN(tensor_view g, gradient_before_relu("residual", name(), dy, y_, relu_, dpre_));
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
    add(db->f32(), ds->f32(), dx_.f32(), dx_.numel());
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
  std::vector<std::unique_ptr<unit>> body_, shortcut_;
  bool relu_;
  shape in_shape_;
  tensor y_, dpre_, dx_;
};

}  // namespace

int link_units(const std::vector<std::unique_ptr<unit>>& chain) {
  std::vector<linkable*> l(chain.size());
  for (std::size_t i = 0; i < chain.size(); ++i) l[i] = dynamic_cast<linkable*>(chain[i].get());
  std::vector<inner_link> links(chain.size());
  int linked = 0;
  for (std::size_t i = 1; i < chain.size(); ++i) {
    linkable* a = l[i - 1];
    linkable* b = l[i];
    if (!a || !b) continue;
    const staged_memory* out = a->link_output();
    const staged_memory* out_grad = a->link_output_grad();
    const staged_memory* in = b->link_input();
    const staged_memory* in_grad = b->link_input_grad();
    if (!out || !out_grad || !in || !in_grad) continue;
    // Both sides reorder today (else there is nothing to save), to the same layouts.
    if (!out->staged() || !out_grad->staged() || !in->staged() || !in_grad->staged()) continue;
    if (out->wanted() != in->wanted() || in_grad->wanted() != out_grad->wanted()) continue;
    links[i - 1].output_inner = true;
    links[i - 1].output_grad = in_grad;
    links[i].input = out;
    links[i].input_grad_inner = true;
    ++linked;
  }
  for (std::size_t i = 0; i < chain.size(); ++i)
    if (l[i]) l[i]->set_link(links[i]);
  return linked;
}

expected<built_unit> make_residual(cpu_context& ctx, const layer_spec& s, const shape& in, rng& init,
                                   const std::string& prefix) {
  const std::string inner = prefix + s.name + ".";
  auto build_chain = [&](const std::vector<layer_spec>& specs,
                         std::vector<std::unique_ptr<unit>>& out) -> expected<shape> {
    shape cur = in;
    for (const layer_spec& c : specs) {
      auto b = make_unit(ctx, c, cur, init, inner);
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
  if (body.empty())
    return make_error(errc::invalid_argument, "residual " + s.name + ": empty body");
  return built_unit{std::make_unique<residual_unit>(prefix + s.name, std::move(body), std::move(shortcut), s.relu),
                    *bo};
}

}  // namespace hetflow::kernels::cpu
