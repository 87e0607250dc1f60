// actors/shell_service: what a node tells a shell (the metrics text it
// reuses, the state JSON). The CAF exchange and the client run in
// test/integration/shell_run.sh.
#define BOOST_TEST_MODULE actors_shell_service
#include <boost/test/unit_test.hpp>

#include <string>

#include "actors/metrics.hpp"
#include "actors/shell_service.hpp"
#include "kernels/waits.hpp"

namespace a = hetflow::actors;
namespace m = hetflow::actors::metrics;
namespace w = hetflow::kernels::waits;

BOOST_AUTO_TEST_CASE(parses_what_metrics_renders) {
  m::reset();
  m::set_gauge("hetflow_train_epoch", "epoch", {{"actor", "trainer"}}, 3);
  m::set_gauge("hetflow_odd", "odd labels", {{"actor", "q\"uo\\te"}, {"pass", "line\nbreak"}}, 0.25);
  m::set("hetflow_progress_total", "progress", m::kind::counter, {}, 12);
  auto s = a::parse_metric_samples(m::render({{"cluster", "c"}, {"node", "n0"}}));
  BOOST_REQUIRE_EQUAL(s.size(), 3u);
  bool epoch = false, odd = false, progress = false;
  for (auto& x : s) {
    if (x.name == "hetflow_train_epoch") {
      epoch = x.value == 3 && x.labels.size() == 3 && x.labels[2].first == "actor" && x.labels[2].second == "trainer";
    } else if (x.name == "hetflow_odd") {
      odd = x.value == 0.25 && x.labels.size() == 4 && x.labels[2].second == "q\"uo\\te" &&
            x.labels[3].second == "line\nbreak";
    } else if (x.name == "hetflow_progress_total") {
      progress = x.value == 12 && x.labels.size() == 2;
    }
  }
  BOOST_TEST(epoch);
  BOOST_TEST(odd);
  BOOST_TEST(progress);
  m::reset();
}

BOOST_AUTO_TEST_CASE(skips_lines_that_do_not_parse) {
  auto s = a::parse_metric_samples("# HELP x y\nx{a=\"1\"} 2\nbroken{a=1} 3\nnovalue{a=\"1\"}\ny 4\n\nz NaN\n");
  BOOST_REQUIRE_EQUAL(s.size(), 3u);
  BOOST_TEST(s[0].name == "x");
  BOOST_TEST(s[1].name == "y");
  BOOST_TEST(s[1].value == 4);
  BOOST_TEST(s[2].name == "z");
}

BOOST_AUTO_TEST_CASE(state_holds_this_nodes_actors_gauges_and_waits) {
  m::reset();
  w::reset();
  a::shell_node_snapshot snap;
  snap.cluster = "c";
  snap.job = "train";
  snap.node = "n0";
  snap.nodes = {{"n0", "127.0.0.1", 7100}, {"n1", "127.0.0.1", 7101}};
  snap.actors = {{"trainer", "trainer", "n0"}, {"done", "trainer", "n0"}, {"far", "ps_shard", "n1"}};
  m::set_gauge("hetflow_actor_running", "", {{"actor", "trainer"}, {"type", "trainer"}}, 1);
  m::set_gauge("hetflow_actor_running", "", {{"actor", "done"}, {"type", "trainer"}}, 0);
  m::set_gauge("hetflow_actor_ok", "", {{"actor", "done"}, {"type", "trainer"}}, 1);
  m::set_gauge("hetflow_train_step", "", {{"actor", "trainer"}}, 17);
  m::set_gauge("hetflow_actor_wire_pending_messages", "", {{"actor", "trainer"}}, 3);
  m::set_gauge("hetflow_preprocess_rows", "", {{"actor", "trainer"}, {"pass", "2"}}, 5);
  auto id = w::begin("trainer", "far on node 'n1'", "batch 3");
  const std::string j = a::state_json(snap, m::render({}));
  w::end(id);
  BOOST_TEST_INFO(j);
  // mailbox: the wire messages delivered and not let go (null without any).
  BOOST_TEST(j.find("\"name\":\"trainer\",\"type\":\"trainer\",\"node\":\"n0\",\"state\":\"running\",\"mailbox\":3")
             != std::string::npos);
  BOOST_TEST(j.find("\"name\":\"done\",\"type\":\"trainer\",\"node\":\"n0\",\"state\":\"finished\",\"mailbox\":null")
             != std::string::npos);
  BOOST_TEST(j.find("\"train_step\":17") != std::string::npos);
  BOOST_TEST(j.find("\"preprocess_rows{pass=2}\":5") != std::string::npos);
  BOOST_TEST(j.find("\"name\":\"done\",\"type\":\"trainer\",\"node\":\"n0\",\"state\":\"finished\"") != std::string::npos);
  // Another node's actor is in the placement, not in this node's actors.
  BOOST_TEST(j.find("{\"name\":\"far\",\"type\":\"ps_shard\",\"node\":\"n1\"}") != std::string::npos);
  BOOST_TEST(j.find("\"name\":\"far\",\"type\":\"ps_shard\",\"node\":\"n1\",\"state\"") == std::string::npos);
  BOOST_TEST(j.find("\"actor\":\"trainer\",\"on\":\"far on node 'n1'\",\"what\":\"batch 3\"") != std::string::npos);
  m::reset();
  w::reset();
}
