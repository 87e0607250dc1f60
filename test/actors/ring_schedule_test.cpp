// The ring's arithmetic without actors: segments, chunks, the schedule's
// send/receive segments and their inverses, bucket fusion, the reduction
// kernels on fused (piecewise) buffers, and a whole ring all-reduce
// simulated in memory with the same schedule the actor runs.
#define BOOST_TEST_MODULE actors_ring_schedule
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <deque>
#include <map>
#include <numeric>
#include <random>

#include "actors/ring/fused_buffer.hpp"
#include "actors/ring/ring_schedule.hpp"

using namespace hetflow::actors::ring;

BOOST_AUTO_TEST_SUITE(segments)

BOOST_AUTO_TEST_CASE(segments_cover_exactly_and_balance) {
  for (uint64_t len : {0ull, 1ull, 2ull, 3ull, 7ull, 8ull, 100ull, 1001ull, 65537ull}) {
    for (uint32_t n = 1; n <= 9; ++n) {
      uint64_t next = 0, lo = len, hi = 0;
      for (uint32_t g = 0; g < n; ++g) {
        auto r = segment_range(len, n, g);
        BOOST_TEST(r.begin == next);
        BOOST_TEST(r.end >= r.begin);
        next = r.end;
        lo = std::min(lo, r.size());
        hi = std::max(hi, r.size());
      }
      BOOST_TEST(next == len);
      BOOST_TEST(hi - lo <= 1);  // balanced: sizes differ by at most one
    }
  }
  // Fewer elements than members: the last segments are empty.
  BOOST_TEST(segment_range(2, 4, 0).size() == 1u);
  BOOST_TEST(segment_range(2, 4, 1).size() == 1u);
  BOOST_TEST(segment_range(2, 4, 2).size() == 0u);
  BOOST_TEST(segment_range(2, 4, 3).size() == 0u);
}

BOOST_AUTO_TEST_CASE(chunks_cover_a_segment) {
  elem_range seg{10, 10 + 1000};
  for (uint64_t ce : {1ull, 3ull, 7ull, 999ull, 1000ull, 1001ull, 4096ull}) {
    uint64_t k = chunk_count(seg, ce);
    BOOST_TEST(k == (1000 + ce - 1) / ce);
    uint64_t next = seg.begin;
    for (uint64_t c = 0; c < k; ++c) {
      auto r = chunk_range(seg, ce, c);
      BOOST_TEST(r.begin == next);
      BOOST_TEST(r.size() >= 1u);
      BOOST_TEST(r.size() <= ce);
      next = r.end;
    }
    BOOST_TEST(next == seg.end);
  }
  BOOST_TEST(chunk_count(elem_range{5, 5}, 16) == 0u);
  BOOST_TEST(chunk_elems_for(1 << 20, ring_dtype::f32) == (1u << 18));
  BOOST_TEST(chunk_elems_for(1 << 20, ring_dtype::f64) == (1u << 17));
  BOOST_TEST(chunk_elems_for(3, ring_dtype::i64) == 1u);  // never 0
}

BOOST_AUTO_TEST_CASE(schedule_inverses_and_ownership) {
  for (uint32_t n = 2; n <= 8; ++n) {
    for (uint32_t r = 0; r < n; ++r) {
      uint32_t right = (r + 1) % n;
      for (uint32_t s = 0; s + 1 < n; ++s) {
        // What r sends at step s is what its right neighbour receives at step s.
        BOOST_TEST(rs_send_segment(r, n, s) == rs_recv_segment(right, n, s));
        BOOST_TEST(ag_send_segment(r, n, s) == ag_recv_segment(right, n, s));
        BOOST_TEST(*rs_step_of(r, n, rs_recv_segment(r, n, s)) == s);
        BOOST_TEST(*ag_step_of(r, n, ag_recv_segment(r, n, s)) == s);
        // Step s+1 sends what step s received (and reduced / copied).
        if (s + 2 < n) {
          BOOST_TEST(rs_send_segment(r, n, s + 1) == rs_recv_segment(r, n, s));
          BOOST_TEST(ag_send_segment(r, n, s + 1) == ag_recv_segment(r, n, s));
        }
      }
      // The last reduce-scatter receive completes the owned segment, which
      // is the first all-gather send.
      BOOST_TEST(rs_recv_segment(r, n, n - 2) == owned_segment(r, n));
      BOOST_TEST(ag_send_segment(r, n, 0) == owned_segment(r, n));
      BOOST_TEST(!rs_step_of(r, n, r).has_value());
      BOOST_TEST(!ag_step_of(r, n, owned_segment(r, n)).has_value());
    }
  }
  BOOST_TEST(!rs_step_of(0, 1, 0).has_value());
  BOOST_TEST(expected_receives(1000, 1, 0, 7) == 0u);
  // n = 4, len = 10, chunks of 2: segments 3,3,2,2 -> 2,2,1,1 chunks.
  // Rank 0 receives RS segments 3,2,1 (1+1+2) and AG segments 0,3,2 (2+1+1).
  BOOST_TEST(expected_receives(10, 4, 0, 2) == 8u);
  BOOST_TEST(bus_bytes(1000, 4, ring_dtype::f32) == 2.0 * 3 / 4 * 4000);
}

BOOST_AUTO_TEST_CASE(names_parse_back) {
  for (auto t : {ring_dtype::f32, ring_dtype::f64, ring_dtype::i32, ring_dtype::i64})
    BOOST_TEST((*parse_ring_dtype(to_string(t)) == t));
  BOOST_TEST(!parse_ring_dtype("f16").has_value());
  BOOST_TEST((*parse_reduce_op("average") == reduce_op::average));
  BOOST_TEST(!parse_reduce_op("max").has_value());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(buckets)

BOOST_AUTO_TEST_CASE(fuses_consecutive_same_dtype_up_to_the_limit) {
  std::vector<tensor_desc> t{{ring_dtype::f32, 10},  {ring_dtype::f32, 20}, {ring_dtype::f32, 0},
                             {ring_dtype::f32, 100}, {ring_dtype::i64, 5},  {ring_dtype::i64, 5},
                             {ring_dtype::f32, 1},   {ring_dtype::f32, 1000}};
  auto b = plan_buckets(t, 128);  // bytes: 40, 80, 0 fit (120); 400 does not
  BOOST_REQUIRE(b.size() == 5u);
  BOOST_TEST((b[0].tensors == std::vector<std::size_t>{0, 1, 2}));
  BOOST_TEST(b[0].elems == 30u);
  BOOST_TEST((b[1].tensors == std::vector<std::size_t>{3}));  // too big: alone
  BOOST_TEST((b[2].tensors == std::vector<std::size_t>{4, 5}));
  BOOST_TEST((b[2].type == ring_dtype::i64));
  BOOST_TEST((b[3].tensors == std::vector<std::size_t>{6}));
  BOOST_TEST((b[4].tensors == std::vector<std::size_t>{7}));
  BOOST_TEST(plan_buckets(t, 0).size() == t.size());  // 0: never fuse
  BOOST_TEST(plan_buckets({}, 128).empty());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(kernels)

BOOST_AUTO_TEST_CASE(fused_buffer_reads_and_writes_across_pieces) {
  std::vector<int32_t> a(5), b(0), c(7);
  std::iota(a.begin(), a.end(), 0);
  std::iota(c.begin(), c.end(), 5);
  auto sp = [](std::vector<int32_t>& v) {
    return std::span<std::byte>(reinterpret_cast<std::byte*>(v.data()), v.size() * 4);
  };
  fused_buffer f(ring_dtype::i32, {sp(a), sp(b), sp(c)});
  BOOST_TEST(f.size() == 12u);
  std::vector<int32_t> out(6);
  f.copy_out({3, 9}, reinterpret_cast<std::byte*>(out.data()));
  BOOST_TEST((out == std::vector<int32_t>{3, 4, 5, 6, 7, 8}));
  std::vector<int32_t> recv{100, 100, 100, 100, 100, 100}, sum(6);
  f.add_out({3, 9}, reinterpret_cast<const std::byte*>(recv.data()),
            reinterpret_cast<std::byte*>(sum.data()));
  BOOST_TEST((sum == std::vector<int32_t>{103, 104, 105, 106, 107, 108}));
  BOOST_TEST(a[3] == 3);  // add_out leaves local alone
  f.add_final({4, 6}, reinterpret_cast<const std::byte*>(recv.data()),
              reinterpret_cast<std::byte*>(sum.data()), reduce_op::sum, 2);
  BOOST_TEST(a[4] == 104);
  BOOST_TEST(c[0] == 105);
  BOOST_TEST(sum[0] == 104);
  BOOST_TEST(sum[1] == 105);
  f.copy_in({0, 12}, reinterpret_cast<const std::byte*>(std::vector<int32_t>(12, -1).data()));
  BOOST_TEST(a[0] == -1);
  BOOST_TEST(c[6] == -1);
}

BOOST_AUTO_TEST_CASE(integer_sums_wrap_exactly) {
  std::vector<int32_t> x{INT32_MAX, -5}, y{1, INT32_MIN}, out(2);
  add_elems(ring_dtype::i32, reinterpret_cast<std::byte*>(out.data()),
            reinterpret_cast<std::byte*>(x.data()), reinterpret_cast<std::byte*>(y.data()), 2);
  BOOST_TEST(out[0] == INT32_MIN);
  BOOST_TEST(out[1] == static_cast<int32_t>(static_cast<uint32_t>(-5) + static_cast<uint32_t>(INT32_MIN)));
  std::vector<int64_t> p{INT64_MAX}, q{2}, o(1);
  add_elems(ring_dtype::i64, reinterpret_cast<std::byte*>(o.data()),
            reinterpret_cast<std::byte*>(p.data()), reinterpret_cast<std::byte*>(q.data()), 1);
  BOOST_TEST(o[0] == INT64_MIN + 1);
}

BOOST_AUTO_TEST_CASE(average_divides_floats_only_at_the_end) {
  std::vector<double> a{1.0, 3.0}, b{2.0, 4.0}, out(2);
  add_final_elems(ring_dtype::f64, reduce_op::average, 3, reinterpret_cast<std::byte*>(a.data()),
                  reinterpret_cast<std::byte*>(out.data()), reinterpret_cast<std::byte*>(a.data()),
                  reinterpret_cast<std::byte*>(b.data()), 2);
  BOOST_TEST(a[0] == 1.0);  // (1 + 2) / 3
  BOOST_TEST(out[1] == 7.0 / 3.0);
  std::vector<int64_t> i{6}, j{3}, io(1);
  add_final_elems(ring_dtype::i64, reduce_op::average, 3, reinterpret_cast<std::byte*>(io.data()),
                  nullptr, reinterpret_cast<std::byte*>(i.data()),
                  reinterpret_cast<std::byte*>(j.data()), 1);
  BOOST_TEST(io[0] == 9);  // integers: sum only (the member refuses average)
}

BOOST_AUTO_TEST_CASE(large_chunks_take_the_parallel_path_correctly) {
  const uint64_t n = (20u << 20) / 4 + 3;  // over the 16 MiB threshold, odd tail
  std::vector<float> a(n), b(n), out(n);
  for (uint64_t i = 0; i < n; ++i) {
    a[i] = float(i % 1000);
    b[i] = float(i % 7) * 0.5f;
  }
  add_elems(ring_dtype::f32, reinterpret_cast<std::byte*>(out.data()),
            reinterpret_cast<std::byte*>(a.data()), reinterpret_cast<std::byte*>(b.data()), n);
  bool ok = true;
  for (uint64_t i = 0; i < n; ++i) ok = ok && out[i] == float(i % 1000) + float(i % 7) * 0.5f;
  BOOST_TEST(ok);
}

BOOST_AUTO_TEST_SUITE_END()

// A whole collective in memory: N members, each with its own buffer and an
// inbox of (phase, segment, chunk, bytes) from its left; messages delivered
// in a random interleaving, handled exactly as ring_member.cpp does.
namespace {

struct sim_msg {
  int phase;  // 0 reduce-scatter, 1 all-gather
  uint32_t segment;
  uint64_t chunk;
  std::vector<std::byte> data;
};

template <class T>
std::vector<std::vector<T>> simulate(uint32_t n, uint64_t len, uint64_t chunk_elems, reduce_op op,
                                     ring_dtype type, std::vector<std::vector<T>> inputs,
                                     uint32_t seed, std::vector<uint64_t>& received) {
  std::vector<fused_buffer> bufs;
  for (auto& v : inputs)
    bufs.emplace_back(type, std::vector<std::span<std::byte>>{
                                {reinterpret_cast<std::byte*>(v.data()), v.size() * sizeof(T)}});
  std::vector<std::deque<sim_msg>> inbox(n);
  received.assign(n, 0);
  auto make = [&](int phase, uint32_t g, uint64_t c) {
    auto rg = chunk_range(segment_range(len, n, g), chunk_elems, c);
    sim_msg m{phase, g, c, std::vector<std::byte>(rg.size() * sizeof(T))};
    return std::pair{m, rg};
  };
  for (uint32_t r = 0; r < n && n > 1; ++r) {
    auto seg = segment_range(len, n, r);
    for (uint64_t c = 0; c < chunk_count(seg, chunk_elems); ++c) {
      auto [m, rg] = make(0, r, c);
      bufs[r].copy_out(rg, m.data.data());
      inbox[(r + 1) % n].push_back(std::move(m));
    }
  }
  std::mt19937 rng(seed);
  while (true) {
    std::vector<uint32_t> ready;
    for (uint32_t r = 0; r < n; ++r)
      if (!inbox[r].empty()) ready.push_back(r);
    if (ready.empty()) break;
    uint32_t r = ready[rng() % ready.size()];
    sim_msg in = std::move(inbox[r].front());
    inbox[r].pop_front();
    ++received[r];
    auto rg = chunk_range(segment_range(len, n, in.segment), chunk_elems, in.chunk);
    uint32_t right = (r + 1) % n;
    if (in.phase == 0) {
      uint32_t s = *rs_step_of(r, n, in.segment);
      bool final_step = s + 2 >= n;
      auto [m, rg2] = make(final_step ? 1 : 0, in.segment, in.chunk);
      if (final_step)
        bufs[r].add_final(rg, in.data.data(), m.data.data(), op, n);
      else
        bufs[r].add_out(rg, in.data.data(), m.data.data());
      inbox[right].push_back(std::move(m));
    } else {
      uint32_t s = *ag_step_of(r, n, in.segment);
      bufs[r].copy_in(rg, in.data.data());
      if (s + 2 < n) inbox[right].push_back(std::move(in));
    }
  }
  return inputs;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(simulated_ring)

BOOST_AUTO_TEST_CASE(every_member_gets_the_exact_sum) {
  for (uint32_t n = 1; n <= 8; ++n) {
    for (uint64_t len : {0ull, 1ull, 3ull, 7ull, 8ull, 9ull, 100ull, 1031ull}) {
      for (uint64_t ce : {1ull, 4ull, 64ull}) {
        std::vector<std::vector<int64_t>> in(n, std::vector<int64_t>(len));
        for (uint32_t r = 0; r < n; ++r)
          for (uint64_t i = 0; i < len; ++i) in[r][i] = int64_t(i * 1000003 + r * 7919) << 20;
        std::vector<uint64_t> received;
        auto out = simulate<int64_t>(n, len, ce, reduce_op::sum, ring_dtype::i64, in,
                                     n * 31 + uint32_t(len), received);
        for (uint32_t r = 0; r < n; ++r) {
          BOOST_TEST(received[r] == expected_receives(len, n, r, ce));
          for (uint64_t i = 0; i < len; ++i) {
            uint64_t want = 0;
            for (uint32_t m = 0; m < n; ++m) want += uint64_t(in[m][i]);
            if (uint64_t(out[r][i]) != want) {
              BOOST_ERROR("n=" << n << " len=" << len << " chunk=" << ce << " rank " << r
                               << " element " << i);
              break;
            }
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(float_average_is_bit_identical_on_every_member) {
  const uint32_t n = 5;
  const uint64_t len = 1237;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<std::vector<float>> in(n, std::vector<float>(len));
  for (auto& v : in)
    for (auto& x : v) x = d(rng);
  std::vector<uint64_t> received;
  auto out = simulate<float>(n, len, 16, reduce_op::average, ring_dtype::f32, in, 3, received);
  for (uint32_t r = 1; r < n; ++r)
    BOOST_TEST(std::memcmp(out[r].data(), out[0].data(), len * 4) == 0);
  for (uint64_t i = 0; i < len; ++i) {
    double want = 0;
    for (auto& v : in) want += v[i];
    want /= n;
    BOOST_TEST(std::abs(out[0][i] - want) <= 1e-6);
  }
}

BOOST_AUTO_TEST_SUITE_END()
