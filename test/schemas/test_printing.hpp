// Lets BOOST_TEST print hetflow enums in failure messages (found by ADL).
#pragma once

#include <ostream>

#include "schemas/dtype.hpp"
#include "schemas/error.hpp"

namespace hetflow {
inline std::ostream& boost_test_print_type(std::ostream& os, errc c) { return os << to_string(c); }
inline std::ostream& boost_test_print_type(std::ostream& os, dtype t) { return os << to_string(t); }
}  // namespace hetflow
