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
// possibly past the line's '\n' (64 bytes at a time; the longest good line
// plus 63 is under the bound): the caller makes sure they are readable
// (parse_block: each block read into a buffer padded by that bound).
// Needs max_field_bytes >= fast_parse_min_field (the longest good decimal
// field), else use parse_criteo_line alone.
inline constexpr std::size_t fast_parse_min_field = 19;
constexpr std::size_t fast_parse_read_bound(std::size_t max_field_bytes) noexcept {
  return 14 * 21 + 26 * (max_field_bytes + 9) + 16;
}
inline const char* parse_criteo_line_fast(const char* p, std::size_t max_field_bytes, parsed_line& out) noexcept;

// DLRM's dense transform: missing -> 0, negatives -> 0, then log(x + 1).
inline float dense_transform(int64_t x) noexcept;

}  // namespace hetflow::kernels::preprocess

#include <emmintrin.h>

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
inline constexpr uint64_t highs = 0x8080808080808080ull;
inline constexpr uint64_t low_nibbles = 0x0f0f0f0f0f0f0f0full;
// The lowest n bytes of a word, n = 0..8.
inline constexpr uint64_t low_bytes[9] = {0,           0xff,          0xffff,          0xffffff,         0xffffffff,
                                          0xffffffffff, 0xffffffffffff, 0xffffffffffffff, ~uint64_t{0}};

// The value of the 8 decimal digits in w (byte 0 the most significant;
// bytes already minus '0'). Lemire, "Fast parsing of 8 digits" (2018).
inline uint64_t eight_digits(uint64_t d) noexcept {
  d = d * 10 + (d >> 8);  // byte 2i: the pair 2i, 2i+1
  return ((d & 0x000000ff000000ffull) * (100 + (1000000ull << 32)) +
          ((d >> 16) & 0x000000ff000000ffull) * (1 + (10000ull << 32))) >>
         32;
}

// 0x80 in every byte of w that is not an ASCII digit.
inline uint64_t not_digits(uint64_t w) noexcept {
  const uint64_t w7 = w & ~highs;  // + below cannot carry into the next byte
  return ~((w7 + 0x5050505050505050ull) & ~(w7 + 0x4646464646464646ull) & ~w) & highs;
}

// The field [s, s + n) as label or I1..I13: optional '-', then 0..18 digits
// (0 only without the '-': the empty field). Reads at most 8 bytes past the
// field; s[0] is readable even when n is 0 (it is the separator). The
// common field (at most 8 digits) takes no branch on its bytes.
// Inlined: as a call (gcc did not inline it) the parse alone took 135 ns a
// row instead of 120 (1M generated rows, 2-core VM).
[[gnu::always_inline]] inline bool decimal(const char* s, std::size_t n, int64_t& v, bool& missing) noexcept {
  const bool neg = *s == '-';
  s += neg;
  n -= neg;
  missing = n == 0;
  uint64_t x;
  bool ok;
  if (__builtin_expect(n <= 8, 1)) {
    const uint64_t w = load8(s), m = low_bytes[n];
    ok = (not_digits(w) & m) == 0;
    // The n digits to the top bytes (n = 0: masked to 0, shift 0).
    x = eight_digits((w & low_nibbles & m) << ((64 - 8 * n) & 63));
  } else if (n <= 16) {
    const std::size_t h = n - 8;  // the first h digits, then 8
    const uint64_t w0 = load8(s), w1 = load8(s + h);
    ok = ((not_digits(w0) & low_bytes[h]) | not_digits(w1)) == 0;
    x = eight_digits((w0 & low_nibbles & low_bytes[h]) << (64 - 8 * h)) * 100000000ull +
        eight_digits(w1 & low_nibbles);
  } else {  // 17 or 18 digits: rare
    if (n > 18) return false;
    x = 0;
    ok = true;
    for (std::size_t i = 0; i < n; ++i) {
      const unsigned d = static_cast<unsigned>(static_cast<unsigned char>(s[i])) - '0';
      ok &= d < 10;
      x = x * 10 + d;
    }
  }
  v = static_cast<int64_t>(neg ? 0 - x : x);  // x is arbitrary when !ok: no signed overflow then either
  return ok & !(missing & neg);
}

// 64 bytes at w: bit i of each mask for byte w[i].
struct window {
  uint64_t tab, nl, high;
};
inline window scan64(const char* w) noexcept {
  const __m128i t = _mm_set1_epi8('\t'), n = _mm_set1_epi8('\n');
  window r{0, 0, 0};
  for (int k = 0; k < 4; ++k) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 16 * k));
    r.tab |= uint64_t{static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(v, t)))} << (16 * k);
    r.nl |= uint64_t{static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(v, n)))} << (16 * k);
    r.high |= uint64_t{static_cast<uint32_t>(_mm_movemask_epi8(v))} << (16 * k);
  }
  return r;
}

}  // namespace fast_parse

inline const char* parse_criteo_line_fast(const char* p, std::size_t max_field_bytes, parsed_line& out) noexcept {
  using namespace fast_parse;
  // Structure first, values second: the separators' offsets (every '\t' up
  // to the first '\n', which must be the 40th) come from 64-byte windows of
  // bit masks, so finding a field does not wait for the previous field's
  // bytes to be looked at; then the fields, each independent of the others.
  // A good line, '\n' included, is at most 14 * 20 + 26 * (max_field_bytes
  // + 1) bytes long: no window starts past that.
  const std::size_t longest = 14 * 20 + 26 * (max_field_bytes + 1);
  uint32_t pos[criteo_fields + 8];  // separator offsets; the flatten below writes up to 7 past the count
  std::size_t cnt = 0;
  for (uint32_t base = 0;; base += 64) {
    if (base >= longest) return nullptr;
    // The file is read once, front to back, and each 64 bytes here take
    // more instructions than the out-of-order window covers at memory
    // latency: without this the hardware prefetcher left the scan at about
    // 2.5 GB/s on the 2-core VM (a prefetch never faults).
    __builtin_prefetch(p + base + 1024);
    const window win = scan64(p + base);
    uint64_t sep = win.tab | win.nl;
    if (win.nl) {
      const uint64_t upto = win.nl ^ (win.nl - 1);  // bits through the first '\n'
      sep &= upto;
      if (win.high & upto) return nullptr;
    } else if (win.high) {
      return nullptr;
    }
    const std::size_t k = static_cast<std::size_t>(__builtin_popcountll(sep));
    if (cnt + k > criteo_fields) return nullptr;
    // 8 offsets a step; those past the last are overwritten or unused (the
    // top bit keeps ctz defined once sep is used up: 0 has no lowest bit).
    for (std::size_t i = cnt; sep; i += 8)
      for (int u = 0; u < 8; ++u) {
        pos[i + u] = base + static_cast<uint32_t>(__builtin_ctzll(sep | (uint64_t{1} << 63)));
        sep &= sep - 1;
      }
    cnt += k;
    if (win.nl) break;
  }
  if (cnt != criteo_fields) return nullptr;
  auto start = [&](int f) -> std::size_t { return f == 0 ? 0 : pos[f - 1] + 1; };
  auto size = [&](int f) -> std::size_t { return pos[f] - start(f); };
  int64_t v;
  bool missing;
  if (!decimal(p, pos[0], v, missing) || v < INT32_MIN || v > INT32_MAX) return nullptr;
  out.label = static_cast<int32_t>(v);
  bool ok = true;
  for (int j = 0; j < dense_columns; ++j)
    ok &= decimal(p + start(1 + j), size(1 + j), out.dense[j], out.dense_missing[j]);
  for (int c = 0; c < sparse_columns; ++c) {
    const int f = 1 + dense_columns + c;
    ok &= size(f) <= max_field_bytes;
    out.sparse[c] = std::string_view(p + start(f), size(f));
  }
  return ok ? p + pos[criteo_fields - 1] + 1 : nullptr;
}

}  // namespace hetflow::kernels::preprocess
