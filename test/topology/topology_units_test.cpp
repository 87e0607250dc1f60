// topology/units.hpp (sizes, durations), topology/suggest.hpp, fnv1a64.
#define BOOST_TEST_MODULE topology_units
#include <boost/test/unit_test.hpp>

#include <string>

#include "topology/parser.hpp"
#include "topology/suggest.hpp"
#include "topology/units.hpp"

using namespace hetflow::topology;

namespace {
uint64_t size_ok(std::string_view s) {
  auto r = parse_size(s);
  BOOST_TEST_INFO("parse_size(\"" << s << "\")");
  BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().to_string());
  return *r;
}
void size_bad(std::string_view s, std::string_view needle) {
  auto r = parse_size(s);
  BOOST_TEST_CONTEXT("parse_size(\"" << s << "\")") {
    BOOST_REQUIRE(!r.has_value());
    BOOST_TEST((r.error().code() == hetflow::errc::parse_error));
    BOOST_TEST(r.error().message().find(needle) != std::string::npos, r.error().message());
    // Every size error says which forms are accepted.
    BOOST_TEST(r.error().message().find("KiB, MiB, GiB, TiB") != std::string::npos);
  }
}
double duration_ok(std::string_view s) {
  auto r = parse_duration(s);
  BOOST_TEST_INFO("parse_duration(\"" << s << "\")");
  BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().to_string());
  return *r;
}
void duration_bad(std::string_view s, std::string_view needle) {
  auto r = parse_duration(s);
  BOOST_TEST_CONTEXT("parse_duration(\"" << s << "\")") {
    BOOST_REQUIRE(!r.has_value());
    BOOST_TEST(r.error().message().find(needle) != std::string::npos, r.error().message());
    BOOST_TEST(r.error().message().find("ms, s, m or min, h") != std::string::npos);
  }
}
}  // namespace

BOOST_AUTO_TEST_CASE(sizes_binary_and_decimal_units) {
  BOOST_TEST(size_ok("100B") == 100u);
  BOOST_TEST(size_ok("4096") == 4096u);
  BOOST_TEST(size_ok("0") == 0u);
  BOOST_TEST(size_ok("64KiB") == 64u * 1024);
  BOOST_TEST(size_ok("512 MiB") == 512ull << 20);
  BOOST_TEST(size_ok("4GiB") == 4ull << 30);
  BOOST_TEST(size_ok("2TiB") == 2ull << 40);
  BOOST_TEST(size_ok("1KB") == 1000u);
  BOOST_TEST(size_ok("3MB") == 3000000u);
  BOOST_TEST(size_ok("4GB") == 4000000000ull);
  BOOST_TEST(size_ok("1TB") == 1000000000000ull);
  BOOST_TEST(size_ok("4gib") == 4ull << 30);  // units are case-insensitive
  BOOST_TEST(size_ok("  16 MiB  ") == 16ull << 20);
  BOOST_TEST(size_ok("1.5KiB") == 1536u);
  BOOST_TEST(size_ok("0.5GiB") == 512ull << 20);
  BOOST_TEST(size_ok("1.1GiB") == 1181116006ull);  // rounded to the nearest byte
  BOOST_TEST(size_ok("9223372036854775807") == 9223372036854775807ull);
  BOOST_TEST(size_ok("8388607TiB") == 8388607ull << 40);
}

BOOST_AUTO_TEST_CASE(sizes_rejected_with_reasons) {
  size_bad("", "it is empty");
  size_bad("   ", "it is empty");
  size_bad("-1GiB", "cannot be negative");
  size_bad("4XB", "unknown unit \"XB\"");
  size_bad("4 GB s", "unexpected \"s\" after the unit");
  size_bad("4 4", "unexpected \"4\" after the number");
  size_bad("GiB", "does not start with a number");
  size_bad("4.GiB", "does not start with a number");
  size_bad("+4GiB", "does not start with a number");
  size_bad("1e9", "unexpected \"9\" after the unit");  // no scientific notation
  size_bad("8388608TiB", "too large");
  size_bad("9223372036854775808", "too large");
  size_bad("99999999999999999999999", "too large");
  size_bad("8388608.0TiB", "too large");
}

BOOST_AUTO_TEST_CASE(durations) {
  BOOST_TEST(duration_ok("60s") == 60.0);
  BOOST_TEST(duration_ok("200ms") == 0.2);
  BOOST_TEST(duration_ok("2m") == 120.0);
  BOOST_TEST(duration_ok("2min") == 120.0);
  BOOST_TEST(duration_ok("1h") == 3600.0);
  BOOST_TEST(duration_ok("1m30s") == 90.0);
  BOOST_TEST(duration_ok("1h 2m 3s") == 3723.0);
  BOOST_TEST(duration_ok("250 ms") == 0.25);
  BOOST_TEST(duration_ok("1.5s") == 1.5);
  BOOST_TEST(duration_ok("0s") == 0.0);
  BOOST_TEST(duration_ok("10us") == 1e-5, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(duration_ok("7ns") == 7e-9, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(durations_rejected_with_reasons) {
  duration_bad("", "it is empty");
  duration_bad("60", "it has no unit");
  duration_bad("-1s", "cannot be negative");
  duration_bad("5sec", "unknown unit \"sec\"");
  duration_bad("5S", "unknown unit \"S\"");  // duration units are case-sensitive (m vs M)
  duration_bad("s", "does not start with a number");
  duration_bad("5s s", "unexpected \"s\"");
  duration_bad("1m30", "a number has no unit");
  duration_bad("99999999999999999999999h", "too large");
}

BOOST_AUTO_TEST_CASE(formatting_for_messages) {
  BOOST_TEST(format_size(16ull << 20) == "16 MiB");
  BOOST_TEST(format_size(100) == "100 B");
  BOOST_TEST(format_size(1536) == "1.50 KiB");
  BOOST_TEST(format_size(0) == "0 B");
  BOOST_TEST(format_duration(60) == "60s");
  BOOST_TEST(format_duration(0.2) == "200ms");
  BOOST_TEST(format_duration(0.001) == "1ms");
  BOOST_TEST(format_duration(5e-6) == "5us");
}

BOOST_AUTO_TEST_CASE(edit_distance_and_suggestions) {
  BOOST_TEST(edit_distance("", "") == 0u);
  BOOST_TEST(edit_distance("port", "port") == 0u);
  BOOST_TEST(edit_distance("prot", "port") == 1u);  // transposition counts one
  BOOST_TEST(edit_distance("nmae", "name") == 1u);
  BOOST_TEST(edit_distance("kitten", "sitting") == 3u);
  BOOST_TEST(edit_distance("", "abc") == 3u);
  const std::vector<std::string> keys = {"name", "host", "port", "devices"};
  BOOST_TEST(closest_match("prot", keys).value_or("") == "port");
  BOOST_TEST(closest_match("Port", keys).value_or("") == "port");    // case-insensitive
  BOOST_TEST(closest_match("DEVICES", keys).value_or("") == "devices");
  BOOST_TEST(closest_match("device", keys).value_or("") == "devices");
  BOOST_TEST(closest_match("hots", keys).value_or("") == "host");
  BOOST_TEST(!closest_match("zzzz", keys).has_value());
  BOOST_TEST(!closest_match("ab", keys).has_value());  // too short to be a typo of anything
  BOOST_TEST(!closest_match("x", std::vector<std::string>{"y"}).has_value());
  BOOST_TEST(did_you_mean("nmae", keys) == "; did you mean 'name'?");
  BOOST_TEST(did_you_mean("qqqqq", keys) == "");
}

BOOST_AUTO_TEST_CASE(fnv1a64_reference_values) {
  // Published FNV-1a 64 test vectors.
  auto h = [](std::string_view s) { return fnv1a64(std::as_bytes(std::span(s.data(), s.size()))); };
  BOOST_TEST(h("") == 0xcbf29ce484222325ull);
  BOOST_TEST(h("a") == 0xaf63dc4c8601ec8cull);
  BOOST_TEST(h("foobar") == 0x85944171f73967e8ull);
}

BOOST_AUTO_TEST_CASE(prefix_suggestions) {
  const std::vector<std::string> keys = {"name", "heartbeat_interval", "join_timeout"};
  BOOST_TEST(closest_match("heartbeat", keys).value_or("") == "heartbeat_interval");
  BOOST_TEST(closest_match("join", keys).value_or("") == "join_timeout");
  BOOST_TEST(closest_match("names_list", keys).value_or("") == "name");
  BOOST_TEST(!closest_match("joi", keys).has_value());  // too short for a prefix match
  const std::vector<std::string> two = {"timeout_alpha", "timeout_beta"};
  BOOST_TEST(!closest_match("timeout", two).has_value());  // ambiguous
}
