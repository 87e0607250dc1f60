#include "kernels/preprocess/line_parser.hpp"

#include <emmintrin.h>

#include <cstring>
#include <string>

namespace hetflow::kernels::preprocess {
namespace {

bool has_high_bit(std::string_view s) noexcept {
  const char* p = s.data();
  std::size_t n = s.size(), i = 0;
  uint64_t acc = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    acc |= w;
  }
  for (; i < n; ++i) acc |= static_cast<unsigned char>(p[i]);
  return (acc & 0x8080808080808080ull) != 0;
}

// Optional '-', then 1..18 digits: always fits int64.
inline bool parse_int(std::string_view f, int64_t& v) noexcept {
  std::size_t i = 0;
  bool neg = false;
  if (!f.empty() && f[0] == '-') {
    neg = true;
    i = 1;
  }
  std::size_t digits = f.size() - i;
  if (digits == 0 || digits > 18) return false;
  int64_t x = 0;
  for (; i < f.size(); ++i) {
    unsigned d = static_cast<unsigned char>(f[i]) - '0';
    if (d > 9) return false;
    x = x * 10 + d;
  }
  v = neg ? -x : x;
  return true;
}

}  // namespace

bool valid_utf8(std::string_view s) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  std::size_t n = s.size(), i = 0;
  while (i < n) {
    unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
      cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (std::size_t k = 1; k < len; ++k) {
      unsigned cc = p[i + k];
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) return false;
    if (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) return false;
    i += len;
  }
  return true;
}

parse_error parse_criteo_line(std::string_view line, std::size_t max_field_bytes,
                              parsed_line& out) {
  // One pass over the line for tabs and high bytes, 16 bytes at a time
  // (SSE2); the tail of the line (under 16 bytes) byte by byte, so we never
  // read past it. Only lines with a byte >= 0x80 are checked for UTF-8, and
  // that check comes first whatever else is wrong (malformed.hpp's order).
  // Raw (uninitialised) bounds: a string_view array would be zeroed per line.
  struct field_ref {
    const char* at;
    std::size_t len;
  };
  auto bad_utf8 = [&] { return has_high_bit(line) && !valid_utf8(line); };
  field_ref fields[criteo_fields];
  const char* p = line.data();
  const std::size_t size = line.size();
  std::size_t start = 0, i = 0;
  int n = 0;
  const __m128i tab = _mm_set1_epi8('\t');
  __m128i high = _mm_setzero_si128();
  unsigned tail_high = 0;
  for (; i + 16 <= size; i += 16) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    high = _mm_or_si128(high, v);
    unsigned mask = static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(v, tab)));
    while (mask) {
      std::size_t at = i + static_cast<std::size_t>(__builtin_ctz(mask));
      mask &= mask - 1;
      if (n == criteo_fields - 1) {
        if (bad_utf8()) return {malformed_kind::invalid_utf8, -1};
        return {malformed_kind::field_count, -1};
      }
      fields[n++] = {p + start, at - start};
      start = at + 1;
    }
  }
  for (; i < size; ++i) {
    tail_high |= static_cast<unsigned char>(p[i]);
    if (p[i] != '\t') continue;
    if (n == criteo_fields - 1) {
      if (bad_utf8()) return {malformed_kind::invalid_utf8, -1};
      return {malformed_kind::field_count, -1};
    }
    fields[n++] = {p + start, i - start};
    start = i + 1;
  }
  if (((tail_high & 0x80) || _mm_movemask_epi8(high)) && !valid_utf8(line))
    return {malformed_kind::invalid_utf8, -1};
  fields[n++] = {p + start, size - start};
  if (n != criteo_fields) return {malformed_kind::field_count, -1};
  for (int f = 0; f < criteo_fields; ++f) {
    std::string_view s(fields[f].at, fields[f].len);
    if (s.size() > max_field_bytes) return {malformed_kind::field_too_long, f};
    if (f <= dense_columns) {
      int64_t v = 0;
      bool missing = s.empty();
      if (!missing && !parse_int(s, v)) return {malformed_kind::bad_integer, f};
      if (f == 0) {
        if (v < INT32_MIN || v > INT32_MAX) return {malformed_kind::bad_integer, 0};
        out.label = static_cast<int32_t>(v);
      } else {
        out.dense[f - 1] = v;
        out.dense_missing[f - 1] = missing;
      }
    } else {
      out.sparse[f - 1 - dense_columns] = s;
    }
  }
  return {};
}

std::string describe_parse_error(std::string_view line, const parse_error& e) {
  auto quoted = [](std::string_view s) {
    std::string q = "\"";
    std::size_t n = std::min<std::size_t>(s.size(), 40);
    q.append(s.data(), n);
    if (s.size() > n) q += "...";
    return q + "\"";
  };
  switch (e.kind) {
    case malformed_kind::field_count: {
      std::size_t fields = 1;
      for (char c : line) fields += c == '\t';
      return std::to_string(fields) + " tab-separated field" + (fields == 1 ? "" : "s") +
             ", want " + std::to_string(criteo_fields);
    }
    case malformed_kind::invalid_utf8: return "the line is not valid UTF-8";
    case malformed_kind::truncated:
      return "the last line has no newline (file truncated?)";
    case malformed_kind::field_too_long:
    case malformed_kind::bad_integer: {
      std::string_view f = line;
      for (int i = 0; i < e.field; ++i) f = f.substr(f.find('\t') + 1);
      f = f.substr(0, f.find('\t'));
      if (e.kind == malformed_kind::field_too_long)
        return field_name(e.field) + " is " + std::to_string(f.size()) + " bytes long: " + quoted(f);
      return field_name(e.field) + " is " + quoted(f) + ", not an integer" +
             (e.field == 0 ? " (int32)" : " (at most 18 digits)");
    }
    case malformed_kind::none: break;
  }
  return {};
}

}  // namespace hetflow::kernels::preprocess
