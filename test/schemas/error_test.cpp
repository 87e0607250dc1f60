#define BOOST_TEST_MODULE schemas_error
#include <boost/test/unit_test.hpp>

#include <set>
#include <string>

#include "schemas/error.hpp"
#include "test_printing.hpp"

using hetflow::errc;
using hetflow::expected;
using hetflow::status;

namespace {

expected<int> parse_positive(int v) {
  if (v <= 0) return status{errc::invalid_argument, "value " + std::to_string(v) + " is not positive"};
  return v;
}

expected<int> doubled_positive(int v, int* reached_after) {
  HF_ASSIGN_OR_RETURN(int x, parse_positive(v));
  *reached_after = 1;
  return 2 * x;
}

status check_both(int a, int b, int* reached_after) {
  HF_RETURN_IF_ERROR(parse_positive(a).error());
  HF_RETURN_IF_ERROR(parse_positive(b).error());
  *reached_after = 1;
  return {};
}

}  // namespace

BOOST_AUTO_TEST_CASE(default_status_is_ok) {
  status s;
  BOOST_TEST(s.ok());
  BOOST_TEST(static_cast<bool>(s));
  BOOST_TEST(s.code() == errc::ok);
  BOOST_TEST(s.message().empty());
  BOOST_TEST(s.to_string() == "ok");
  BOOST_TEST(status::ok_status().ok());
}

BOOST_AUTO_TEST_CASE(error_status_carries_code_and_message) {
  status s = hetflow::make_error(errc::wire_corrupt, "message from n1 truncated at byte 12");
  BOOST_TEST(!s.ok());
  BOOST_TEST(!static_cast<bool>(s));
  BOOST_TEST(s.code() == errc::wire_corrupt);
  BOOST_TEST(s.to_string() == "wire_corrupt: message from n1 truncated at byte 12");
}

BOOST_AUTO_TEST_CASE(with_context_prefixes_errors_only) {
  status s{errc::parse_error, "line 3: bad key"};
  BOOST_TEST(s.with_context("reading topology.toml").message() ==
             "reading topology.toml: line 3: bad key");
  BOOST_TEST(s.with_context("x").code() == errc::parse_error);
  BOOST_TEST(status{}.with_context("reading topology.toml").ok());
  BOOST_TEST(status{}.with_context("reading topology.toml").message().empty());
}

BOOST_AUTO_TEST_CASE(every_errc_has_a_distinct_name) {
  std::set<std::string> names;
  for (int c = 0; c <= static_cast<int>(errc::internal); ++c) {
    std::string n = hetflow::to_string(static_cast<errc>(c));
    BOOST_TEST(n != "unknown");
    names.insert(n);
  }
  BOOST_TEST(names.size() == static_cast<std::size_t>(errc::internal) + 1);
  BOOST_TEST(std::string(hetflow::to_string(errc::timeout)) == "timeout");
}

BOOST_AUTO_TEST_CASE(expected_holds_value_or_error) {
  expected<std::string> v{std::string("abc")};
  BOOST_TEST(v.has_value());
  BOOST_TEST(*v == "abc");
  BOOST_TEST(v->size() == 3u);
  BOOST_TEST(v.error().ok());
  std::string moved = std::move(v).value();
  BOOST_TEST(moved == "abc");

  expected<std::string> e{status{errc::not_found, "no node n9"}};
  BOOST_TEST(!e.has_value());
  BOOST_TEST(!static_cast<bool>(e));
  BOOST_TEST(e.error().code() == errc::not_found);
  BOOST_TEST(e.error().message() == "no node n9");
}

BOOST_AUTO_TEST_CASE(expected_from_ok_status_is_an_internal_error) {
  expected<int> e{status{}};
  BOOST_TEST(!e.has_value());
  BOOST_TEST(e.error().code() == errc::internal);
}

BOOST_AUTO_TEST_CASE(assign_or_return_propagates) {
  int reached = 0;
  auto ok = doubled_positive(21, &reached);
  BOOST_TEST(ok.has_value());
  BOOST_TEST(*ok == 42);
  BOOST_TEST(reached == 1);

  reached = 0;
  auto bad = doubled_positive(-1, &reached);
  BOOST_TEST(!bad.has_value());
  BOOST_TEST(bad.error().code() == errc::invalid_argument);
  BOOST_TEST(bad.error().message() == "value -1 is not positive");
  BOOST_TEST(reached == 0);
}

BOOST_AUTO_TEST_CASE(return_if_error_stops_at_first_error) {
  int reached = 0;
  BOOST_TEST(check_both(1, 2, &reached).ok());
  BOOST_TEST(reached == 1);
  reached = 0;
  status s = check_both(1, -5, &reached);
  BOOST_TEST(s.code() == errc::invalid_argument);
  BOOST_TEST(s.message() == "value -5 is not positive");
  BOOST_TEST(reached == 0);
}
