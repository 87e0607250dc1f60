#include "kernels/preprocess/malformed.hpp"

#include <cstdio>

namespace hetflow::kernels::preprocess {

const char* to_string(malformed_kind k) noexcept {
  switch (k) {
    case malformed_kind::none: return "none";
    case malformed_kind::field_count: return "field_count";
    case malformed_kind::bad_integer: return "bad_integer";
    case malformed_kind::field_too_long: return "field_too_long";
    case malformed_kind::invalid_utf8: return "invalid_utf8";
    case malformed_kind::truncated: return "truncated";
  }
  return "?";
}

std::string field_name(int field) {
  if (field < 0) return "the line";
  std::string n = "field " + std::to_string(field + 1) + " (";
  if (field == 0) return n + "label)";
  if (field <= 13) return n + "I" + std::to_string(field) + ")";
  return n + "C" + std::to_string(field - 13) + ")";
}

std::string malformed_example::to_string() const {
  return file + ":" + std::to_string(line) + ": " + preprocess::to_string(kind) + ": " + detail;
}

void malformed_report::merge(const malformed_report& other, std::size_t max_examples) {
  total += other.total;
  for (int i = 0; i < malformed_kinds; ++i) by_kind[i] += other.by_kind[i];
  for (auto& e : other.examples) {
    if (examples.size() >= max_examples) break;
    examples.push_back(e);
  }
}

namespace {
void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      // Reports quote raw input: escape everything outside printable ASCII so
      // the JSON stays valid whatever the bytes were.
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}
}  // namespace

std::string malformed_report::to_json() const {
  std::string o = "{\"total\":" + std::to_string(total);
  for (int i = 1; i < malformed_kinds; ++i)
    o += ",\"" + std::string(preprocess::to_string(static_cast<malformed_kind>(i))) + "\":" +
         std::to_string(by_kind[i]);
  o += ",\"examples\":[";
  for (std::size_t i = 0; i < examples.size(); ++i) {
    auto& e = examples[i];
    if (i) o += ',';
    o += "{\"file\":";
    json_string(o, e.file);
    o += ",\"line\":" + std::to_string(e.line) + ",\"kind\":\"" + preprocess::to_string(e.kind) +
         "\",\"detail\":";
    json_string(o, e.detail);
    o += '}';
  }
  o += "]}";
  return o;
}

}  // namespace hetflow::kernels::preprocess
