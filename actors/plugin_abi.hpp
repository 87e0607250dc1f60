// plugin_abi: the binary contract between hetflow and a plugin library: the
// entry point's descriptor, the host interface a register function gets, and
// the version checks. CAF-free (caf/fwd.hpp): the loader includes it, and so
// may plugins that only register types. Plugin authors include
// actors/plugin_api.hpp, which includes this (see there for the whole story).
#pragma once

#include <caf/config.hpp>

#include <cstdint>
#include <string>

#include "actors/registry.hpp"
#include "kernels/custom_layer.hpp"
#include "schemas/error.hpp"
#include "topology/catalog.hpp"

// Version of the plugin ABI: the descriptor below and the C++ types a plugin
// receives. Plugins built for another version are refused.
#define HETFLOW_PLUGIN_ABI_VERSION 4u

// The C++ ABI a plugin was compiled with: GCC/Clang's __GXX_ABI_VERSION and
// libstdc++'s dual std::string ABI; must match the host's.
#if defined(_GLIBCXX_USE_CXX11_ABI)
#define HETFLOW_PLUGIN_CXX_ABI (static_cast<uint32_t>(__GXX_ABI_VERSION) * 10u + _GLIBCXX_USE_CXX11_ABI)
#else
#define HETFLOW_PLUGIN_CXX_ABI (static_cast<uint32_t>(__GXX_ABI_VERSION) * 10u)
#endif

namespace hetflow::plugin {

// The host's side of registration: what a plugin's register function gets.
// Valid only during that call; not thread-safe (the host calls plugins one
// after the other on its main thread).
//
// Names must be new: an actor type or job kind that a built-in or another
// plugin already registered fails this plugin's load, whatever the register
// function returns afterwards (the host remembers every refused name).
class host {
public:
  // The plugin file as loaded (absolute), for the plugin's own messages.
  virtual const std::string& plugin_file() const = 0;
  // The node name for `hetflow node`, empty for validate/plan/run. Plugins
  // must register the same names everywhere: every node parses the topology
  // against the same catalog.
  virtual const std::string& node_name() const = 0;

  // Adds `[[actors]] type = spec.name`; `spec.keys` are its `args`.
  virtual status add_actor_type(topology::type_spec spec, actors::actor_factory spawn) = 0;
  // Adds `[job] kind = spec.name`; `spec.keys` are its keys. `summarize` may
  // be empty.
  virtual status add_job_kind(topology::type_spec spec, actors::job_expander expand,
                              actors::job_summarizer summarize) = 0;
  // Adds a per-sample image transform, `[job] transforms = ["NAME"]` of a
  // streamed train job, with its keys as `[job] NAME = { key = ... }`
  // (actors/registry.hpp: sample_transform says what it must be).
  virtual status add_transform(actors::transform_entry entry) = 0;
  // Adds a layer, `[job] insert_layers = ["AFTER:NAME"]` of a train job: the
  // unit the factory builds (kernels/custom_layer.hpp says what it must do;
  // cpu devices only). A name already registered by this load is refused.
  // `keys`: what `"AFTER:NAME(key=value, ...)"` may set (checked when the
  // topology is; the factory reads layer_spec::custom_args, e.g. with
  // kernels::custom_number).
  virtual status add_layer(const std::string& name, kernels::custom_unit_factory factory,
                           std::vector<std::string> keys) = 0;

protected:
  ~host() = default;  // owned by the host; plugins never delete it
};

// A plugin's register function: ok, or why it cannot register (the host
// prints the message naming the plugin file and exits 2). Exceptions are
// caught and reported the same way.
using register_function = status (*)(host& h);

}  // namespace hetflow::plugin

// What `hetflow_plugin()` returns. Field order is part of the ABI:
// abi_version stays first in every future version.
struct hetflow_plugin_descriptor {
  uint32_t abi_version;  // HETFLOW_PLUGIN_ABI_VERSION the plugin was built with
  uint32_t caf_version;  // CAF_VERSION the plugin was built with (e.g. 1706)
  uint32_t cxx_abi;      // HETFLOW_PLUGIN_CXX_ABI
  const char* name;      // the plugin's name, for messages
  hetflow::plugin::register_function register_types;
};

// The one entry point the host looks up (dlsym "hetflow_plugin").
extern "C" const hetflow_plugin_descriptor* hetflow_plugin(void);

// Defines the entry point: HETFLOW_PLUGIN("name", register_function).
#define HETFLOW_PLUGIN(NAME, REGISTER_FUNCTION)                                                  \
  extern "C" __attribute__((visibility("default"))) const hetflow_plugin_descriptor*            \
  hetflow_plugin(void) {                                                                         \
    static const hetflow_plugin_descriptor descriptor{HETFLOW_PLUGIN_ABI_VERSION, CAF_VERSION,  \
                                                      HETFLOW_PLUGIN_CXX_ABI, NAME,              \
                                                      &REGISTER_FUNCTION};                       \
    return &descriptor;                                                                          \
  }
