#include "kernels/custom_layer.hpp"

#include <algorithm>
#include <exception>
#include <map>
#include <mutex>

namespace hetflow::kernels {
namespace {

struct layer_registry {
  std::mutex mu;
  std::map<std::string, custom_unit_factory, std::less<>> factories;
};

layer_registry& registry() {
  static layer_registry r;
  return r;
}

}  // namespace

status register_custom_layer(const std::string& type, custom_unit_factory factory) {
  if (type.empty() || !factory)
    return make_error(errc::invalid_argument, "a custom layer needs a name and a factory");
  auto& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  if (!r.factories.emplace(type, std::move(factory)).second)
    return make_error(errc::already_exists, "layer '" + type + "' is registered already");
  return {};
}

const custom_unit_factory* find_custom_layer(std::string_view type) {
  auto& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  auto it = r.factories.find(type);
  // Entries are never removed: the pointer stays valid.
  return it == r.factories.end() ? nullptr : &it->second;
}

std::vector<std::string> custom_layer_names() {
  auto& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  std::vector<std::string> out;
  for (auto& [name, f] : r.factories) out.push_back(name);
  return out;
}

status unknown_custom_layer(const std::string& what, const std::string& type, const std::string& hint) {
  std::string known;
  for (auto& n : custom_layer_names()) known += (known.empty() ? "" : ", ") + n;
  return make_error(errc::not_found, what + ": no plugin registered layer '" + type +
                                         "' (registered: " + (known.empty() ? "none" : known) + "; " + hint + ")");
}

expected<built_unit> make_custom_unit(const layer_spec& spec, const shape& sample_input, rng& init,
                                      const std::string& prefix) {
  const custom_unit_factory* f = find_custom_layer(spec.custom_type);
  if (f == nullptr) return unknown_custom_layer("unit " + spec.name, spec.custom_type, "is the plugin in [cluster] plugins?");
  expected<built_unit> b = make_error(errc::internal, "unset");
  try {
    b = (*f)(spec, sample_input, init, prefix);
  } catch (const std::exception& e) {
    return make_error(errc::internal, "unit " + spec.name + " (layer '" + spec.custom_type + "') threw: " + e.what());
  }
  if (!b) return b.error().with_context("unit " + spec.name + " (layer '" + spec.custom_type + "')");
  if (!b->u) return make_error(errc::internal, "unit " + spec.name + ": layer '" + spec.custom_type + "' built no unit");
  if (!b->sample_output.valid() || b->sample_output.numel() <= 0)
    return make_error(errc::invalid_argument, "unit " + spec.name + ": layer '" + spec.custom_type +
                                                  "' gives an invalid output shape " + b->sample_output.to_string());
  return b;
}

}  // namespace hetflow::kernels
