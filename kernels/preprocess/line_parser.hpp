// line_parser: one Criteo text line -> label, 13 integers, 26 strings.
//
// The line excludes its '\n'. Fields are split on '\t' only; a '\r' is a byte
// like any other (it makes an integer field malformed). Checks, in order:
//   invalid_utf8   (only lines with a byte >= 0x80 are validated: fast path)
//   field_count    exactly 40 fields
//   field_too_long a field longer than max_field_bytes
//   bad_integer    label and I1..I13: optional '-' then 1..18 digits, or empty;
//                  the label must fit int32
// Strings stay views into the line (no copy).
#pragma once

#include <cstdint>
#include <string_view>

#include "kernels/preprocess/criteo_record.hpp"
#include "kernels/preprocess/malformed.hpp"

namespace hetflow::kernels::preprocess {

struct parsed_line {
  int32_t label = 0;                  // empty label -> 0
  int64_t dense[dense_columns] = {};  // empty -> 0 (dense_missing says so)
  bool dense_missing[dense_columns] = {};
  std::string_view sparse[sparse_columns];  // empty = missing (a string like any other)
};

struct parse_error {
  malformed_kind kind = malformed_kind::none;
  int field = -1;  // 0-based field, -1 when the whole line
  explicit operator bool() const noexcept { return kind != malformed_kind::none; }
};

parse_error parse_criteo_line(std::string_view line, std::size_t max_field_bytes, parsed_line& out);

// Detail text for a report ("field 7 (I6) is \"12x\"", "39 fields, want 40").
std::string describe_parse_error(std::string_view line, const parse_error& e);

// True if s is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool valid_utf8(std::string_view s) noexcept;

// DLRM's dense transform: missing -> 0, negatives -> 0, then log(x + 1).
inline float dense_transform(int64_t x) noexcept;

}  // namespace hetflow::kernels::preprocess

#include <cmath>

namespace hetflow::kernels::preprocess {
inline float dense_transform(int64_t x) noexcept {
  return static_cast<float>(std::log(static_cast<double>(x < 0 ? 0 : x) + 1.0));
}
}  // namespace hetflow::kernels::preprocess
