// The inbox of pushed count tables (actors/builtin/pushed_counts.hpp) that a
// node's merger takes hashed columns from: whole columns only, a watchdog
// timeout that only runs while nothing arrives, refusal of chunks after a
// column's last or after it was taken and of corrupt ones, and a prompt
// stop. Also the other wire form of the hashed merge's protocol: a shard's
// pass-1 report (actors/builtin/counted_report.hpp).
#define BOOST_TEST_MODULE actors_pushed_counts
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <thread>

#include "actors/builtin/counted_report.hpp"
#include "actors/builtin/pushed_counts.hpp"

using namespace hetflow;
using hetflow::actors::builtin::counted_report;
using hetflow::actors::builtin::pushed_counts;
using namespace std::chrono_literals;
namespace pp = hetflow::kernels::preprocess;
using clk = std::chrono::steady_clock;

namespace {

pp::hex_column column(uint32_t values, uint32_t seed, bool empty) {
  pp::hex_column h;
  h.has_empty = empty;
  h.empty_count = empty ? 7 + seed : 0;
  for (uint32_t v = 0; v < values; ++v) {
    h.pairs.push_back(seed * 1000003u + v * 2654435761u);
    h.pairs.push_back(1 + (v % 5));
  }
  return h;
}

// h's wire chunks of at most max_bytes each.
std::vector<std::vector<char>> chunks(const pp::hex_column& h, std::size_t max_bytes) {
  std::vector<std::vector<char>> out;
  std::size_t next = 0;
  do out.push_back(pp::next_hex_column_chunk(h, next, max_bytes));
  while (next < h.entries());
  return out;
}

// Pushes every chunk of h as shard i's column c.
void push(pushed_counts& in, int i, int c, const pp::hex_column& h, std::size_t max_bytes = 64) {
  auto cs = chunks(h, max_bytes);
  for (std::size_t k = 0; k < cs.size(); ++k) BOOST_REQUIRE(in.add(i, c, cs[k], k + 1 == cs.size()));
}

bool same(const pp::hex_column& a, const pp::hex_column& b) {
  return a.has_empty == b.has_empty && a.empty_count == b.empty_count && a.pairs == b.pairs;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_column_is_taken_whole_in_the_order_it_was_pushed) {
  pushed_counts in;
  std::atomic<bool> stop{false};
  const auto a = column(100, 1, true), b = column(37, 2, false);
  push(in, 0, 3, a);
  push(in, 1, 3, b, 16);  // one value a chunk
  auto ta = in.take(0, 3, 1000ms, stop);
  auto tb = in.take(1, 3, 1000ms, stop);
  BOOST_REQUIRE(ta.has_value());
  BOOST_REQUIRE(tb.has_value());
  BOOST_TEST(same(*ta, a));
  BOOST_TEST(same(*tb, b));
}

BOOST_AUTO_TEST_CASE(take_waits_for_the_last_chunk) {
  pushed_counts in;
  std::atomic<bool> stop{false};
  const auto a = column(50, 3, true);
  auto cs = chunks(a, 64);
  BOOST_REQUIRE(cs.size() > 2);
  for (std::size_t k = 0; k + 1 < cs.size(); ++k) BOOST_REQUIRE(in.add(2, 7, cs[k], false));
  const auto t0 = clk::now();
  std::atomic<bool> added{false};
  std::thread late([&] {
    std::this_thread::sleep_for(150ms);
    added = in.add(2, 7, cs.back(), true);
  });
  auto t = in.take(2, 7, 5000ms, stop);
  const auto waited = clk::now() - t0;
  late.join();
  BOOST_TEST(added.load());
  BOOST_REQUIRE(t.has_value());
  BOOST_TEST(same(*t, a));
  BOOST_TEST(waited >= 100ms);  // not before the last chunk
}

BOOST_AUTO_TEST_CASE(nothing_pushed_times_out_with_what_to_check) {
  pushed_counts in;
  std::atomic<bool> stop{false};
  const auto t0 = clk::now();
  auto t = in.take(0, 0, 200ms, stop);
  const auto waited = clk::now() - t0;
  BOOST_REQUIRE(!t.has_value());
  BOOST_CHECK(t.error().code() == errc::timeout);
  BOOST_TEST(t.error().message().find("request_timeout") != std::string::npos);
  BOOST_TEST(waited >= 200ms);
  BOOST_TEST(waited < 2000ms);
}

BOOST_AUTO_TEST_CASE(other_columns_arriving_keep_a_column_waiting_past_the_timeout) {
  // The pushes of every column queue up on the senders' connections: a
  // column behind others may take longer than the timeout to arrive.
  pushed_counts in;
  std::atomic<bool> stop{false};
  const auto busy = column(1000, 4, false), want = column(20, 5, true);
  const auto cs = chunks(busy, 64), ws = chunks(want, 1 << 20);  // 143 chunks of 7 values; 1
  BOOST_REQUIRE(ws.size() == 1u);
  std::atomic<int> refused{0};
  const auto t0 = clk::now();
  std::thread pusher([&] {
    for (std::size_t k = 0; k < cs.size(); ++k) {  // one every 10 ms: ~1.4 s
      refused += !in.add(1, 2, cs[k], k + 1 == cs.size());
      std::this_thread::sleep_for(10ms);
    }
    refused += !in.add(1, 9, ws[0], true);
  });
  auto t = in.take(1, 9, 500ms, stop);
  const auto waited = clk::now() - t0;
  pusher.join();
  BOOST_TEST(refused.load() == 0);
  BOOST_REQUIRE_MESSAGE(t.has_value(), t.error().to_string());
  BOOST_TEST(same(*t, want));
  BOOST_TEST(waited >= 1000ms);  // well past the 500 ms timeout
}

BOOST_AUTO_TEST_CASE(chunks_after_the_last_or_the_take_and_corrupt_ones_are_refused) {
  pushed_counts in;
  std::atomic<bool> stop{false};
  const auto a = column(10, 6, false);
  auto cs = chunks(a, 1 << 20);
  BOOST_REQUIRE(cs.size() == 1u);
  BOOST_TEST(in.add(0, 1, cs[0], true));
  BOOST_TEST(!in.add(0, 1, cs[0], true));  // after the last chunk
  auto t = in.take(0, 1, 1000ms, stop);
  BOOST_REQUIRE(t.has_value());
  BOOST_TEST(!in.add(0, 1, cs[0], true));  // after it was taken
  std::vector<char> bad{char(9), 0, 0, 0, 0};  // no such record tag
  BOOST_TEST(!in.add(0, 2, bad, true));
  std::vector<char> short_run = cs[0];
  short_run.resize(short_run.size() - 3);  // truncated
  BOOST_TEST(!in.add(3, 1, short_run, true));
  // Another shard's same column is its own entry.
  BOOST_TEST(in.add(1, 1, cs[0], true));
  BOOST_TEST(in.take(1, 1, 1000ms, stop).has_value());
}

BOOST_AUTO_TEST_CASE(stop_ends_a_wait_promptly) {
  pushed_counts in;
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    std::this_thread::sleep_for(100ms);
    stop = true;
  });
  const auto t0 = clk::now();
  auto t = in.take(0, 0, 60000ms, stop);
  const auto waited = clk::now() - t0;
  stopper.join();
  BOOST_REQUIRE(!t.has_value());
  BOOST_CHECK(t.error().code() == errc::cancelled);
  BOOST_TEST(waited < 1000ms);
}

// The shard's pass-1 report (ppcounted) survives its wire form, and a
// message of another length or with impossible fields is refused.
BOOST_AUTO_TEST_CASE(counted_report_round_trips_and_refuses_bad_bytes) {
  counted_report r;
  for (int c = 0; c < counted_report::columns; ++c) r.sizes[std::size_t(c)] = uint64_t(c) * 1000003u + 7;
  r.hashable = (1u << 26) - 1 - (1u << 3);
  r.cap = uint64_t{5} << 33;
  r.table_bytes = 123456789;
  r.in_flight = 3;
  const std::vector<char> bytes = r.encode();
  BOOST_TEST(bytes.size() == counted_report::wire_bytes);
  auto back = counted_report::decode(bytes);
  BOOST_REQUIRE(back.has_value());
  BOOST_TEST(back->sizes == r.sizes);
  BOOST_TEST(back->hashable == r.hashable);
  BOOST_TEST(back->cap == r.cap);
  BOOST_TEST(back->table_bytes == r.table_bytes);
  BOOST_TEST(back->in_flight == 3u);
  auto shorter = bytes;
  shorter.pop_back();
  BOOST_TEST(!counted_report::decode(shorter).has_value());
  auto longer = bytes;
  longer.push_back(0);
  BOOST_TEST(!counted_report::decode(longer).has_value());
  BOOST_TEST(!counted_report::decode({}).has_value());
  counted_report none = r;
  none.in_flight = 0;
  BOOST_TEST(!counted_report::decode(none.encode()).has_value());
  counted_report past = r;
  past.hashable |= 1u << 26;
  BOOST_TEST(!counted_report::decode(past.encode()).has_value());
}
