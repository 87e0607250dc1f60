// plugin_loader: loads the plugins a topology file names into a registry.
//
// Runs before the topology is checked, because plugins extend the catalog the
// file is checked against:
//
//   topology::scan_plugins(file)      [cluster] plugins, read ahead (toml++)
//     -> dlopen(path, RTLD_NOW | RTLD_LOCAL)
//     -> dlsym("hetflow_plugin") -> descriptor: ABI version, CAF version, C++ ABI
//     -> descriptor->register_types(host)   adds actor types / job kinds to reg
//   topology::load_topology(file, reg.catalog())
//
// Every problem is a diagnostic at the plugins element that names the plugin
// (FILE:LINE:COL: error: plugin 'x.so' ...): the library does not load
// (dlerror), has no entry point, was built for another ABI, its register
// function fails or throws, or it adds a name that a built-in or an earlier
// plugin already has. Callers print them and exit 2.
//
// Libraries are never unloaded: the registry holds their factories, and CAF
// actors they spawned run their code until the process exits.
//
// Not thread-safe: call from main() before any actor system starts.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "topology/parser.hpp"

namespace hetflow::actors {

class registry;

struct loaded_plugin {
  std::filesystem::path path;  // absolute
  std::string name;            // the plugin's own name (descriptor)
  std::vector<std::string> actor_types;
  std::vector<std::string> job_kinds;
  std::vector<std::string> transforms;
  std::vector<std::string> layers;
};

struct plugin_load_result {
  std::vector<loaded_plugin> loaded;
  std::vector<topology::diagnostic> errors;  // in file order
  bool ok() const { return errors.empty(); }
};

// Loads the plugins of `topology_file` into `reg`. `node_name` is what
// plugin::host::node_name() tells the plugins (empty outside `hetflow node`).
// A file without plugins (or one load_topology will refuse) loads nothing.
plugin_load_result load_plugins(const std::filesystem::path& topology_file, registry& reg,
                                const std::string& node_name = {});

// The same for entries already read; `file_for_messages` names the topology
// in diagnostics.
plugin_load_result load_plugin_entries(const std::string& file_for_messages,
                                       const std::vector<topology::plugin_entry>& entries,
                                       registry& reg, const std::string& node_name = {});

}  // namespace hetflow::actors
