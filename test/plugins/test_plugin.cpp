// Test plugins: TEST_PLUGIN_<VARIANT> picks what this library does.
//   GOOD              actor type probe_actor (key `level`), job kind probe_job
//   NO_ENTRY          no hetflow_plugin symbol
//   ABI_MISMATCH      descriptor with HETFLOW_PLUGIN_ABI_VERSION + 1
//   CAF_MISMATCH      descriptor saying CAF 0.18.1
//   FAILS             register function returns an error
//   THROWS            register function throws
//   DUP_BUILTIN       registers the built-in names `producer` and `skeleton`,
//                     ignores the refusals and returns ok
//   DUP_OTHER         registers probe_actor too (clashes with GOOD)
//   UNDEFINED_SYMBOL  needs a symbol nothing defines (dlopen RTLD_NOW fails)
#include <caf/actor.hpp>

#include <stdexcept>

#include "actors/plugin_abi.hpp"

namespace {

using namespace hetflow;

[[maybe_unused]] caf::actor no_actor(caf::actor_system&, const actors::actor_env&) { return caf::actor{}; }

[[maybe_unused]] topology::type_spec probe_type(const char* name) {
  topology::type_spec t{name, "test plugin type", {}};
  t.keys.push_back(topology::key_spec{"level", topology::key_type::integer, false, int64_t{1}, "a level",
                                      0.0, 9.0, {}});
  return t;
}

#if defined(TEST_PLUGIN_GOOD)
status register_types(plugin::host& host) {
  HF_RETURN_IF_ERROR(host.add_actor_type(probe_type("probe_actor"), no_actor));
  return host.add_job_kind(topology::type_spec{"probe_job", "test plugin job", {}},
                           [](const topology::cluster&) -> expected<std::vector<topology::actor_spec>> {
                             return std::vector<topology::actor_spec>{};
                           },
                           {});
}
#elif defined(TEST_PLUGIN_FAILS)
status register_types(plugin::host& host) {
  return make_error(errc::not_found, "probe licence missing (plugin file " + host.plugin_file() + ")");
}
#elif defined(TEST_PLUGIN_THROWS)
status register_types(plugin::host&) { throw std::runtime_error("probe exploded"); }
#elif defined(TEST_PLUGIN_DUP_BUILTIN)
status register_types(plugin::host& host) {
  (void)host.add_actor_type(probe_type("producer"), no_actor);
  (void)host.add_job_kind(topology::type_spec{"skeleton", "again", {}}, {}, {});
  return {};
}
#elif defined(TEST_PLUGIN_DUP_OTHER)
status register_types(plugin::host& host) { return host.add_actor_type(probe_type("probe_actor"), no_actor); }
#elif defined(TEST_PLUGIN_UNDEFINED_SYMBOL)
}  // namespace
int hetflow_test_symbol_nobody_defines(int);
namespace {
status register_types(plugin::host&) {
  return hetflow_test_symbol_nobody_defines(1) == 0 ? status{} : make_error(errc::internal, "?");
}
#else
[[maybe_unused]] status register_types(plugin::host&) { return {}; }
#endif

}  // namespace

#if defined(TEST_PLUGIN_ABI_MISMATCH)
extern "C" __attribute__((visibility("default"))) const hetflow_plugin_descriptor* hetflow_plugin(void) {
  static const hetflow_plugin_descriptor d{HETFLOW_PLUGIN_ABI_VERSION + 1, CAF_VERSION, HETFLOW_PLUGIN_CXX_ABI,
                                           "abi-mismatch", &register_types};
  return &d;
}
#elif defined(TEST_PLUGIN_CAF_MISMATCH)
extern "C" __attribute__((visibility("default"))) const hetflow_plugin_descriptor* hetflow_plugin(void) {
  static const hetflow_plugin_descriptor d{HETFLOW_PLUGIN_ABI_VERSION, 1801, HETFLOW_PLUGIN_CXX_ABI,
                                           "caf-mismatch", &register_types};
  return &d;
}
#elif defined(TEST_PLUGIN_NO_ENTRY)
extern "C" __attribute__((visibility("default"))) int hetflow_plugin_register(void) { return 0; }
#else
HETFLOW_PLUGIN("probe", register_types)
#endif
