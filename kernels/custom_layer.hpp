// custom_layer: layers that plugins add by name (actors/plugin_abi.hpp,
// host::add_layer), used in a train job with `[job] insert_layers`.
//
// A custom layer is a kernels::unit the plugin implements itself (unit.hpp
// says what prepare/forward/backward must do; tensor.hpp the tensors). As
// the built-in units do, forward() must size itself (call prepare) when it
// gets a batch shape it was not prepared for: models call forward directly,
// and the last batch of an epoch may be smaller. The
// factory gets the layer_spec (its `name` is the unit's name, `custom_type`
// the registered name), one sample's input shape, the model's initialisation
// generator (draw from it only what the layer needs: other units' initial
// values follow it) and the parameter name prefix. It returns the unit and
// one sample's output shape, or an error naming what it cannot handle.
//
// Custom layers run on cpu devices only: the cuda backend refuses them with
// that message. The registry is process-wide and filled before any model is
// built (plugins register while the topology is loaded); lookups afterwards
// are read-only and thread-safe.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/layer_spec.hpp"
#include "kernels/random.hpp"
#include "kernels/unit.hpp"

namespace hetflow::kernels {

using custom_unit_factory = std::function<expected<built_unit>(const layer_spec& spec, const shape& sample_input,
                                                               rng& init, const std::string& prefix)>;

// already_exists for a name registered before; invalid_argument for an
// empty name or factory. `keys`: the keys the layer takes
// (layer_spec::custom_args; none: it takes none).
status register_custom_layer(const std::string& type, custom_unit_factory factory,
                             std::vector<std::string> keys = {});

// nullptr when nobody registered `type`.
const custom_unit_factory* find_custom_layer(std::string_view type);

// The keys `type` takes (empty: none, or not registered).
std::vector<std::string> custom_layer_keys(std::string_view type);

// invalid_argument naming the key and the keys `type` takes when some key
// of `args` is not one of them (or is given twice).
status check_custom_args(const std::string& type, const std::vector<std::pair<std::string, std::string>>& args);

// The value of `key` in spec.custom_args as a number (`fallback` when not
// given); invalid_argument naming the unit, key and value when it is not
// one - for plugin factories.
expected<double> custom_number(const layer_spec& spec, const std::string& key, double fallback);

// Registered names, sorted.
std::vector<std::string> custom_layer_names();

// not_found: "<what>: no plugin registered layer '<type>' (registered: a, b;
// <hint>)", the error of an unknown layer wherever it is named.
status unknown_custom_layer(const std::string& what, const std::string& type, const std::string& hint);

// Builds the unit of a custom layer_spec (the cpu backend's make_unit calls
// it): not_found naming the registered layers when nobody registered its
// type; the factory's errors with the unit's name; a factory that throws is
// an error too.
expected<built_unit> make_custom_unit(const layer_spec& spec, const shape& sample_input, rng& init,
                                      const std::string& prefix);

}  // namespace hetflow::kernels
