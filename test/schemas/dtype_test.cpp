#define BOOST_TEST_MODULE schemas_dtype
#include <boost/test/unit_test.hpp>

#include <string>

#include "schemas/dtype.hpp"
#include "test_printing.hpp"

using hetflow::dtype;

namespace {
constexpr dtype all_dtypes[] = {dtype::f32, dtype::f16, dtype::bf16,
                                dtype::i32, dtype::i64, dtype::u8};
}

BOOST_AUTO_TEST_CASE(names_round_trip) {
  for (dtype t : all_dtypes) {
    auto parsed = hetflow::parse_dtype(hetflow::to_string(t));
    BOOST_TEST_REQUIRE(parsed.has_value());
    BOOST_TEST(static_cast<int>(*parsed) == static_cast<int>(t));
  }
  BOOST_TEST(std::string(hetflow::to_string(dtype::bf16)) == "bf16");
  BOOST_TEST(std::string(hetflow::to_string(dtype::u8)) == "u8");
}

BOOST_AUTO_TEST_CASE(unknown_names_are_rejected) {
  for (const char* s : {"", "F32", "float", "f64", "f32 ", "bf", "unknown"})
    BOOST_TEST(!hetflow::parse_dtype(s).has_value(), "parsed '" << s << "'");
  BOOST_TEST(std::string(hetflow::to_string(static_cast<dtype>(200))) == "unknown");
}

BOOST_AUTO_TEST_CASE(sizes) {
  BOOST_TEST(hetflow::dtype_size(dtype::f32) == 4u);
  BOOST_TEST(hetflow::dtype_size(dtype::f16) == 2u);
  BOOST_TEST(hetflow::dtype_size(dtype::bf16) == 2u);
  BOOST_TEST(hetflow::dtype_size(dtype::i32) == 4u);
  BOOST_TEST(hetflow::dtype_size(dtype::i64) == 8u);
  BOOST_TEST(hetflow::dtype_size(dtype::u8) == 1u);
  BOOST_TEST(hetflow::dtype_size(static_cast<dtype>(200)) == 0u);
}
