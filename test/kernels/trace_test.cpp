// The trace recorder (kernels/trace.hpp): spans, tracks, threads, the
// bound, the JSON document and the merge of node files.
#define BOOST_TEST_MODULE kernels_trace
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <vector>

#include "kernels/trace.hpp"

using namespace hetflow;
namespace trace = hetflow::kernels::trace;
using nlohmann::json;

namespace {

// Every test starts from a stopped, empty recorder and leaves one.
struct fresh {
  fresh() { trace::reset(); }
  ~fresh() { trace::reset(); }
};

json parse(const std::string& text) {
  json j;
  BOOST_REQUIRE_NO_THROW(j = json::parse(text));
  BOOST_REQUIRE(j.is_object());
  BOOST_REQUIRE(j.contains("traceEvents"));
  BOOST_REQUIRE(j["traceEvents"].is_array());
  return j;
}

std::vector<json> events_of(const json& doc, const std::string& ph) {
  std::vector<json> out;
  for (const auto& e : doc["traceEvents"])
    if (e.value("ph", "") == ph) out.push_back(e);
  return out;
}

// tid -> thread_name of one document.
std::map<int, std::string> thread_names(const json& doc) {
  std::map<int, std::string> out;
  for (const auto& e : events_of(doc, "M"))
    if (e["name"] == "thread_name") out[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
  return out;
}

std::filesystem::path scratch(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("hetflow-trace-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(d);
  return d / name;
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(trace_recorder, fresh)

BOOST_AUTO_TEST_CASE(disabled_records_nothing) {
  BOOST_TEST(!trace::enabled());
  BOOST_TEST(trace::track("a") == 0u);
  {
    trace::scope s("nothing", 0);
  }
  trace::complete(0, "nothing either", 1, 2);
  auto c = trace::current_counts();
  BOOST_TEST(c.events == 0u);
  BOOST_TEST(c.dropped == 0u);
  // Starting later does not bring back what happened while off.
  trace::start("n0", 0);
  auto doc = parse(trace::to_json());
  BOOST_TEST(events_of(doc, "X").empty());
}

BOOST_AUTO_TEST_CASE(spans_nest_and_carry_metadata) {
  trace::start("n3", 3);
  const auto tk = trace::track("trainer");
  BOOST_TEST(tk != 0u);
  BOOST_TEST(trace::track("trainer") == tk);  // same name, same track
  const auto other = trace::track("ring0");
  BOOST_TEST(other != tk);
  {
    trace::scope outer("train step", tk, "step", 1);
    {
      trace::scope inner("forward", tk);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    trace::scope inner2("optimizer", tk);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  {
    trace::track_scope on(other);
    BOOST_TEST(trace::current_track() == other);
    trace::scope s("allreduce");  // the thread's current track
  }
  BOOST_TEST(trace::current_track() == 0u);

  auto doc = parse(trace::to_json("ok"));
  BOOST_TEST(doc["displayTimeUnit"] == "ms");
  BOOST_TEST(doc["otherData"]["status"] == "ok");
  BOOST_TEST(doc["otherData"]["node"] == "n3");
  // process_name and thread_name metadata for the node and each track.
  bool process_named = false;
  for (const auto& e : events_of(doc, "M"))
    if (e["name"] == "process_name") {
      process_named = true;
      BOOST_TEST(e["pid"] == 3);
      BOOST_TEST(e["args"]["name"] == "node n3");
    }
  BOOST_TEST(process_named);
  auto names = thread_names(doc);
  BOOST_TEST(names[int(tk)] == "trainer");
  BOOST_TEST(names[int(other)] == "ring0");

  auto xs = events_of(doc, "X");
  BOOST_REQUIRE_EQUAL(xs.size(), 4u);
  std::map<std::string, json> by_name;
  for (auto& e : xs) {
    BOOST_TEST(e["pid"] == 3);
    BOOST_TEST(e["dur"].get<int64_t>() >= 0);
    by_name[e["name"].get<std::string>()] = e;
  }
  const auto& step = by_name["train step"];
  BOOST_TEST(step["args"]["step"] == 1);
  BOOST_TEST(step["tid"] == int(tk));
  BOOST_TEST(by_name["allreduce"]["tid"] == int(other));
  // The children lie inside the parent, the parent comes first.
  for (const char* child : {"forward", "optimizer"}) {
    const auto& c = by_name[child];
    BOOST_TEST(c["tid"] == int(tk));
    BOOST_TEST(c["ts"].get<int64_t>() >= step["ts"].get<int64_t>());
    BOOST_TEST(c["ts"].get<int64_t>() + c["dur"].get<int64_t>() <=
               step["ts"].get<int64_t>() + step["dur"].get<int64_t>());
  }
  BOOST_TEST(by_name["forward"]["dur"].get<int64_t>() >= 2000);
  BOOST_TEST(xs[0]["name"] == "train step");  // sorted by start: enclosing span first
  // Timestamps are CLOCK_REALTIME microseconds: close to now.
  BOOST_TEST(std::abs(step["ts"].get<int64_t>() - trace::now_us()) < int64_t{60'000'000});
}

BOOST_AUTO_TEST_CASE(scope_end_is_once) {
  trace::start("n0", 0);
  const auto tk = trace::track("a");
  {
    trace::scope s("x", tk);
    s.end();
    s.end();
  }  // and not again here
  BOOST_TEST(trace::current_counts().events == 1u);
}

BOOST_AUTO_TEST_CASE(events_from_many_threads) {
  trace::start("n0", 0);
  constexpr int threads = 8, per_thread = 5000;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([t] {
      const auto tk = trace::track("actor" + std::to_string(t));
      for (int i = 0; i < per_thread; ++i) {
        trace::scope s("work", tk, "i", i);
      }
    });
  for (auto& t : ts) t.join();
  auto c = trace::current_counts();
  BOOST_TEST(c.events == std::size_t(threads * per_thread));
  BOOST_TEST(c.dropped == 0u);
  BOOST_TEST(c.tracks == std::size_t(threads));
  auto doc = parse(trace::to_json());
  auto names = thread_names(doc);
  std::map<int, std::vector<int64_t>> ts_by_tid;
  std::map<int, std::set<int64_t>> args_by_tid;
  for (auto& e : events_of(doc, "X")) {
    ts_by_tid[e["tid"].get<int>()].push_back(e["ts"].get<int64_t>());
    args_by_tid[e["tid"].get<int>()].insert(e["args"]["i"].get<int64_t>());
  }
  BOOST_TEST(ts_by_tid.size() == std::size_t(threads));
  for (auto& [tid, v] : ts_by_tid) {
    BOOST_TEST(v.size() == std::size_t(per_thread));
    BOOST_TEST(std::is_sorted(v.begin(), v.end()));  // monotone per track
    BOOST_TEST(args_by_tid[tid].size() == std::size_t(per_thread));  // every event once
    BOOST_TEST(names[tid].rfind("actor", 0) == 0u);
  }
}

BOOST_AUTO_TEST_CASE(the_bound_drops_and_counts) {
  trace::start("n0", 0, 100);
  const auto tk = trace::track("busy");
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([tk] {
      for (int i = 0; i < 1000; ++i) trace::complete(tk, "e", trace::now_us(), 1);
    });
  for (auto& t : ts) t.join();
  auto c = trace::current_counts();
  BOOST_TEST(c.events == 100u);
  BOOST_TEST(c.dropped == 3900u);
  auto doc = parse(trace::to_json());
  BOOST_TEST(events_of(doc, "X").size() == 100u);
  BOOST_TEST(doc["otherData"]["dropped_events"] == 3900);
  BOOST_TEST(doc["otherData"]["max_events"] == 100);
  // The drop is visible in the viewer too: one instant event says so.
  auto is = events_of(doc, "i");
  BOOST_REQUIRE_EQUAL(is.size(), 1u);
  BOOST_TEST(is[0]["name"].get<std::string>().find("3900 events dropped") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(names_are_escaped) {
  trace::start("node \"q\"\\", 1);
  const auto tk = trace::track("a\"b\n");
  trace::complete(tk, "quote\" and \\ backslash", trace::now_us(), 5, "k\"", 7);
  auto doc = parse(trace::to_json("it \"failed\""));
  auto xs = events_of(doc, "X");
  BOOST_REQUIRE_EQUAL(xs.size(), 1u);
  BOOST_TEST(xs[0]["name"] == "quote\" and \\ backslash");
  BOOST_TEST(xs[0]["args"]["k\""] == 7);
  BOOST_TEST(thread_names(doc)[int(tk)] == "a\"b\n");
  BOOST_TEST(doc["otherData"]["status"] == "it \"failed\"");
}

BOOST_AUTO_TEST_CASE(max_events_from_the_environment) {
  unsetenv("HETFLOW_TRACE_MAX_EVENTS");
  auto d = trace::max_events_from_env();
  BOOST_REQUIRE(d.has_value());
  BOOST_TEST(*d == trace::default_max_events);
  setenv("HETFLOW_TRACE_MAX_EVENTS", "5000", 1);
  auto v = trace::max_events_from_env();
  BOOST_REQUIRE(v.has_value());
  BOOST_TEST(*v == 5000u);
  for (const char* bad : {"0", "-3", "12x", "lots"}) {
    setenv("HETFLOW_TRACE_MAX_EVENTS", bad, 1);
    auto b = trace::max_events_from_env();
    BOOST_TEST(!b.has_value(), bad);
    if (!b.has_value()) BOOST_TEST(b.error().message().find(bad) != std::string::npos);
  }
  unsetenv("HETFLOW_TRACE_MAX_EVENTS");
}

BOOST_AUTO_TEST_CASE(files_written_and_merged) {
  // Two "nodes": record, write, reset, record again.
  const auto a = scratch("n0.trace.json"), b = scratch("n1.trace.json"), out = scratch("all.json");
  trace::start("n0", 0);
  trace::complete(trace::track("replica0"), "allreduce", trace::now_us(), 10);
  auto wa = trace::write_file(a, "ok");
  BOOST_REQUIRE_MESSAGE(wa.has_value(), wa.error().to_string());
  BOOST_TEST(wa->events == 1u);
  trace::reset();
  trace::start("n1", 1, 1);
  const auto tk = trace::track("replica1");
  trace::complete(tk, "allreduce", trace::now_us(), 10);
  trace::complete(tk, "dropped", trace::now_us(), 10);
  BOOST_REQUIRE(trace::write_file(b, "ok").has_value());
  {
    std::ifstream in(a);
    std::stringstream ss;
    ss << in.rdbuf();
    parse(ss.str());  // each node file is a document of its own
  }
  auto m = trace::merge_files({a, b, scratch("missing.json")}, out, "failed (exit 1)");
  BOOST_REQUIRE_MESSAGE(m.has_value(), m.error().to_string());
  BOOST_TEST(m->files == 2u);
  BOOST_TEST(m->dropped == 1u);
  BOOST_REQUIRE_EQUAL(m->skipped.size(), 1u);
  BOOST_TEST(m->skipped[0].find("missing.json") != std::string::npos);
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  auto doc = parse(ss.str());
  std::set<int> pids;
  for (auto& e : events_of(doc, "X")) {
    pids.insert(e["pid"].get<int>());
    BOOST_TEST(e["name"] == "allreduce");
  }
  BOOST_TEST((pids == std::set<int>{0, 1}));
  std::set<std::string> processes;
  for (auto& e : events_of(doc, "M"))
    if (e["name"] == "process_name") processes.insert(e["args"]["name"].get<std::string>());
  BOOST_TEST((processes == std::set<std::string>{"node n0", "node n1"}));
  BOOST_TEST(doc["otherData"]["status"] == "failed (exit 1)");
  BOOST_TEST(doc["otherData"]["nodes"].size() == 2u);
  std::filesystem::remove_all(out.parent_path());
}

BOOST_AUTO_TEST_CASE(output_paths_checked) {
  BOOST_TEST(!trace::check_output_path("").empty());
  BOOST_TEST(!trace::check_output_path("/nonexistent-dir-hetflow/x.json").empty());
  BOOST_TEST(!trace::check_output_path(std::filesystem::temp_directory_path()).empty());  // a directory
  BOOST_TEST(trace::check_output_path(std::filesystem::temp_directory_path() / "t.json").empty());
}

BOOST_AUTO_TEST_CASE(flow_ends_share_an_id_and_bind_to_their_slices) {
  trace::start("n0", 0);
  const auto a = trace::track("sender");
  const auto b = trace::track("receiver");
  const int64_t t0 = trace::now_us();
  trace::complete(a, "wire out to receiver", t0, 1);
  trace::flow(a, "wire", t0, 0xabcdef0123456789ull, true);
  trace::complete(b, "wire in (same node)", t0 + 5, 1);
  trace::flow(b, "wire", t0 + 5, 0xabcdef0123456789ull, false);
  auto doc = parse(trace::to_json("ok"));
  auto starts = events_of(doc, "s");
  auto ends = events_of(doc, "f");
  BOOST_REQUIRE_EQUAL(starts.size(), 1u);
  BOOST_REQUIRE_EQUAL(ends.size(), 1u);
  BOOST_TEST(starts[0]["id"] == "0xabcdef0123456789");
  BOOST_TEST(ends[0]["id"] == starts[0]["id"]);
  BOOST_TEST(starts[0]["tid"] == int(a));
  BOOST_TEST(ends[0]["tid"] == int(b));
  BOOST_TEST(ends[0]["bp"] == "e");  // bound to the enclosing slice
  BOOST_TEST(starts[0]["ts"].get<int64_t>() == t0);
  BOOST_TEST(ends[0]["cat"] == starts[0]["cat"]);
  BOOST_TEST(events_of(doc, "X").size() == 2u);  // the slices stay slices
}

BOOST_AUTO_TEST_SUITE_END()
