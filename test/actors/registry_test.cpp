#define BOOST_TEST_MODULE actors_registry
#include <boost/test/unit_test.hpp>

#include <caf/all.hpp>

#include <set>

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

// A transform: its keys become the table [job] NAME of every job kind with a
// "transforms" key; make_transforms builds them in [job] transforms order.
BOOST_AUTO_TEST_CASE(transforms_register_their_keys_and_are_made_in_order) {
  registry reg;
  topology::type_spec job{"imgjob", "a job kind that takes transforms", {}};
  job.keys.push_back(topology::key_spec{"transforms", topology::key_type::string_list, false,
                                        std::vector<std::string>{}, "transforms", {}, {}, {}});
  job.keys.push_back(topology::key_spec{"seed", topology::key_type::integer, false, int64_t{1}, "seed", {}, {}, {}});
  BOOST_REQUIRE(reg.add_job_kind(job, [](const topology::cluster&) {
    return expected<std::vector<topology::actor_spec>>(std::vector<topology::actor_spec>{});
  }).ok());
  auto entry = [](std::string name, float add) {
    transform_entry e;
    e.name = std::move(name);
    e.help = "adds k";
    e.keys.push_back(topology::key_spec{"k", topology::key_type::number, false, double(add), "k", {}, {}, {}});
    e.make = [n = e.name, add](const topology::settings& s) -> expected<sample_transform> {
      const float k = float(s.get_number(n + ".k", add));
      if (k < 0) return make_error(errc::invalid_argument, "k must be >= 0");
      return sample_transform([k](std::span<float> x, const sample_context& c) {
        for (float& v : x) v = v * 10.0f + k + float(c.sample);
      });
    };
    return e;
  };
  BOOST_REQUIRE(reg.add_transform(entry("plus", 1.0f)).ok());
  BOOST_REQUIRE(reg.add_transform(entry("other", 2.0f)).ok());
  BOOST_TEST((reg.add_transform(entry("plus", 1.0f)).code() == errc::already_exists));
  auto clash = reg.add_transform(entry("seed", 1.0f));
  BOOST_TEST((clash.code() == errc::already_exists));
  BOOST_TEST(clash.message().find("[job] key of job kind 'imgjob'") != std::string::npos, clash.message());
  BOOST_TEST((reg.add_transform(entry("bad name", 1.0f)).code() == errc::invalid_argument));
  const auto cat = reg.catalog();  // (catalog() returns a copy: keep it while spec points into it)
  const auto* spec = cat.find_job_kind("imgjob");
  BOOST_REQUIRE(spec != nullptr);
  int tables = 0;
  for (const auto& k : spec->keys)
    if (k.type == topology::key_type::table && (k.name == "plus" || k.name == "other")) ++tables;
  BOOST_TEST(tables == 2);

  const std::string head = "[cluster]\nname = \"t\"\n[[nodes]]\nname = \"a\"\nhost = \"127.0.0.1\"\nport = 7000\n"
                           "[job]\nkind = \"imgjob\"\n";
  auto c = parse(head + "transforms = [\"other\", \"plus\"]\nplus = { k = 3.0 }\n", reg);
  auto made = reg.make_transforms(c.job.params);
  BOOST_REQUIRE(made.has_value());
  BOOST_REQUIRE(made->size() == 2u);
  std::vector<float> x{1.0f};
  sample_context ctx;
  ctx.sample = 5;
  for (auto& t : *made) t(x, ctx);
  BOOST_TEST(x[0] == (1.0f * 10 + 2 + 5) * 10 + 3 + 5);  // other (k 2) first, then plus (k 3)

  auto unknown = reg.make_transforms(parse(head + "transforms = [\"plsu\"]\n", reg).job.params);
  BOOST_REQUIRE(!unknown.has_value());
  BOOST_TEST(unknown.error().message().find("unknown transform 'plsu' (registered: plus, other") != std::string::npos,
             unknown.error().message());
  auto refused = reg.make_transforms(parse(head + "transforms = [\"plus\"]\nplus = { k = -1.0 }\n", reg).job.params);
  BOOST_REQUIRE(!refused.has_value());
  BOOST_TEST(refused.error().message() == "[job] transforms: 'plus': k must be >= 0", refused.error().message());
}

// dp failover: a node is expendable when it holds only replicas and ring
// members, and not replica 0 (which writes the weights and checkpoints).
BOOST_AUTO_TEST_CASE(dp_nodes_but_replica0s_are_expendable) {
  registry reg;
  add_builtin_types(reg);
  const std::string nodes = "[cluster]\nname = \"t\"\n"
                            "[[nodes]]\nname = \"a\"\nhost = \"127.0.0.1\"\nport = 7000\n"
                            "[[nodes]]\nname = \"b\"\nhost = \"127.0.0.1\"\nport = 7001\n"
                            "[[nodes]]\nname = \"c\"\nhost = \"127.0.0.1\"\nport = 7002\n"
                            "[job]\nkind = \"train\"\nstrategy = \"dp\"\n";
  auto expendable = [&](const std::string& extra) {
    auto c = parse(nodes + extra, reg);
    auto all = job_actors(c, reg);
    BOOST_REQUIRE(all.has_value());
    return expendable_nodes(c, *all);
  };
  BOOST_TEST((expendable("") == std::set<int>{1, 2}));
  BOOST_TEST(expendable("dp_failover = false\n").empty());
  // Replica 0 on b: b stays essential; a is the head anyway.
  BOOST_TEST((expendable("dp_nodes = [\"b\", \"c\"]\n") == std::set<int>{2}));
  // The replicas and ring members fail over (and keep snapshots) only when
  // some node may be lost: not when every replica is on the head node.
  auto failover_args = [&](const std::string& extra) {
    auto all = job_actors(parse(nodes + extra, reg), reg);
    BOOST_REQUIRE(all.has_value());
    std::set<bool> seen;
    for (const auto& a : *all) seen.insert(a.args.get_bool("failover", false));
    return seen;
  };
  BOOST_TEST((failover_args("") == std::set<bool>{true}));
  BOOST_TEST((failover_args("dp_failover = false\n") == std::set<bool>{false}));
  BOOST_TEST((failover_args("dp_nodes = [\"a\"]\n") == std::set<bool>{false}));
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
