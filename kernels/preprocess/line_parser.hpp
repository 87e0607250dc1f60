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

// The fast path for the common line: every byte < 0x80, 40 fields, no field
// longer than max_field_bytes, integers as above. It parses the line that
// starts at p and returns the byte after its '\n'; for anything else it
// returns nullptr without saying why, and the caller hands the line to
// parse_criteo_line (which classifies it; a line the fast path refuses may
// still be good). What it accepts, it parses exactly as parse_criteo_line
// would. It reads up to fast_parse_read_bound(max_field_bytes) bytes from p,
// possibly past the line's '\n' (8 bytes at a time): the caller checks that
// they are mapped. Needs max_field_bytes >= fast_parse_min_field (the longest
// good decimal field), else use parse_criteo_line alone.
inline constexpr std::size_t fast_parse_min_field = 19;
constexpr std::size_t fast_parse_read_bound(std::size_t max_field_bytes) noexcept {
  return 14 * 21 + 26 * (max_field_bytes + 9) + 16;
}
inline const char* parse_criteo_line_fast(const char* p, std::size_t max_field_bytes, parsed_line& out) noexcept;

// DLRM's dense transform: missing -> 0, negatives -> 0, then log(x + 1).
inline float dense_transform(int64_t x) noexcept;

}  // namespace hetflow::kernels::preprocess

#include <cmath>
#include <cstring>

namespace hetflow::kernels::preprocess {
inline float dense_transform(int64_t x) noexcept {
  return static_cast<float>(std::log(static_cast<double>(x < 0 ? 0 : x) + 1.0));
}

namespace fast_parse {

inline uint64_t load8(const char* p) noexcept {
  uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}
inline constexpr uint64_t ones = 0x0101010101010101ull;
inline constexpr uint64_t highs = 0x8080808080808080ull;

// The value of the 8 decimal digits in w (byte 0 the most significant;
// bytes already minus '0'). Lemire, "Fast parsing of 8 digits" (2018).
inline uint64_t eight_digits(uint64_t d) noexcept {
  d = d * 10 + (d >> 8);  // byte 2i: the pair 2i, 2i+1
  return ((d & 0x000000ff000000ffull) * (100 + (1000000ull << 32)) +
          ((d >> 16) & 0x000000ff000000ffull) * (1 + (10000ull << 32))) >>
         32;
}

// Label or I1..I13 and its '\t': optional '-', 0..18 digits (0 only without
// the '-': the empty field). Reads at most 21 bytes.
inline bool decimal_field(const char*& p, int64_t& v, bool& missing) noexcept {
  const char* q = p;
  const bool neg = *q == '-';
  q += neg;
  // The digits before the first other byte, up to 7 of them, at once.
  const uint64_t w = load8(q);
  const uint64_t w7 = w & ~highs;
  const uint64_t digit = (w7 + 0x5050505050505050ull) & ~(w7 + 0x4646464646464646ull) & highs;
  const uint64_t other = (digit ^ highs) | (w & highs);
  uint64_t x;
  std::size_t n;
  if (other) {
    n = static_cast<std::size_t>(__builtin_ctzll(other)) >> 3;
    // The n digits to the top bytes, the rest shifted out (n = 0: all of it).
    x = eight_digits(((w & 0x0f0f0f0f0f0f0f0full) << 1) << (63 - 8 * n));
    q += n;
  } else {  // 8 digits or more: one at a time
    const char* d0 = q;
    x = 0;
    for (unsigned d; (d = static_cast<unsigned>(static_cast<unsigned char>(*q)) - '0') < 10;) {
      x = x * 10 + d;
      if (++q - d0 > 18) return false;
    }
    n = static_cast<std::size_t>(q - d0);
  }
  if (*q != '\t') return false;
  missing = n == 0;
  if (missing && neg) return false;
  v = neg ? -static_cast<int64_t>(x) : static_cast<int64_t>(x);
  p = q + 1;
  return true;
}

// The general case of string_field: one byte at a time.
inline bool string_field_bytes(const char*& p, char sep, std::size_t max_field, std::string_view& s) noexcept {
  const char* q = p;
  const char* last = p + max_field;
  while (*q != sep) {
    const unsigned char ch = static_cast<unsigned char>(*q);
    if (ch == '\t' || ch == '\n' || ch >= 0x80 || q == last) return false;
    ++q;
  }
  s = std::string_view(p, static_cast<std::size_t>(q - p));
  p = q + 1;
  return true;
}

// C1..C26 and its separator: bytes < 0x80 other than '\t' and '\n', at most
// max_field of them. Reads at most max_field + 9 bytes.
inline bool string_field(const char*& p, char sep, std::size_t max_field, std::string_view& s) noexcept {
  const uint64_t w = load8(p);
  // 0x80 in the lowest byte < 0x20 or >= 0x80 (exact for the lowest one).
  const uint64_t odd = ((w - ones * 0x20) | w) & highs;
  if (!odd) {  // 8 printable bytes; Criteo's hex ids end here
    if (p[8] == sep) {
      s = std::string_view(p, 8);
      p += 9;
      return true;
    }
  } else {
    const unsigned k = static_cast<unsigned>(__builtin_ctzll(odd)) >> 3;
    if (p[k] == sep) {
      s = std::string_view(p, k);
      p += k + 1;
      return true;
    }
  }
  return string_field_bytes(p, sep, max_field, s);  // longer, or a control byte other than sep
}

}  // namespace fast_parse

inline const char* parse_criteo_line_fast(const char* p, std::size_t max_field_bytes, parsed_line& out) noexcept {
  int64_t v;
  bool missing;
  if (!fast_parse::decimal_field(p, v, missing) || v < INT32_MIN || v > INT32_MAX) return nullptr;
  out.label = static_cast<int32_t>(v);
  for (int j = 0; j < dense_columns; ++j) {
    if (!fast_parse::decimal_field(p, out.dense[j], missing)) return nullptr;
    out.dense_missing[j] = missing;
  }
  for (int c = 0; c < sparse_columns - 1; ++c)
    if (!fast_parse::string_field(p, '\t', max_field_bytes, out.sparse[c])) return nullptr;
  if (!fast_parse::string_field(p, '\n', max_field_bytes, out.sparse[sparse_columns - 1])) return nullptr;
  return p;
}

}  // namespace hetflow::kernels::preprocess
