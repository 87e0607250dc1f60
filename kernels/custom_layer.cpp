#include "kernels/custom_layer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>

namespace hetflow::kernels {
namespace {

struct layer_registry {
  std::mutex mu;
  std::map<std::string, custom_unit_factory, std::less<>> factories;
  std::map<std::string, std::vector<std::string>, std::less<>> keys;
};

layer_registry& registry() {
  static layer_registry r;
  return r;
}

}  // namespace

status register_custom_layer(const std::string& type, custom_unit_factory factory, std::vector<std::string> keys) {
  if (type.empty() || !factory)
    return make_error(errc::invalid_argument, "a custom layer needs a name and a factory");
  for (const auto& k : keys)
    if (k.empty() || k.find_first_of("=,() ") != std::string::npos)
      return make_error(errc::invalid_argument, "layer '" + type + "': key '" + k + "' is not a plain name");
  auto& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  if (!r.factories.emplace(type, std::move(factory)).second)
    return make_error(errc::already_exists, "layer '" + type + "' is registered already");
  r.keys[type] = std::move(keys);
  return {};
}

std::vector<std::string> custom_layer_keys(std::string_view type) {
  auto& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  auto it = r.keys.find(type);
  return it == r.keys.end() ? std::vector<std::string>{} : it->second;
}

status check_custom_args(const std::string& type, const std::vector<std::pair<std::string, std::string>>& args) {
  const auto keys = custom_layer_keys(type);
  std::string known;
  for (const auto& k : keys) known += (known.empty() ? "" : ", ") + k;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto& [k, v] = args[i];
    if (std::find(keys.begin(), keys.end(), k) == keys.end())
      return make_error(errc::invalid_argument, "layer '" + type + "' takes no key '" + k + "' (its keys: " +
                                                    (known.empty() ? "none" : known) + ")");
    for (std::size_t j = 0; j < i; ++j)
      if (args[j].first == k)
        return make_error(errc::invalid_argument, "layer '" + type + "': key '" + k + "' is given twice");
  }
  return {};
}

expected<double> custom_number(const layer_spec& spec, const std::string& key, double fallback) {
  for (const auto& [k, v] : spec.custom_args) {
    if (k != key) continue;
    char* end = nullptr;
    const double d = std::strtod(v.c_str(), &end);
    if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(d))
      return make_error(errc::invalid_argument, "unit " + spec.name + ": " + key + " = '" + v + "' is not a number");
    return d;
  }
  return fallback;
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
