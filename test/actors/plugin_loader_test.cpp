// The plugin loader: the pre-scan of [cluster] plugins, loading the good test
// plugin into a registry and parsing a topology that uses its names, and one
// clear diagnostic at the plugins element for every way a plugin is refused.
// The plugins are test/plugins/test_plugin.cpp's variants (paths from CMake).
#define BOOST_TEST_MODULE actors_plugin_loader
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "actors/plugin_abi.hpp"
#include "actors/plugin_loader.hpp"
#include "actors/registry.hpp"
#include "topology/parser.hpp"

using namespace hetflow;
using namespace hetflow::actors;
namespace fs = std::filesystem;

namespace {

// A scratch folder per test case, removed afterwards.
struct scratch {
  fs::path dir;
  scratch() {
    dir = fs::temp_directory_path() /
          ("hetflow-plugin-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    fs::create_directories(dir);
  }
  ~scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  static int& counter() {
    static int n = 0;
    return n;
  }
  // Writes a topology whose line 3 is `plugins = [...]` (each element quoted;
  // the first element starts at column 12) and returns its path.
  fs::path topology(const std::vector<std::string>& plugins, const std::string& job = "kind = \"skeleton\"",
                    const std::string& extra = "") const {
    std::string list;
    for (auto& p : plugins) list += (list.empty() ? "" : ", ") + ("\"" + p + "\"");
    fs::path f = dir / "topo.toml";
    std::ofstream(f) << "[cluster]\nname = \"t\"\nplugins = [" << list
                     << "]\n[[nodes]]\nname = \"a\"\nhost = \"127.0.0.1\"\nport = 7000\n[job]\n"
                     << job << "\n" << extra;
    return f;
  }
};

registry builtin_registry() {
  registry reg;
  add_builtin_types(reg);
  return reg;
}

std::string all_messages(const plugin_load_result& r) {
  std::string s;
  for (auto& d : r.errors) s += topology::format(d) + "\n";
  return s;
}

// Loads one plugin file that must be refused; returns the one diagnostic.
topology::diagnostic refused_one(const std::string& plugin) {
  scratch s;
  auto reg = builtin_registry();
  auto r = load_plugins(s.topology({plugin}), reg);
  BOOST_TEST_MESSAGE(all_messages(r));
  BOOST_REQUIRE_EQUAL(r.errors.size(), 1u);
  BOOST_TEST(r.loaded.empty());
  auto d = r.errors[0];
  BOOST_TEST(d.where.line == 3u);
  BOOST_TEST(d.where.column == 12u);
  BOOST_TEST(d.message.find(plugin) != std::string::npos, "names the plugin file: " << d.message);
  BOOST_TEST(d.file.find("topo.toml") != std::string::npos);
  return d;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_CASE(scan_reads_plugins_before_the_check) {
  scratch s;
  // Relative to the topology's folder; missing files, non-strings and a
  // broken rest of the file are load_topology's to report, not the scan's.
  std::ofstream(s.dir / "libone.so") << "x";
  fs::path f = s.topology({"libone.so", "missing.so", "./libone.so"}, "kind = \"no_such_job\"", "bogus = 1\n");
  auto entries = topology::scan_plugins(f);
  BOOST_REQUIRE_EQUAL(entries.size(), 2u);
  BOOST_TEST(entries[0].text == "libone.so");
  BOOST_TEST(entries[0].path == (s.dir / "libone.so").lexically_normal());
  BOOST_TEST(entries[0].where.line == 3u);
  BOOST_TEST(entries[0].where.column == 12u);
  BOOST_TEST(entries[1].text == "./libone.so");

  std::ofstream(s.dir / "bad.toml") << "[cluster\nplugins = [\"libone.so\"]\n";
  BOOST_TEST(topology::scan_plugins(s.dir / "bad.toml").empty());
  std::ofstream(s.dir / "str.toml") << "[cluster]\nplugins = \"libone.so\"\n";
  BOOST_TEST(topology::scan_plugins(s.dir / "str.toml").empty());
  BOOST_TEST(topology::scan_plugins(s.dir / "nope.toml").empty());
  // The parser's byte checks come first: a key toml++ would recurse on too
  // deeply is never parsed.
  std::string deep = "[cluster]\nplugins = [\"libone.so\"]\n";
  for (int i = 0; i < 100; ++i) deep += "a.";
  std::ofstream(s.dir / "deep.toml") << deep << "a = 1\n";
  BOOST_TEST(topology::scan_plugins(s.dir / "deep.toml").empty());
  BOOST_TEST(topology::scan_plugins(s.dir).empty());
}

BOOST_AUTO_TEST_CASE(good_plugin_extends_the_catalog) {
  scratch s;
  auto reg = builtin_registry();
  BOOST_TEST(reg.find_actor_type("probe_actor") == nullptr);
  fs::path f = s.topology({PLUGIN_GOOD}, "kind = \"probe_job\"",
                          "[[actors]]\nname = \"p\"\ntype = \"probe_actor\"\nnode = \"a\"\nargs = { level = 4 }\n");
  // Before loading, the file does not validate: unknown job kind and type.
  BOOST_TEST(!topology::load_topology(f, reg.catalog()).ok());

  auto r = load_plugins(f, reg, "a");
  BOOST_TEST_MESSAGE(all_messages(r));
  BOOST_REQUIRE(r.ok());
  BOOST_REQUIRE_EQUAL(r.loaded.size(), 1u);
  BOOST_TEST(r.loaded[0].name == "probe");
  BOOST_TEST(r.loaded[0].path == fs::path(PLUGIN_GOOD));
  BOOST_TEST(r.loaded[0].actor_types == std::vector<std::string>{"probe_actor"});
  BOOST_TEST(r.loaded[0].job_kinds == std::vector<std::string>{"probe_job"});
  BOOST_TEST(reg.find_actor_type("probe_actor") != nullptr);
  BOOST_TEST(reg.find_job_kind("probe_job") != nullptr);
  BOOST_TEST(reg.find_actor_type("producer") != nullptr);  // built-ins stay

  auto parsed = topology::load_topology(f, reg.catalog());
  for (auto& d : parsed.errors) BOOST_TEST_MESSAGE(topology::format(d));
  BOOST_REQUIRE(parsed.ok());
  BOOST_TEST(parsed.model->actors.at(0).args.get_int("level") == 4);
  auto placed = job_actors(*parsed.model, reg);
  BOOST_REQUIRE(placed.has_value());
  BOOST_TEST(placed->size() == 1u);

  // The plugin's keys are checked like a built-in type's.
  auto reg2 = builtin_registry();
  fs::path g = s.topology({PLUGIN_GOOD}, "kind = \"probe_job\"",
                          "[[actors]]\nname = \"p\"\ntype = \"probe_actor\"\nnode = \"a\"\nargs = { levle = 4 }\n");
  BOOST_REQUIRE(load_plugins(g, reg2).ok());
  auto bad = topology::load_topology(g, reg2.catalog());
  BOOST_REQUIRE(!bad.ok());
  BOOST_TEST(contains(bad.errors.at(0).message, "level"), bad.errors.at(0).message);
}

BOOST_AUTO_TEST_CASE(no_plugins_loads_nothing) {
  scratch s;
  auto reg = builtin_registry();
  auto before = reg.catalog().actor_types.size();
  auto r = load_plugins(s.topology({}), reg);
  BOOST_TEST(r.ok());
  BOOST_TEST(r.loaded.empty());
  BOOST_TEST(reg.catalog().actor_types.size() == before);
}

BOOST_AUTO_TEST_CASE(not_a_library) {
  scratch s;
  // Longer than an ELF header, so that dlopen reads it (shorter: "file too short").
  std::ofstream(s.dir / "libjunk.so") << std::string(200, 'x') << "\nthis is not an ELF file\n";
  auto d = refused_one((s.dir / "libjunk.so").string());
  BOOST_TEST(contains(d.message, "cannot be loaded"), d.message);
  BOOST_TEST(contains(d.message, "invalid ELF header"), d.message);  // dlerror's text
}

BOOST_AUTO_TEST_CASE(undefined_symbol) {
  auto d = refused_one(PLUGIN_UNDEFINED_SYMBOL);
  BOOST_TEST(contains(d.message, "cannot be loaded"), d.message);
  BOOST_TEST(contains(d.message, "undefined symbol"), d.message);
  BOOST_TEST(contains(d.message, "hetflow_test_symbol_nobody_defines"), d.message);
}

BOOST_AUTO_TEST_CASE(missing_entry_point) {
  auto d = refused_one(PLUGIN_NO_ENTRY);
  BOOST_TEST(contains(d.message, "has no entry point 'hetflow_plugin'"), d.message);
  BOOST_TEST(contains(d.message, "HETFLOW_PLUGIN"), d.message);
}

BOOST_AUTO_TEST_CASE(abi_version_mismatch) {
  auto d = refused_one(PLUGIN_ABI_MISMATCH);
  const std::string want = "built for plugin ABI version " + std::to_string(HETFLOW_PLUGIN_ABI_VERSION + 1) +
                           ", but this hetflow has " + std::to_string(HETFLOW_PLUGIN_ABI_VERSION);
  BOOST_TEST(contains(d.message, want), d.message);
}

BOOST_AUTO_TEST_CASE(caf_version_mismatch) {
  auto d = refused_one(PLUGIN_CAF_MISMATCH);
  BOOST_TEST(contains(d.message, "was built with CAF 0.18.1, but this hetflow uses CAF 0.17."), d.message);
}

BOOST_AUTO_TEST_CASE(register_function_fails) {
  auto d = refused_one(PLUGIN_FAILS);
  BOOST_TEST(contains(d.message, "failed to register its types"), d.message);
  BOOST_TEST(contains(d.message, "probe licence missing"), d.message);
}

BOOST_AUTO_TEST_CASE(register_function_throws) {
  auto d = refused_one(PLUGIN_THROWS);
  BOOST_TEST(contains(d.message, "threw an exception: probe exploded"), d.message);
}

BOOST_AUTO_TEST_CASE(duplicate_with_a_builtin_even_if_ignored) {
  scratch s;
  auto reg = builtin_registry();
  auto r = load_plugins(s.topology({PLUGIN_DUP_BUILTIN}), reg);
  BOOST_TEST_MESSAGE(all_messages(r));
  // The plugin ignores both refusals and returns ok: still refused, twice.
  BOOST_REQUIRE_EQUAL(r.errors.size(), 2u);
  BOOST_TEST(r.loaded.empty());
  BOOST_TEST(contains(r.errors[0].message, "actor type 'producer' is already registered by hetflow (built-in)"),
             r.errors[0].message);
  BOOST_TEST(contains(r.errors[1].message, "job kind 'skeleton' is already registered by hetflow (built-in)"),
             r.errors[1].message);
}

BOOST_AUTO_TEST_CASE(duplicate_with_another_plugin) {
  scratch s;
  auto reg = builtin_registry();
  auto r = load_plugins(s.topology({PLUGIN_GOOD, PLUGIN_DUP_OTHER}), reg);
  BOOST_TEST_MESSAGE(all_messages(r));
  BOOST_REQUIRE_EQUAL(r.errors.size(), 1u);
  BOOST_TEST(r.loaded.size() == 1u);  // the first one
  const auto& d = r.errors[0];
  BOOST_TEST(d.where.line == 3u);
  BOOST_TEST(d.where.column > 12u);  // the second element
  BOOST_TEST(contains(d.message, PLUGIN_DUP_OTHER), d.message);
  BOOST_TEST(contains(d.message, std::string("actor type 'probe_actor' is already registered by plugin '") +
                                     PLUGIN_GOOD + "'"),
             d.message);
}

BOOST_AUTO_TEST_CASE(listed_twice) {
  scratch s;
  auto reg = builtin_registry();
  auto r = load_plugins(s.topology({PLUGIN_GOOD, PLUGIN_GOOD}), reg);
  BOOST_REQUIRE_EQUAL(r.errors.size(), 1u);
  BOOST_TEST(contains(r.errors[0].message, "is listed twice (also at line 3)"), r.errors[0].message);
  BOOST_TEST(r.loaded.size() == 1u);
}

BOOST_AUTO_TEST_CASE(every_error_of_one_file_at_once) {
  scratch s;
  auto reg = builtin_registry();
  auto r = load_plugins(s.topology({PLUGIN_NO_ENTRY, PLUGIN_ABI_MISMATCH, PLUGIN_FAILS}), reg);
  BOOST_TEST_MESSAGE(all_messages(r));
  BOOST_REQUIRE_EQUAL(r.errors.size(), 3u);
  BOOST_TEST(r.errors[0].where.column < r.errors[1].where.column);
  BOOST_TEST(r.errors[1].where.column < r.errors[2].where.column);
}
