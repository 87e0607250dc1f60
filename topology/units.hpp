// units: the size and duration spellings a topology file accepts.
//
// Sizes (bytes):      "<number>[ ]<unit>"  e.g. "4GiB", "512 MiB", "1.5KiB", "100B", "4096"
//   units (case-insensitive): B; KiB MiB GiB TiB (powers of 1024);
//                             KB MB GB TB (powers of 1000); no unit = bytes.
//   The number may have a fraction; the result is rounded to the nearest byte.
// Durations (seconds): one or more "<number><unit>" parts, e.g. "60s", "200ms",
//   "2m", "1h", "1m30s", "1.5s", "250 ms".
//   units (case-sensitive): ns us ms s m min h. A bare number without a unit is
//   refused (is "60" seconds or milliseconds?); TOML numbers are seconds, see
//   the parser.
// Neither accepts a sign: sizes and durations are never negative.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "schemas/error.hpp"

namespace hetflow::topology {

// Errors are errc::parse_error with a message that says which forms are accepted.
expected<uint64_t> parse_size(std::string_view text);
expected<double> parse_duration(std::string_view text);

// Human-readable forms for messages: "16 MiB", "1.5 GiB", "100 B"; "200ms", "60s".
std::string format_size(uint64_t bytes);
std::string format_duration(double seconds);

// The accepted-forms sentences used in error messages (shared with the parser).
extern const char* const size_forms_help;
extern const char* const duration_forms_help;

}  // namespace hetflow::topology
