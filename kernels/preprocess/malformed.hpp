// malformed: what is wrong with an input line, and the report of all of them.
//
// Every malformed line is counted (per kind); the first `max_examples` (in
// input order within a shard) are kept with file, 1-based line number and a
// detail. Policy skip drops the line and goes on; fail stops at the first one.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace hetflow::kernels::preprocess {

enum class malformed_kind : uint8_t {
  none = 0,
  field_count,     // not 40 tab-separated fields (an empty line has 1)
  bad_integer,     // label or I1..I13 not a decimal integer (or out of range)
  field_too_long,  // a field longer than max_field_bytes
  invalid_utf8,    // bytes that are not UTF-8
  truncated,       // the file's last line has no '\n'
};
inline constexpr int malformed_kinds = 6;

const char* to_string(malformed_kind k) noexcept;

enum class malformed_policy : uint8_t { skip, fail };

struct malformed_example {
  std::string file;
  uint64_t line = 0;  // 1-based line number within `file`
  malformed_kind kind = malformed_kind::none;
  std::string detail;  // "field 7 (I6) is \"12x\"", ...

  // "data.tsv:17: bad_integer: field 7 (I6) is \"12x\""
  std::string to_string() const;
};

struct malformed_report {
  uint64_t total = 0;
  std::array<uint64_t, malformed_kinds> by_kind{};
  std::vector<malformed_example> examples;  // the first max_examples, input order

  // Appends `other` (a later part of the input): counts add, examples fill up
  // to max_examples.
  void merge(const malformed_report& other, std::size_t max_examples);
  // JSON object: {"total":..,"field_count":..,...,"examples":[{"file","line","kind","detail"}]}
  std::string to_json() const;
};

// "field 3 (I2)", "field 20 (C6)", "field 1 (label)"; field is 0-based.
std::string field_name(int field);

}  // namespace hetflow::kernels::preprocess
