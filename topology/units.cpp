#include "topology/units.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>

namespace hetflow::topology {

const char* const size_forms_help =
    "sizes are a number and a unit, e.g. \"4GiB\", \"512 MiB\" or \"100B\" (units B, KiB, MiB, "
    "GiB, TiB = powers of 1024; KB, MB, GB, TB = powers of 1000), or an integer number of bytes";
const char* const duration_forms_help =
    "durations are a number and a unit, e.g. \"60s\", \"200ms\", \"2m\", \"1h\" or \"1m30s\" "
    "(units ns, us, ms, s, m or min, h), or a TOML number of seconds";

namespace {

bool is_space(char c) { return c == ' ' || c == '\t'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A non-negative decimal "123" or "1.25" at the front of `s`; advances `s`.
struct decimal {
  uint64_t whole = 0;
  bool whole_overflow = false;
  std::string_view fraction;  // digits after '.', may be empty
  bool has_point = false;
  long double value() const {
    long double v = static_cast<long double>(whole);
    long double scale = 0.1L;
    for (char c : fraction) {
      v += scale * (c - '0');
      scale /= 10;
    }
    return v;
  }
};

bool read_decimal(std::string_view& s, decimal& out) {
  size_t i = 0;
  while (i < s.size() && is_digit(s[i])) {
    uint64_t d = static_cast<uint64_t>(s[i] - '0');
    if (out.whole > (std::numeric_limits<uint64_t>::max() - d) / 10) out.whole_overflow = true;
    else out.whole = out.whole * 10 + d;
    ++i;
  }
  if (i == 0) return false;
  if (i < s.size() && s[i] == '.') {
    size_t j = i + 1;
    while (j < s.size() && is_digit(s[j])) ++j;
    if (j == i + 1) return false;  // "4." is not a number
    out.has_point = true;
    out.fraction = s.substr(i + 1, j - i - 1);
    i = j;
  }
  s.remove_prefix(i);
  return true;
}

std::string_view read_word(std::string_view& s) {
  size_t i = 0;
  while (i < s.size() && is_alpha(s[i])) ++i;
  auto w = s.substr(0, i);
  s.remove_prefix(i);
  return w;
}

void skip_spaces(std::string_view& s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
}

status size_error(std::string_view text, const std::string& what) {
  return make_error(errc::parse_error,
                    "bad size \"" + std::string(text) + "\": " + what + "; " + size_forms_help);
}

status duration_error(std::string_view text, const std::string& what) {
  return make_error(errc::parse_error, "bad duration \"" + std::string(text) + "\": " + what +
                                           "; " + duration_forms_help);
}

}  // namespace

expected<uint64_t> parse_size(std::string_view text) {
  std::string_view s = trim(text);
  if (s.empty()) return size_error(text, "it is empty");
  if (s.front() == '-') return size_error(text, "sizes cannot be negative");
  decimal num;
  if (!read_decimal(s, num)) return size_error(text, "it does not start with a number");
  skip_spaces(s);
  std::string_view unit = read_word(s);
  skip_spaces(s);
  if (!s.empty())
    return size_error(text, "unexpected \"" + std::string(s) + "\" after the " +
                                (unit.empty() ? "number" : "unit"));
  uint64_t mult = 0;
  const std::string u = lower(unit);
  if (u.empty() || u == "b") mult = 1;
  else if (u == "kib") mult = 1ull << 10;
  else if (u == "mib") mult = 1ull << 20;
  else if (u == "gib") mult = 1ull << 30;
  else if (u == "tib") mult = 1ull << 40;
  else if (u == "kb") mult = 1000ull;
  else if (u == "mb") mult = 1000ull * 1000;
  else if (u == "gb") mult = 1000ull * 1000 * 1000;
  else if (u == "tb") mult = 1000ull * 1000 * 1000 * 1000;
  else return size_error(text, "unknown unit \"" + std::string(unit) + "\"");

  constexpr uint64_t max_bytes = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (num.whole_overflow) return size_error(text, "it is too large");
  if (!num.has_point) {
    if (num.whole > max_bytes / mult) return size_error(text, "it is too large");
    return num.whole * mult;
  }
  long double bytes = std::nearbyintl(num.value() * static_cast<long double>(mult));
  // 2^63 is exactly representable; anything at or above it does not fit int64.
  if (!(bytes < 9223372036854775808.0L)) return size_error(text, "it is too large");
  return static_cast<uint64_t>(bytes);
}

expected<double> parse_duration(std::string_view text) {
  std::string_view s = trim(text);
  if (s.empty()) return duration_error(text, "it is empty");
  if (s.front() == '-') return duration_error(text, "durations cannot be negative");
  long double total = 0;
  bool first = true;
  while (!s.empty()) {
    decimal num;
    if (!read_decimal(s, num)) {
      return duration_error(text, first ? "it does not start with a number"
                                        : "unexpected \"" + std::string(s) + "\"");
    }
    skip_spaces(s);
    std::string_view unit = read_word(s);
    long double scale = 0;
    if (unit.empty()) {
      return duration_error(text, first && s.empty() ? "it has no unit (seconds? milliseconds?)"
                                                     : "a number has no unit");
    }
    if (unit == "ns") scale = 1e-9L;
    else if (unit == "us") scale = 1e-6L;
    else if (unit == "ms") scale = 1e-3L;
    else if (unit == "s") scale = 1;
    else if (unit == "m" || unit == "min") scale = 60;
    else if (unit == "h") scale = 3600;
    else return duration_error(text, "unknown unit \"" + std::string(unit) + "\"");
    if (num.whole_overflow) return duration_error(text, "it is too large");
    total += num.value() * scale;
    skip_spaces(s);
    first = false;
  }
  double out = static_cast<double>(total);
  if (!std::isfinite(out) || out > 1e15) return duration_error(text, "it is too large");
  return out;
}

std::string format_size(uint64_t bytes) {
  static constexpr const char* names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int k = 0;
  uint64_t unit = 1;
  while (k < 6 && bytes >= unit * 1024) {
    unit *= 1024;
    ++k;
  }
  char buf[64];
  if (bytes % unit == 0) {
    std::snprintf(buf, sizeof buf, "%llu %s", static_cast<unsigned long long>(bytes / unit),
                  names[k]);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s", static_cast<double>(bytes) / static_cast<double>(unit),
                  names[k]);
  }
  return buf;
}

std::string format_duration(double seconds) {
  char buf[64];
  if (seconds != 0 && seconds < 1e-3) std::snprintf(buf, sizeof buf, "%gus", seconds * 1e6);
  else if (seconds != 0 && seconds < 1) std::snprintf(buf, sizeof buf, "%gms", seconds * 1e3);
  else std::snprintf(buf, sizeof buf, "%gs", seconds);
  return buf;
}

}  // namespace hetflow::topology
