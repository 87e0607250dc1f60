// topology/settings.hpp, topology/catalog.hpp, topology/cluster.hpp: the plain
// model types' lookups and to_string.
#define BOOST_TEST_MODULE topology_model
#include <boost/test/unit_test.hpp>

#include <string>

#include "test_catalog.hpp"
#include "topology/catalog.hpp"
#include "topology/cluster.hpp"
#include "topology/settings.hpp"

using namespace hetflow::topology;

BOOST_AUTO_TEST_CASE(settings_getters_check_the_held_type) {
  settings s;
  s.set("b", true);
  s.set("i", int64_t{42});
  s.set("d", 2.5);
  s.set("s", std::string("text"));
  s.set("ss", std::vector<std::string>{"x", "y"});
  s.set("is", std::vector<int64_t>{1, 2, 3});
  BOOST_TEST(s.contains("b"));
  BOOST_TEST(!s.contains("missing"));
  BOOST_TEST(s.get_bool("b") == true);
  BOOST_TEST(s.get_bool("i", true) == true);  // wrong type -> fallback
  BOOST_TEST(s.get_int("i") == 42);
  BOOST_TEST(s.get_int("d", -1) == -1);
  BOOST_TEST(s.get_int("missing", 7) == 7);
  BOOST_TEST(s.get_number("d") == 2.5);
  BOOST_TEST(s.get_number("i") == 42.0);  // integers widen to numbers
  BOOST_TEST(s.get_number("s", 1.5) == 1.5);
  BOOST_TEST(s.get_string("s") == "text");
  BOOST_TEST(s.get_string("i", "fb") == "fb");
  BOOST_TEST((s.get_strings("ss") == std::vector<std::string>{"x", "y"}));
  BOOST_TEST(s.get_strings("s").empty());
  BOOST_TEST((s.get_ints("is") == std::vector<int64_t>{1, 2, 3}));
  BOOST_TEST(s.get_ints("ss").empty());
  s.set("i", std::string("now a string"));  // set replaces
  BOOST_TEST(s.get_int("i", -5) == -5);
  BOOST_TEST(s.values().size() == 6u);
}

BOOST_AUTO_TEST_CASE(catalog_lookup) {
  const catalog c = test::make_test_catalog();
  BOOST_REQUIRE(c.find_job_kind("skeleton") != nullptr);
  BOOST_TEST(c.find_job_kind("skeleton")->name == "skeleton");
  BOOST_TEST(c.find_job_kind("producer") == nullptr);  // job kinds and actor types are separate
  BOOST_TEST(c.find_job_kind("Skeleton") == nullptr);  // exact, case-sensitive
  BOOST_REQUIRE(c.find_actor_type("checker") != nullptr);
  BOOST_TEST(c.find_actor_type("checker") == &c.actor_types[2]);
  BOOST_TEST(c.find_actor_type("") == nullptr);
  BOOST_TEST(catalog{}.find_job_kind("skeleton") == nullptr);
}

BOOST_AUTO_TEST_CASE(cluster_node_lookup) {
  cluster c;
  c.nodes.resize(3);
  c.nodes[0].name = "head";
  c.nodes[1].name = "w1";
  c.nodes[2].name = "w2";
  BOOST_TEST(c.node_index("head") == 0);
  BOOST_TEST(c.node_index("w2") == 2);
  BOOST_TEST(c.node_index("w3") == -1);
  BOOST_TEST(c.find_node("w1") == &c.nodes[1]);
  BOOST_TEST(c.find_node("nope") == nullptr);
  BOOST_TEST(&c.head() == &c.nodes[0]);
}

BOOST_AUTO_TEST_CASE(names) {
  BOOST_TEST(std::string(to_string(device_kind::cpu)) == "cpu");
  BOOST_TEST(std::string(to_string(device_kind::cuda)) == "cuda");
  BOOST_TEST(std::string(to_string(key_type::boolean)) == "boolean");
  BOOST_TEST(std::string(to_string(key_type::size)) == "size");
  BOOST_TEST(std::string(to_string(key_type::duration)) == "duration");
  BOOST_TEST(std::string(to_string(key_type::path_list)) == "path_list");
  BOOST_TEST(std::string(to_string(key_type::size_list)) == "size_list");
}

BOOST_AUTO_TEST_CASE(local_cpu_shares_give_asking_nodes_one_more_where_there_are_enough) {
  using v = std::vector<std::size_t>;
  BOOST_TEST(local_cpu_shares({8, 0}, 16) == (v{9, 7}));    // one more for n0's service threads
  BOOST_TEST(local_cpu_shares({8, 0}, 9) == (v{8, 1}));     // no room for the extra one
  BOOST_TEST(local_cpu_shares({8, 0}, 10) == (v{9, 1}));
  BOOST_TEST(local_cpu_shares({1, 1}, 2) == (v{1, 1}));     // the 2-core VM: as asked
  BOOST_TEST(local_cpu_shares({2, 1}, 5) == (v{3, 2}));
  BOOST_TEST(local_cpu_shares({0, 0, 0}, 8) == (v{3, 3, 2}));  // shares, the first ones one more
  BOOST_TEST(local_cpu_shares({2, 1}, 2).empty());          // more than there are
  BOOST_TEST(local_cpu_shares({2, 0}, 2).empty());          // the sharing node needs one too
}

BOOST_AUTO_TEST_CASE(auto_pinned_cpus_are_what_hetflow_run_pins_local_nodes_to) {
  cluster cl;
  cl.runtime.pin_local_nodes = "auto";
  for (const char* n : {"a", "b", "c"}) {
    node_spec s;
    s.name = n;
    device_spec d;
    d.kind = device_kind::cpu;
    d.threads = 1;
    s.devices.push_back(d);
    cl.nodes.push_back(s);
  }
  using vv = std::vector<std::vector<int>>;
  BOOST_TEST((auto_pinned_cpus(cl, {0, 2}, {4, 5}) == vv{{4}, {5}}));  // the 2-core VM: one each
  BOOST_TEST((auto_pinned_cpus(cl, {0, 1, 2}, {0, 1, 2, 3, 4, 5, 6}) == vv{{0, 1}, {2, 3}, {4, 5}}));
  BOOST_TEST(auto_pinned_cpus(cl, {0}, {0, 1}).empty());          // one local node: not pinned
  BOOST_TEST(auto_pinned_cpus(cl, {0, 1, 2}, {0, 1}).empty());    // more asked than there are
  cl.nodes[1].cpus = {3};
  BOOST_TEST(auto_pinned_cpus(cl, {0, 1}, {0, 1, 2, 3}).empty()); // a node pins itself
  cl.nodes[1].cpus.clear();
  cl.runtime.pin_local_nodes = "off";
  BOOST_TEST(auto_pinned_cpus(cl, {0, 1}, {0, 1}).empty());
}

BOOST_AUTO_TEST_CASE(cpu_lists_parse_and_format) {
  auto ok = parse_cpu_list("0-3,8,10-11,2");
  BOOST_REQUIRE(ok.has_value());
  BOOST_TEST((*ok == std::vector<int>{0, 1, 2, 3, 8, 10, 11}));  // sorted, each once
  BOOST_TEST(format_cpu_list(*ok) == "0-3,8,10-11");
  BOOST_TEST(format_cpu_list({5}) == "5");
  BOOST_TEST(format_cpu_list({}) == "");
  auto one = parse_cpu_list("7");
  BOOST_REQUIRE(one.has_value());
  BOOST_TEST((*one == std::vector<int>{7}));
  for (const char* bad : {"", "a", "1-", "3-1", "1,", ",1", "1;2", "0-5000", " 1"}) {
    auto r = parse_cpu_list(bad);
    BOOST_TEST(!r.has_value(), "accepted '" << bad << "'");
    if (!r) BOOST_TEST(r.error().message().find("0-3,8") != std::string::npos);
  }
}
