// link_probe.hpp: the probe's size and what its round trips say.
#define BOOST_TEST_MODULE actors_link_probe
#include <boost/test/unit_test.hpp>

#include "actors/link_probe.hpp"

namespace lp = hetflow::actors::link_probe;

BOOST_AUTO_TEST_CASE(probe_size_is_clamped_to_the_range_and_under_max_message) {
  BOOST_CHECK_EQUAL(lp::probe_bytes(1000, 1ull << 30), 256u << 10);           // at least 256 KiB
  BOOST_CHECK_EQUAL(lp::probe_bytes(3'000'001, 1ull << 30), 3'000'000u);     // as it is, a multiple of 4
  BOOST_CHECK_EQUAL(lp::probe_bytes(1ull << 40, 1ull << 30), 8u << 20);       // at most 8 MiB
  BOOST_CHECK_EQUAL(lp::probe_bytes(8u << 20, 4u << 20), 3u << 20);           // 1 MiB under max_message
  BOOST_CHECK_EQUAL(lp::probe_bytes(8u << 20, 0), 1u << 20);                  // a tiny max_message: 1 MiB
}

BOOST_AUTO_TEST_CASE(bandwidth_from_the_difference_of_the_round_trips) {
  lp::result r;
  r.bytes = 1'000'000;
  r.small_ms = 0.02;
  r.big_ms = 0.42;  // 1 MB in 0.4 ms: 20 Gb/s
  BOOST_CHECK_CLOSE(r.gbps(), 20.0, 1e-6);
  BOOST_CHECK_EQUAL(r.describe(), "1.00 MB in 0.420 ms, 4 B in 0.020 ms (round trips)");
}

BOOST_AUTO_TEST_CASE(round_trips_too_close_to_tell_apart_are_not_resolved) {
  lp::result r;
  r.bytes = 1'000'000;
  r.small_ms = 0.30;
  r.big_ms = 0.32;  // within 10%: noise, not a bandwidth
  BOOST_CHECK_EQUAL(r.gbps(), 0.0);
  r.big_ms = 0.2;  // faster than the small one
  BOOST_CHECK_EQUAL(r.gbps(), 0.0);
}

BOOST_AUTO_TEST_CASE(median_of_the_rounds) {
  BOOST_CHECK_EQUAL(lp::median({3, 1, 2}), 2.0);
  BOOST_CHECK_EQUAL(lp::median({}), 0.0);
}
