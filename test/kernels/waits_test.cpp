// kernels/waits: the open waits and the progress counter the watchdog reads.
#define BOOST_TEST_MODULE kernels_waits
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <optional>
#include <thread>

#include "kernels/trace.hpp"
#include "kernels/waits.hpp"

namespace w = hetflow::kernels::waits;

BOOST_AUTO_TEST_CASE(open_waits_longest_first_and_closed_by_scope) {
  w::reset();
  BOOST_TEST(w::snapshot().empty());
  BOOST_TEST(w::describe({}) == "no actor is waiting on another (a long computation, or a stuck one)");
  const w::id first = w::begin("trainer", "stream_shard_1 on node 'n1'", "a batch");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  {
    w::scope s("psworker0", "the ps shards", "the weights of clock 3");
    auto open = w::snapshot();
    BOOST_REQUIRE_EQUAL(open.size(), 2u);
    BOOST_TEST(open[0].actor == "trainer");  // open longer
    BOOST_TEST(open[0].seconds >= 0.02);
    BOOST_TEST(open[1].actor == "psworker0");
    const std::string d = w::describe(open);
    BOOST_TEST(d.rfind("trainer waits on stream_shard_1 on node 'n1' for a batch (0.", 0) == 0, d);
    BOOST_TEST(d.find("; psworker0 waits on the ps shards for the weights of clock 3 (0.0 s)") != std::string::npos, d);
  }
  BOOST_REQUIRE_EQUAL(w::snapshot().size(), 1u);
  w::end(first);
  w::end(first);  // twice: nothing
  w::end(0);
  BOOST_TEST(w::snapshot().empty());
  std::optional<w::scope> held;
  held.emplace("a", "b", "c");
  BOOST_TEST(w::snapshot().size() == 1u);
  held.reset();
  BOOST_TEST(w::snapshot().empty());
}

BOOST_AUTO_TEST_CASE(progress_counts_from_any_thread_and_actor_scope_nests) {
  w::reset();
  std::thread t([] {
    for (int i = 0; i < 1000; ++i) w::progress();
  });
  for (int i = 0; i < 1000; ++i) w::progress();
  t.join();
  BOOST_TEST(w::progress_count() == 2000u);
  BOOST_TEST(w::current_actor().empty());
  {
    w::actor_scope a("replica0");
    BOOST_TEST(w::current_actor() == "replica0");
    {
      w::actor_scope b("inner");
      BOOST_TEST(w::current_actor() == "inner");
      std::thread other([] { BOOST_TEST(w::current_actor().empty()); });  // per thread
      other.join();
    }
    BOOST_TEST(w::current_actor() == "replica0");
  }
  BOOST_TEST(w::current_actor().empty());
}

BOOST_AUTO_TEST_CASE(a_scope_with_a_span_is_also_the_waits_trace_event) {
  namespace trace = hetflow::kernels::trace;
  w::reset();
  trace::reset();
  trace::start("n0", 0);
  const auto tk = trace::track("trainer");
  {
    w::scope traced("trainer", "stream_shard_0", "a batch", w::span{tk, "wait: test batch", "shard", 3});
    w::scope plain("trainer", "the ring", "an all-reduce");  // no span: no event
    BOOST_TEST(w::snapshot().size() == 2u);
    traced.end();  // ends both the wait and the span
    BOOST_TEST(w::snapshot().size() == 1u);
  }
  const std::string doc = trace::to_json();
  auto count = [&](const std::string& needle) {
    std::size_t n = 0;
    for (auto at = doc.find(needle); at != std::string::npos; at = doc.find(needle, at + 1)) ++n;
    return n;
  };
  BOOST_TEST(count("\"wait: test batch\"") == 1u, doc);  // once, although end() ran twice
  BOOST_TEST(count("\"shard\":3") == 1u, doc);
  BOOST_TEST(trace::current_counts().events == 1u, doc);  // the plain scope recorded nothing
  BOOST_TEST(w::snapshot().empty());
  trace::reset();
}
