// What only the fake data plane does: fault injection and its bookkeeping;
// and send_and_wait over it and over stub planes. (The data_plane contract
// itself is in data_plane_contract_test.cpp.)
#define BOOST_TEST_MODULE fake_data_plane
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <set>
#include <stdexcept>
#include <thread>

#include "actors/dataplane/send_and_wait.hpp"
#include "test/dataplane/data_plane_test_util.hpp"

using namespace hetflow;
using namespace hetflow::dataplane;
using namespace hetflow::dataplane::testing;

BOOST_AUTO_TEST_SUITE(fake_data_plane)

BOOST_AUTO_TEST_CASE(jitter_reorders_channels_but_not_a_channel) {
  auto p = make_connected_pair("fake");
  p.fabric->set_delay(std::chrono::microseconds(2000), 7);
  inbox in;
  in.install(*p.b);
  constexpr int n = 100;
  for (int i = 0; i < n; ++i) {
    for (channel_id ch = 0; ch < 3; ++ch) {
      auto msg = std::make_shared<wire_buffer>(sizeof(int) * 2);
      int v[2] = {i, static_cast<int>(ch)};
      std::memcpy(msg->data(), v, sizeof v);
      BOOST_REQUIRE(p.a->send(1, ch, std::move(msg)).ok());
    }
  }
  BOOST_REQUIRE(in.wait_for(3 * n, 10s));
  auto got = in.take();
  int next[3] = {0, 0, 0};
  int cross_channel_inversions = 0;
  int prev_global = -1;
  for (const arrival& a : got) {
    int v[2];
    std::memcpy(v, a.msg.data(), sizeof v);
    BOOST_REQUIRE_EQUAL(static_cast<channel_id>(v[1]), a.channel);
    BOOST_REQUIRE_MESSAGE(v[0] == next[a.channel], "channel " << a.channel << " got " << v[0]);
    ++next[a.channel];
    int global = v[0] * 3 + v[1];
    if (global < prev_global) ++cross_channel_inversions;
    prev_global = global;
  }
  // The jitter really is on: some messages overtook others across channels.
  BOOST_CHECK_GT(cross_channel_inversions, 0);
}

BOOST_AUTO_TEST_CASE(handler_and_completions_run_on_the_planes_own_thread) {
  auto p = make_connected_pair("fake");
  std::mutex m;
  std::set<std::thread::id> b_threads;
  p.b->set_receive_handler([&](peer_id, channel_id, wire_buffer) {
    std::lock_guard<std::mutex> lock(m);
    b_threads.insert(std::this_thread::get_id());
  });
  inbox in_a;
  in_a.install(*p.a);
  completions done;
  BOOST_REQUIRE(p.a->send(1, 1, make_payload(8, 1)).ok());
  BOOST_REQUIRE(p.b->send(0, 1, make_payload(8, 1), [&](status s) {
    std::lock_guard<std::mutex> lock(m);
    b_threads.insert(std::this_thread::get_id());
    done.make()(std::move(s));
  }).ok());
  BOOST_REQUIRE(done.wait_for(1, 5s));
  BOOST_REQUIRE(in_a.wait_for(1, 5s));
  std::this_thread::sleep_for(20ms);
  std::lock_guard<std::mutex> lock(m);
  BOOST_REQUIRE_EQUAL(b_threads.size(), 1u);
  BOOST_CHECK(*b_threads.begin() != std::this_thread::get_id());
}

BOOST_AUTO_TEST_CASE(dropped_peer_fails_queued_and_later_sends) {
  auto p = make_connected_pair("fake");
  // A long delay keeps messages queued at the receiver.
  p.fabric->set_delay(std::chrono::microseconds(300000), 1);
  inbox in, in_a;
  in.install(*p.b);
  in_a.install(*p.a);
  completions done;
  for (int i = 0; i < 5; ++i) BOOST_REQUIRE(p.a->send(1, 1, make_payload(64, i), done.make()).ok());
  completions b_done;
  p.fabric->set_delay(std::chrono::microseconds(300000), 2);
  BOOST_REQUIRE(p.b->send(0, 1, make_payload(64, 9), b_done.make()).ok());
  p.fabric->drop_peer(1);
  BOOST_REQUIRE(done.wait_for(5, 2s));
  for (const status& s : done.results()) {
    BOOST_CHECK_EQUAL(s.code(), errc::peer_down);
    BOOST_CHECK_MESSAGE(s.message().find("peer 1") != std::string::npos, s.message());
  }
  BOOST_REQUIRE(b_done.wait_for(1, 2s));
  BOOST_CHECK_EQUAL(b_done.results()[0].code(), errc::peer_down);
  BOOST_CHECK_EQUAL(p.a->send(1, 1, make_payload(8, 1)).code(), errc::peer_down);
  BOOST_CHECK_EQUAL(p.b->send(0, 1, make_payload(8, 1)).code(), errc::peer_down);
  BOOST_CHECK(p.fabric->is_dropped(1));
  std::this_thread::sleep_for(400ms);
  BOOST_CHECK_EQUAL(in.size(), 0u);  // nothing reached the dead node
}

BOOST_AUTO_TEST_CASE(peer_ids_are_unique_while_live_and_reusable_after_shutdown) {
  auto fabric = fake_fabric::create();
  auto a = make_fake_data_plane(fabric, 3);
  BOOST_CHECK_THROW(make_fake_data_plane(fabric, 3), std::invalid_argument);
  a->shutdown();
  auto again = make_fake_data_plane(fabric, 3);
  BOOST_CHECK_EQUAL(again->local_address().size(), 4u);
  BOOST_CHECK_THROW(make_fake_data_plane(fabric, 0xffff), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(max_message_bytes_is_per_peer) {
  fake_fabric_options o;
  o.max_message_bytes = 1000;
  auto fabric = fake_fabric::create(o);
  fabric->set_max_message_bytes(1, 10);
  auto a = make_fake_data_plane(fabric, 0);
  auto b = make_fake_data_plane(fabric, 1);
  BOOST_CHECK_EQUAL(a->max_message_bytes(), 1000u);
  BOOST_CHECK_EQUAL(b->max_message_bytes(), 10u);
  BOOST_REQUIRE(a->connect(1, b->local_address()).ok());
  BOOST_REQUIRE(b->connect(0, a->local_address()).ok());
  inbox in_a;
  in_a.install(*a);
  BOOST_CHECK_EQUAL(a->send(1, 1, make_payload(11, 1)).code(), errc::wire_too_large);
  BOOST_CHECK(b->send(0, 1, make_payload(11, 1)).ok());
  BOOST_CHECK(in_a.wait_for(1, 5s));
}


// send_and_wait (node_services::send_wire's linger) over planes that complete
// at once, on their own thread, never, or refuse the send.
namespace {
struct stub_plane final : data_plane {
  enum class mode { at_once, never, refuse } how = mode::never;
  send_completion kept;  // mode never: held, not run
  std::string name() const override { return "stub"; }
  std::vector<char> local_address() const override { return {}; }
  status connect(peer_id, std::span<const char>) override { return {}; }
  void set_receive_handler(receive_handler) override {}
  status send(peer_id, channel_id, wire_buffer_ref, send_completion done) override {
    if (how == mode::refuse) return make_error(errc::not_found, "no such peer");
    if (how == mode::at_once) done(status{});
    else kept = std::move(done);
    return {};
  }
  uint64_t max_message_bytes() const override { return 1 << 20; }
  data_plane_stats stats() const override { return {}; }
  void shutdown() override {}
};
}  // namespace

BOOST_AUTO_TEST_CASE(send_and_wait_returns_with_the_completion_or_after_the_linger) {
  using clock = std::chrono::steady_clock;
  auto timed = [](auto&& f) {
    auto t0 = clock::now();
    f();
    return clock::now() - t0;
  };
  int ran = 0;
  auto count = [&ran](status) { ++ran; };
  // Completed inside send(): no wait at all.
  stub_plane s;
  s.how = stub_plane::mode::at_once;
  auto d = timed([&] { BOOST_CHECK(send_and_wait(s, 1, 1, make_payload(8, 1), count, 2s).ok()); });
  BOOST_CHECK_EQUAL(ran, 1);
  BOOST_CHECK(d < 1s);
  // Never completed: back after the linger, and the completion still works later.
  s.how = stub_plane::mode::never;
  d = timed([&] { BOOST_CHECK(send_and_wait(s, 1, 1, make_payload(8, 1), count, 50ms).ok()); });
  BOOST_CHECK(d >= 50ms);
  BOOST_CHECK(d < 2s);
  BOOST_REQUIRE(s.kept);
  s.kept(status{});
  BOOST_CHECK_EQUAL(ran, 2);
  // Refused: the error at once, no completion.
  s.how = stub_plane::mode::refuse;
  d = timed([&] { BOOST_CHECK_EQUAL(send_and_wait(s, 1, 1, make_payload(8, 1), count, 2s).code(), errc::not_found); });
  BOOST_CHECK_EQUAL(ran, 2);
  BOOST_CHECK(d < 1s);
  // The fake plane completes on its own thread once delivered (here after a
  // delay of up to 30 ms): the call returns when it has, well before a 5 s
  // linger; with no linger it returns at once.
  auto p = make_connected_pair("fake");
  inbox in;
  in.install(*p.b);
  p.fabric->set_delay(std::chrono::microseconds(30000), 3);
  std::atomic<int> fake_done{0};
  d = timed([&] {
    BOOST_CHECK(send_and_wait(*p.a, 1, 1, make_payload(64, 2), [&](status st) { fake_done += st.ok(); }, 5s).ok());
  });
  BOOST_CHECK_EQUAL(fake_done.load(), 1);
  BOOST_CHECK(d < 2s);
  BOOST_CHECK(send_and_wait(*p.a, 1, 1, make_payload(64, 3), {}, std::chrono::microseconds{0}).ok());
  BOOST_CHECK(in.wait_for(2, 5s));
}

BOOST_AUTO_TEST_SUITE_END()
