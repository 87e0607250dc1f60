// Contract every data_plane implementation must meet (data_plane.hpp), run
// against: fake, ucx over "sm,self", ucx over "tcp,self". Two planes live in
// this one process as peers 0 and 1.
#define BOOST_TEST_MODULE data_plane_contract
#include <boost/test/data/monomorphic.hpp>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <atomic>
#include <future>
#include <thread>

#include "test/dataplane/data_plane_test_util.hpp"

namespace bdata = boost::unit_test::data;
using namespace hetflow;
using namespace hetflow::dataplane;
using namespace hetflow::dataplane::testing;

namespace {

// send() reports an error either at once or through `done`; returns the
// first error within `timeout`, ok when every send succeeded.
status send_and_wait(data_plane& from, peer_id to, channel_id ch, wire_buffer_ref msg,
                     std::chrono::milliseconds timeout = 10s) {
  completions c;
  status s = from.send(to, ch, std::move(msg), c.make());
  if (!s.ok()) return s;
  if (!c.wait_for(1, timeout)) return make_error(errc::timeout, "send did not complete");
  return c.results().front();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(data_plane_contract)

BOOST_DATA_TEST_CASE(messages_of_every_size_arrive_intact, bdata::make(implementations()), impl) {
  auto p = make_connected_pair(impl);
  inbox in_b, in_a;
  in_b.install(*p.b);
  in_a.install(*p.a);
  const std::vector<std::size_t> sizes = {0, 8, 4096, 1 << 20, 64 << 20};
  std::vector<uint64_t> sums;
  completions done;
  uint64_t total = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    auto msg = make_payload(sizes[i], i + 1);
    sums.push_back(checksum(*msg));
    total += sizes[i];
    // Distinct channel per size, including the largest legal one.
    channel_id ch = i == 0 ? (channel_id{1} << 48) - 1 : 100 + i;
    BOOST_REQUIRE(p.a->send(1, ch, std::move(msg), done.make()).ok());
  }
  // And one small message the other way.
  BOOST_REQUIRE(p.b->send(0, 3, make_payload(8, 99), done.make()).ok());
  BOOST_REQUIRE_MESSAGE(in_b.wait_for(sizes.size(), 20s), impl << ": only " << in_b.size() << " arrived");
  BOOST_REQUIRE(in_a.wait_for(1, 5s));
  BOOST_REQUIRE(done.wait_for(sizes.size() + 1, 10s));
  for (const status& s : done.results()) BOOST_CHECK_MESSAGE(s.ok(), s.to_string());

  auto got = in_b.take();
  BOOST_REQUIRE_EQUAL(got.size(), sizes.size());
  // Different channels may arrive in any order; match by channel.
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    channel_id ch = i == 0 ? (channel_id{1} << 48) - 1 : 100 + i;
    auto it = std::find_if(got.begin(), got.end(), [&](const arrival& a) { return a.channel == ch; });
    BOOST_REQUIRE_MESSAGE(it != got.end(), "nothing arrived on channel " << ch);
    BOOST_CHECK_EQUAL(it->from, 0u);
    BOOST_CHECK_EQUAL(it->msg.size(), sizes[i]);
    BOOST_CHECK_MESSAGE(checksum(it->msg) == sums[i], impl << ": payload of " << sizes[i] << " bytes corrupted");
    if (it->msg.size() > 0)
      BOOST_CHECK_EQUAL(reinterpret_cast<uintptr_t>(it->msg.data()) % wire_buffer::alignment, 0u);
  }
  auto back = in_a.take();
  BOOST_CHECK_EQUAL(back.at(0).from, 1u);
  BOOST_CHECK_EQUAL(back.at(0).channel, 3u);
  BOOST_CHECK_EQUAL(checksum(back.at(0).msg), checksum(*make_payload(8, 99)));

  // Stats count what completed and what arrived.
  auto sa = p.a->stats();
  auto sb = p.b->stats();
  BOOST_CHECK_EQUAL(sa.messages_sent, sizes.size());
  BOOST_CHECK_EQUAL(sa.bytes_sent, total);
  BOOST_CHECK_EQUAL(sb.messages_received, sizes.size());
  BOOST_CHECK_EQUAL(sb.bytes_received, total);
  BOOST_CHECK_EQUAL(sb.messages_sent, 1u);
  BOOST_CHECK_EQUAL(sb.bytes_sent, 8u);
  BOOST_CHECK_EQUAL(sa.messages_received, 1u);
}

BOOST_DATA_TEST_CASE(messages_on_a_channel_arrive_in_send_order, bdata::make(implementations()), impl) {
  auto p = make_connected_pair(impl);
  inbox in;
  in.install(*p.b);
  // 1000 messages; every 97th is 256 KiB so that rendezvous transfers are
  // overtaken by later eager ones inside the transport.
  constexpr int n = 1000;
  for (int i = 0; i < n; ++i) {
    std::size_t size = i % 97 == 0 ? 256 << 10 : 8 + i % 24;
    auto msg = std::make_shared<wire_buffer>(size);
    std::memset(msg->data(), 0, size);
    std::memcpy(msg->data(), &i, sizeof i);
    BOOST_REQUIRE(p.a->send(1, 42, std::move(msg)).ok());
  }
  BOOST_REQUIRE_MESSAGE(in.wait_for(n, 10s), impl << ": only " << in.size() << " of " << n << " arrived");
  auto got = in.take();
  for (int i = 0; i < n; ++i) {
    int seq;
    std::memcpy(&seq, got[i].msg.data(), sizeof seq);
    BOOST_REQUIRE_MESSAGE(seq == i, impl << ": position " << i << " holds message " << seq);
    BOOST_REQUIRE_EQUAL(got[i].channel, 42u);
  }
}

BOOST_DATA_TEST_CASE(interleaved_channels_keep_per_channel_order, bdata::make(implementations()), impl) {
  auto p = make_connected_pair(impl);
  inbox in;
  in.install(*p.b);
  constexpr int per_channel = 200;
  const channel_id channels[] = {1, 2, (channel_id{7} << 40) + 5};
  for (int i = 0; i < per_channel; ++i) {
    for (int c = 0; c < 3; ++c) {
      // Channel 2 carries large messages now and then, the others small ones.
      std::size_t size = (c == 1 && i % 20 == 0) ? 1 << 20 : 16 + c;
      auto msg = std::make_shared<wire_buffer>(size);
      std::memset(msg->data(), 0, size);
      std::memcpy(msg->data(), &i, sizeof i);
      BOOST_REQUIRE(p.a->send(1, channels[c], std::move(msg)).ok());
    }
  }
  BOOST_REQUIRE(in.wait_for(3 * per_channel, 10s));
  auto got = in.take();
  int next[3] = {0, 0, 0};
  for (const arrival& a : got) {
    int c = a.channel == channels[0] ? 0 : a.channel == channels[1] ? 1 : a.channel == channels[2] ? 2 : -1;
    BOOST_REQUIRE_MESSAGE(c >= 0, "unexpected channel " << a.channel);
    int seq;
    std::memcpy(&seq, a.msg.data(), sizeof seq);
    BOOST_REQUIRE_MESSAGE(seq == next[c], impl << ": channel " << a.channel << " got " << seq
                                                << ", expected " << next[c]);
    ++next[c];
    BOOST_CHECK_EQUAL(a.from, 0u);
  }
}

BOOST_DATA_TEST_CASE(bad_sends_fail_at_once, bdata::make(implementations()), impl) {
  auto p = make_connected_pair(impl);
  completions never;
  status s = p.a->send(7, 1, make_payload(8, 1), never.make());
  BOOST_CHECK_MESSAGE(s.code() == errc::not_found, impl << ": send to unknown peer gave " << s.to_string());
  s = p.a->send(1, channel_id{1} << 48, make_payload(8, 1), never.make());
  BOOST_CHECK_MESSAGE(s.code() == errc::invalid_argument, impl << ": channel 2^48 gave " << s.to_string());
  s = p.a->send(1, ~channel_id{0}, make_payload(8, 1), never.make());
  BOOST_CHECK_EQUAL(s.code(), errc::invalid_argument);
  s = p.a->send(1, 1, nullptr, never.make());
  BOOST_CHECK_EQUAL(s.code(), errc::invalid_argument);
  // An address that belongs to someone else is refused.
  s = p.a->connect(2, p.b->local_address());
  BOOST_CHECK_EQUAL(s.code(), errc::invalid_argument);
  std::vector<char> garbage(40, 'x');
  s = p.a->connect(2, garbage);
  BOOST_CHECK_EQUAL(s.code(), errc::invalid_argument);
  std::this_thread::sleep_for(50ms);
  BOOST_CHECK_EQUAL(never.size(), 0u);  // done never runs for a refused send
}

BOOST_DATA_TEST_CASE(message_above_receivers_bound_is_refused, bdata::make(implementations()), impl) {
  constexpr uint64_t bound = 64 << 10;
  auto p = make_connected_pair(impl, 1ull << 30, bound);
  BOOST_CHECK_EQUAL(p.b->max_message_bytes(), bound);
  inbox in;
  in.install(*p.b);
  for (std::size_t size : {std::size_t{bound + 1}, std::size_t{8} << 20}) {
    status s = send_and_wait(*p.a, 1, 5, make_payload(size, 3));
    BOOST_CHECK_MESSAGE(s.code() == errc::wire_too_large, impl << ": " << size << " bytes gave " << s.to_string());
  }
  // Exactly the bound is fine, and the pair still works afterwards.
  BOOST_CHECK(send_and_wait(*p.a, 1, 6, make_payload(bound, 4)).ok());
  BOOST_REQUIRE(in.wait_for(1, 5s));
  std::this_thread::sleep_for(100ms);
  auto got = in.take();
  BOOST_REQUIRE_EQUAL(got.size(), 1u);
  BOOST_CHECK_EQUAL(got[0].channel, 6u);
  BOOST_CHECK_EQUAL(got[0].msg.size(), bound);
}

BOOST_DATA_TEST_CASE(shutdown_with_sends_in_flight_completes_them, bdata::make(implementations()), impl) {
  auto p = make_connected_pair(impl);
  // The receiver's thread stalls in its handler on the first message, so
  // most sends are certainly still in flight when the sender shuts down
  // (otherwise, on 2 cores, the transfer can finish before shutdown() runs).
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> arrived{0};
  p.b->set_receive_handler([&](peer_id, channel_id, wire_buffer) {
    if (arrived++ == 0) released.wait();
  });
  constexpr int n = 64;
  completions done;
  auto msg = make_payload(4 << 20, 5);
  for (int i = 0; i < n; ++i) BOOST_REQUIRE(p.a->send(1, 9, msg, done.make()).ok());
  for (int i = 0; i < 500 && arrived == 0; ++i) std::this_thread::sleep_for(2ms);
  BOOST_REQUIRE(arrived > 0);
  auto t0 = std::chrono::steady_clock::now();
  p.a->shutdown();
  auto took = std::chrono::steady_clock::now() - t0;
  release.set_value();
  BOOST_CHECK_LT(std::chrono::duration_cast<std::chrono::milliseconds>(took).count(), 5000);
  // Every completion ran, before shutdown() returned.
  BOOST_REQUIRE_EQUAL(done.size(), static_cast<std::size_t>(n));
  int ok = 0, cancelled = 0;
  for (const status& s : done.results()) {
    if (s.ok())
      ++ok;
    else if (s.code() == errc::cancelled)
      ++cancelled;
    else
      BOOST_ERROR(impl << ": unexpected completion " << s.to_string());
  }
  BOOST_TEST_MESSAGE(impl << ": " << ok << " sent, " << cancelled << " cancelled by shutdown");
  BOOST_CHECK_GT(cancelled, 0);
  BOOST_CHECK_EQUAL(p.a->stats().messages_sent, static_cast<uint64_t>(ok));
  // Stopped: refused at once; shutdown is idempotent.
  completions never;
  BOOST_CHECK_EQUAL(p.a->send(1, 9, msg, never.make()).code(), errc::cancelled);
  p.a->shutdown();
  p.b->shutdown();
  BOOST_CHECK_EQUAL(never.size(), 0u);
}

// Peer 1 stops (shutdown() stands in for its death in-process); peer 0 keeps
// sending and must see an error within 5 s, never a hang.
BOOST_DATA_TEST_CASE(shutdown_from_inside_a_handler_does_not_deadlock, bdata::make(implementations()), impl) {
  auto p = make_connected_pair(impl);
  std::atomic<bool> called{false};
  data_plane* b = p.b.get();
  b->set_receive_handler([&](peer_id, channel_id, wire_buffer) {
    b->shutdown();
    called = true;
  });
  BOOST_REQUIRE(p.a->send(1, 1, make_payload(8, 1)).ok());
  for (int i = 0; i < 400 && !called; ++i) std::this_thread::sleep_for(5ms);
  BOOST_REQUIRE(called);
  BOOST_CHECK_EQUAL(b->send(0, 1, make_payload(8, 1)).code(), errc::cancelled);
  p.b.reset();
}

BOOST_DATA_TEST_CASE(dead_peer_gives_sender_an_error, bdata::make(implementations()), impl) {
  auto p = make_connected_pair(impl);
  inbox in;
  in.install(*p.b);
  BOOST_REQUIRE(send_and_wait(*p.a, 1, 1, make_payload(1024, 1)).ok());  // path is up
  p.b->shutdown();
  auto t0 = std::chrono::steady_clock::now();
  auto deadline = t0 + 5s;
  status first_error;
  completions done;
  int sent = 0;
  while (first_error.ok() && std::chrono::steady_clock::now() < deadline) {
    status s = p.a->send(1, 1, make_payload(sent % 2 ? 1 << 20 : 1024, 2), done.make());
    if (!s.ok()) {
      first_error = s;
      break;
    }
    ++sent;
    std::this_thread::sleep_for(10ms);
    for (const status& r : done.results())
      if (!r.ok()) first_error = r;
  }
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  BOOST_REQUIRE_MESSAGE(!first_error.ok(), impl << ": no error after " << ms << " ms and " << sent << " sends");
  BOOST_TEST_MESSAGE(impl << ": sender saw " << first_error.to_string() << " after " << ms << " ms, "
                          << sent << " sends accepted before");
  BOOST_CHECK_EQUAL(first_error.code(), errc::peer_down);
  BOOST_CHECK_MESSAGE(first_error.message().find("peer 1") != std::string::npos, first_error.message());
  // Sends accepted before the error complete too (no hang).
  BOOST_CHECK(done.wait_for(sent, 5s));
  p.a->shutdown();
  BOOST_CHECK_EQUAL(done.size(), static_cast<std::size_t>(sent));
}

BOOST_AUTO_TEST_SUITE_END()
