// plugin_api: everything a plugin author includes to add actor types, job
// kinds, image transforms and model layers to hetflow (README "Write your own
// actor type"; layers: kernels/custom_layer.hpp).
//
// A plugin is a shared library named in the topology file
//   [cluster]
//   plugins = ["lib/libmy_plugin.so"]      # relative to the topology file
// that exports ONE C entry point, `hetflow_plugin`, returning a descriptor.
// Write it with HETFLOW_PLUGIN (actors/plugin_abi.hpp):
//
//   hetflow::status register_types(hetflow::plugin::host& host) {
//     return host.add_actor_type(spec, [](caf::actor_system& sys, const hetflow::actors::actor_env& env) {
//       return sys.spawn(my_actor, env);
//     });
//   }
//   HETFLOW_PLUGIN("my_plugin", register_types)
//
// Every hetflow command that reads a topology (validate, plan, profile, node,
// run; the launcher's children are `hetflow node` processes, so every node)
// dlopens the file's plugins (RTLD_NOW | RTLD_LOCAL) and calls their register
// functions BEFORE the topology is checked, so [[actors]] and [job] may use
// the names they add. Libraries are never unloaded.
//
// ABI. The descriptor's first field is HETFLOW_PLUGIN_ABI_VERSION: the host
// reads it before anything else and refuses a plugin built for another
// version. Past the descriptor the interface is C++ (std::string,
// std::function, CAF handles), so the host also compares the CAF version and
// the C++ ABI the plugin was compiled with. Bump HETFLOW_PLUGIN_ABI_VERSION
// whenever this header, actors/registry.hpp, actors/node_services.hpp,
// topology/catalog.hpp, topology/cluster.hpp or the message protocol in
// actors/caf_types.hpp changes in a way a compiled plugin would notice.
//
// Symbols. A plugin links CAF (the same shared libcaf_core as hetflow) and
// nothing of hetflow: the hetflow binary exports its own symbols (the
// executable is linked with ENABLE_EXPORTS), and the plugin's references to
// them (schemas::decode_message, message_builder, topology::settings getters,
// actors::log) resolve against the running binary. A symbol the binary does
// not contain makes dlopen fail, naming it. Keep the default symbol
// visibility: type_info and inline statics then bind to the binary's copies.
// CMake: hetflow_add_plugin (plugins/CMakeLists.txt) links the interface
// target `hetflow_plugin_sdk`; see plugins/example/.
//
// The binary contract (descriptor, host interface, HETFLOW_PLUGIN) is
// actors/plugin_abi.hpp, CAF-free; this header adds what actor code needs:
// the atoms and local message types (actors/caf_types.hpp), the job-actor
// helpers, node services, logging and the tensor wire codec. Include it from
// .cpp files only: it pulls caf/all.hpp, like every actor implementation.
#pragma once

#include "actors/builtin/job_actor.hpp"
#include "actors/caf_types.hpp"
#include "actors/log.hpp"
#include "actors/node_services.hpp"
#include "actors/plugin_abi.hpp"
#include "actors/registry.hpp"
#include "schemas/error.hpp"
#include "schemas/tensor_codec.hpp"
#include "topology/catalog.hpp"
#include "topology/cluster.hpp"

namespace hetflow::plugin {

// Job-actor helpers a plugin's actors use like the built-in ones do
// (actors/builtin/job_actor.hpp): start gate, failing, decoding.
using actors::builtin::become_running;
using actors::builtin::decode_or_fail;
using actors::builtin::fail_job_actor;
using actors::builtin::init_job_actor;
using actors::builtin::job_actor_state;

}  // namespace hetflow::plugin
