#define BOOST_TEST_MODULE actors_registry
#include <boost/test/unit_test.hpp>

#include <caf/all.hpp>

#include "actors/json.hpp"
#include "actors/registry.hpp"
#include "topology/parser.hpp"

using namespace hetflow;
using namespace hetflow::actors;

namespace {

topology::cluster parse(const std::string& text, const registry& reg) {
  auto r = topology::parse_topology(text, "test.toml", reg.catalog());
  for (auto& d : r.errors) BOOST_TEST_MESSAGE(topology::format(d));
  BOOST_REQUIRE(r.ok());
  return *r.model;
}

const char* three_nodes = R"(
[cluster]
name = "t"
[[nodes]]
name = "a"
host = "127.0.0.1"
port = 7000
[[nodes]]
name = "b"
host = "127.0.0.1"
port = 7001
[[nodes]]
name = "c"
host = "127.0.0.1"
port = 7002
[job]
kind = "skeleton"
tensors = 3
)";

}  // namespace

BOOST_AUTO_TEST_CASE(builtin_types_are_in_the_catalog) {
  registry reg;
  add_builtin_types(reg);
  auto cat = reg.catalog();
  BOOST_TEST(cat.find_job_kind("skeleton") != nullptr);
  BOOST_TEST(cat.find_job_kind("transport_bench") != nullptr);
  for (const char* t : {"producer", "transformer", "checker", "bench_sender", "bench_receiver"})
    BOOST_TEST(cat.find_actor_type(t) != nullptr, t);
}

BOOST_AUTO_TEST_CASE(duplicate_names_are_refused) {
  registry reg;
  add_builtin_types(reg);
  auto st = reg.add_actor_type({"producer", "again", {}},
                               [](caf::actor_system&, const actor_env&) { return caf::actor{}; });
  BOOST_TEST(!st.ok());
  BOOST_TEST((st.code() == errc::already_exists));
  BOOST_TEST(st.message().find("producer") != std::string::npos);
  auto st2 = reg.add_job_kind({"skeleton", "again", {}}, {});
  BOOST_TEST((st2.code() == errc::already_exists));
  auto st3 = reg.add_actor_type({"", "no name", {}},
                                [](caf::actor_system&, const actor_env&) { return caf::actor{}; });
  BOOST_TEST((st3.code() == errc::invalid_argument));
}

BOOST_AUTO_TEST_CASE(skeleton_expands_onto_three_nodes) {
  registry reg;
  add_builtin_types(reg);
  auto c = parse(three_nodes, reg);
  auto actors = job_actors(c, reg);
  BOOST_REQUIRE(actors.has_value());
  BOOST_REQUIRE_EQUAL(actors->size(), 3u);
  BOOST_TEST((*actors)[0].node == "a");
  BOOST_TEST((*actors)[1].node == "b");
  BOOST_TEST((*actors)[2].node == "c");
  BOOST_TEST(c.job.params.get_int("tensors") == 3);
  BOOST_TEST(c.job.params.get_int("tensor_bytes") == (1 << 20));  // default filled in
}

BOOST_AUTO_TEST_CASE(explicit_actors_replace_the_expansion) {
  registry reg;
  add_builtin_types(reg);
  std::string text = std::string(three_nodes) + R"(
[[actors]]
name = "p"
type = "producer"
node = "c"
args = { to = "t2", checker = "k" }
[[actors]]
name = "t2"
type = "transformer"
node = "c"
args = { to = "k" }
[[actors]]
name = "k"
type = "checker"
node = "a"
args = { producer = "p" }
)";
  auto c = parse(text, reg);
  auto actors = job_actors(c, reg);
  BOOST_REQUIRE(actors.has_value());
  BOOST_REQUIRE_EQUAL(actors->size(), 3u);
  BOOST_TEST((*actors)[0].name == "p");
  BOOST_TEST((*actors)[0].args.get_string("to") == "t2");
}

BOOST_AUTO_TEST_CASE(transport_bench_needs_two_nodes) {
  registry reg;
  add_builtin_types(reg);
  auto c = parse(R"(
[cluster]
name = "t"
[[nodes]]
name = "a"
host = "127.0.0.1"
port = 7000
[job]
kind = "transport_bench"
)",
                 reg);
  auto actors = job_actors(c, reg);
  BOOST_TEST(!actors.has_value());
  BOOST_TEST(actors.error().message().find("2 nodes") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(json_writer_escapes_and_nests) {
  json_writer w;
  w.begin_object().field("a", "x\"y\n").key("b").begin_array().value(int64_t{1}).value(2.5);
  w.value(true).null().end_array().field("c", uint64_t{7}).key("d").raw("{\"e\":1}").end_object();
  BOOST_TEST(w.str() == R"({"a":"x\"y\n","b":[1,2.5,true,null],"c":7,"d":{"e":1}})");
  json_writer nan;
  nan.begin_array().value(0.0 / 0.0).end_array();
  BOOST_TEST(nan.str() == "[null]");
}

#include "actors/buffer_pool.hpp"

BOOST_AUTO_TEST_CASE(buffer_pool_reuses_large_buffers_within_its_bound) {
  auto pool = buffer_pool::create(1 << 20, 8 << 20);
  const std::byte* first = nullptr;
  {
    wire_buffer a = pool->allocate(4 << 20);
    BOOST_TEST(a.size() == std::size_t{4 << 20});
    BOOST_TEST(reinterpret_cast<uintptr_t>(a.data()) % wire_buffer::alignment == 0u);
    first = a.data();
  }  // back to the pool
  BOOST_TEST(pool->cached_bytes() == std::size_t{4 << 20});
  {
    wire_buffer b = pool->allocate((4 << 20) - 100);  // within 2x: reused
    BOOST_TEST(b.data() == first);
    BOOST_TEST(b.size() == std::size_t{(4 << 20) - 100});
    BOOST_TEST(pool->hits() == 1u);
    wire_buffer c = pool->allocate(100);  // small: not pooled
    BOOST_TEST(c.size() == 100u);
  }
  BOOST_TEST(pool->cached_bytes() == std::size_t{4 << 20});
  {
    // Three 4 MiB buffers die; only 8 MiB may wait for reuse.
    std::vector<wire_buffer> v;
    for (int i = 0; i < 3; ++i) v.push_back(pool->allocate(4 << 20));
  }
  BOOST_TEST(pool->cached_bytes() == std::size_t{8 << 20});
  // A buffer may outlive the pool's last outside owner.
  wire_buffer late = pool->allocate(2 << 20);
  pool.reset();
  BOOST_TEST(late.size() == std::size_t{2 << 20});
}

BOOST_AUTO_TEST_CASE(buffer_pool_hands_out_the_buffer_recycled_last) {
  auto pool = buffer_pool::create(1 << 20, 64 << 20);
  const std::byte* second = nullptr;
  {
    wire_buffer a = pool->allocate(4 << 20);
    wire_buffer b = pool->allocate(4 << 20);
    second = b.data();
    a = wire_buffer();  // recycled first
  }                     // b recycled last
  BOOST_REQUIRE_EQUAL(pool->cached_bytes(), std::size_t{8 << 20});
  wire_buffer c = pool->allocate(4 << 20);
  BOOST_TEST(c.data() == second);
}
