#include "actors/plugin_loader.hpp"

#include <dlfcn.h>

#include <exception>
#include <map>

#include "actors/plugin_abi.hpp"
#include "actors/registry.hpp"
#include "kernels/custom_layer.hpp"

namespace hetflow::actors {
namespace {

namespace fs = std::filesystem;

std::string version_text(uint32_t caf) {
  return std::to_string(caf / 10000) + "." + std::to_string((caf / 100) % 100) + "." +
         std::to_string(caf % 100);
}

// Who registered each name so far: absent = hetflow itself (built-in).
struct owners {
  std::map<std::string, std::string> actor_types, job_kinds, transforms, layers;
};

std::string owner_text(const std::map<std::string, std::string>& m, const std::string& name) {
  auto it = m.find(name);
  return it == m.end() ? std::string("hetflow (built-in)") : "plugin '" + it->second + "'";
}

// The registry as one plugin sees it. Remembers every name it refused, so a
// plugin that ignores add_*'s status still fails to load.
class host_impl final : public plugin::host {
public:
  host_impl(const fs::path& file, const std::string& node, registry& reg, owners& own)
      : file_(file.string()), node_(node), reg_(reg), own_(own) {}

  const std::string& plugin_file() const override { return file_; }
  const std::string& node_name() const override { return node_; }

  status add_actor_type(topology::type_spec spec, actor_factory spawn) override {
    const std::string name = spec.name;
    if (reg_.find_actor_type(name) != nullptr)
      return refuse("actor type '" + name + "' is already registered by " +
                    owner_text(own_.actor_types, name) + "; rename it in this plugin");
    if (auto s = reg_.add_actor_type(std::move(spec), std::move(spawn)); !s.ok()) return refuse(s.message());
    own_.actor_types[name] = file_;
    actor_types_.push_back(name);
    return {};
  }

  status add_job_kind(topology::type_spec spec, job_expander expand, job_summarizer summarize) override {
    const std::string name = spec.name;
    if (reg_.find_job_kind(name) != nullptr)
      return refuse("job kind '" + name + "' is already registered by " + owner_text(own_.job_kinds, name) +
                    "; rename it in this plugin");
    if (auto s = reg_.add_job_kind(std::move(spec), std::move(expand), std::move(summarize)); !s.ok())
      return refuse(s.message());
    own_.job_kinds[name] = file_;
    job_kinds_.push_back(name);
    return {};
  }

  status add_transform(transform_entry entry) override {
    const std::string name = entry.name;
    if (reg_.find_transform(name) != nullptr)
      return refuse("transform '" + name + "' is already registered by " + owner_text(own_.transforms, name) +
                    "; rename it in this plugin");
    if (auto s = reg_.add_transform(std::move(entry)); !s.ok()) return refuse(s.message());
    own_.transforms[name] = file_;
    transforms_.push_back(name);
    return {};
  }

  status add_layer(const std::string& name, kernels::custom_unit_factory factory,
                   std::vector<std::string> keys) override {
    if (name.empty() || !factory) return refuse("add_layer needs a name and a factory");
    if (own_.layers.count(name) != 0)
      return refuse("layer '" + name + "' is already registered by " + owner_text(own_.layers, name) +
                    "; rename it in this plugin");
    // The kernels' registry is process-wide and libraries are never
    // unloaded: a name it holds already comes from an earlier load of the
    // plugins in this process (the same library, dlopen hands it back), and
    // its factory stays valid.
    if (kernels::find_custom_layer(name) == nullptr)
      if (auto s = kernels::register_custom_layer(name, std::move(factory), std::move(keys)); !s.ok())
        return refuse(s.message());
    own_.layers[name] = file_;
    layers_.push_back(name);
    return {};
  }

  const std::vector<std::string>& refused() const { return refused_; }
  std::vector<std::string> actor_types_, job_kinds_, transforms_, layers_;

private:
  status refuse(std::string why) {
    refused_.push_back(why);
    return make_error(errc::already_exists, std::move(why));
  }

  std::string file_;
  const std::string& node_;
  registry& reg_;
  owners& own_;
  std::vector<std::string> refused_;
};

}  // namespace

plugin_load_result load_plugin_entries(const std::string& file_for_messages,
                                       const std::vector<topology::plugin_entry>& entries,
                                       registry& reg, const std::string& node_name) {
  plugin_load_result r;
  owners own;
  std::map<fs::path, topology::source_loc> seen;  // canonical path -> first element
  for (const auto& e : entries) {
    const std::string who = "plugin '" + e.text + "'" + (e.text == e.path.string() ? "" : " (" + e.path.string() + ")");
    auto error = [&](const std::string& what) {
      r.errors.push_back(topology::diagnostic{file_for_messages, e.where, who + " " + what});
    };
    std::error_code ec;
    fs::path canon = fs::weakly_canonical(e.path, ec);
    if (ec) canon = e.path;
    if (auto [it, fresh] = seen.emplace(canon, e.where); !fresh) {
      error("is listed twice (also at line " + std::to_string(it->second.line) + "); list each plugin once");
      continue;
    }

    // RTLD_NOW: a missing symbol is an error here, not a crash mid-job.
    // RTLD_LOCAL: plugins do not see each other's symbols.
    dlerror();
    void* handle = ::dlopen(e.path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      error(std::string("cannot be loaded: ") + (why ? why : "dlopen failed") +
            " (a hetflow plugin is a shared library built against this hetflow's actors/plugin_api.hpp)");
      continue;
    }
    // From here on the library stays loaded, even when it is refused: its
    // static destructors must not run while anything may still refer to it,
    // and exiting 2 follows anyway.
    dlerror();
    auto entry = reinterpret_cast<const hetflow_plugin_descriptor* (*)()>(::dlsym(handle, "hetflow_plugin"));
    if (entry == nullptr) {
      error("has no entry point 'hetflow_plugin'; define it with HETFLOW_PLUGIN(name, register_function) "
            "from actors/plugin_api.hpp");
      continue;
    }
    const hetflow_plugin_descriptor* d = entry();
    if (d == nullptr) {
      error("entry point 'hetflow_plugin' returned no descriptor");
      continue;
    }
    // abi_version first: the rest of the descriptor's layout depends on it.
    if (d->abi_version != HETFLOW_PLUGIN_ABI_VERSION) {
      error("was built for plugin ABI version " + std::to_string(d->abi_version) + ", but this hetflow has " +
            std::to_string(HETFLOW_PLUGIN_ABI_VERSION) + "; rebuild the plugin against this hetflow's "
            "actors/plugin_api.hpp");
      continue;
    }
    if (d->caf_version != CAF_VERSION) {
      error("was built with CAF " + version_text(d->caf_version) + ", but this hetflow uses CAF " +
            version_text(CAF_VERSION) + "; rebuild the plugin against the same CAF");
      continue;
    }
    if (d->cxx_abi != HETFLOW_PLUGIN_CXX_ABI) {
      error("was built with C++ ABI " + std::to_string(d->cxx_abi) + ", but this hetflow has " +
            std::to_string(HETFLOW_PLUGIN_CXX_ABI) + "; rebuild the plugin with the compiler and standard "
            "library hetflow was built with");
      continue;
    }
    if (d->register_types == nullptr) {
      error("has no register function in its descriptor");
      continue;
    }
    const std::string name = d->name != nullptr && *d->name != '\0' ? d->name : e.path.filename().string();

    host_impl host(e.path, node_name, reg, own);
    status s;
    try {
      s = d->register_types(host);
    } catch (const std::exception& ex) {
      s = make_error(errc::internal, std::string("threw an exception: ") + ex.what());
    } catch (...) {
      s = make_error(errc::internal, "threw an exception that is not a std::exception");
    }
    for (const auto& why : host.refused()) error("('" + name + "'): " + why);
    if (!s.ok()) {
      // Already reported when it is add_*'s refusal passed back.
      bool repeated = false;
      for (const auto& why : host.refused()) repeated = repeated || why == s.message();
      if (!repeated) error("('" + name + "') failed to register its types: " + s.message());
      continue;
    }
    if (!host.refused().empty()) continue;
    r.loaded.push_back(loaded_plugin{e.path, name, host.actor_types_, host.job_kinds_, host.transforms_, host.layers_});
  }
  return r;
}

plugin_load_result load_plugins(const fs::path& topology_file, registry& reg, const std::string& node_name) {
  return load_plugin_entries(topology_file.string(), topology::scan_plugins(topology_file), reg, node_name);
}

}  // namespace hetflow::actors
