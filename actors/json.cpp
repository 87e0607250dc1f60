#include "actors/json.hpp"

#include <cmath>
#include <cstdio>

namespace hetflow::actors {

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

void json_writer::comma() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
  }
}

json_writer& json_writer::begin_object() {
  comma();
  out_ += '{';
  first_.push_back(true);
  return *this;
}
json_writer& json_writer::end_object() {
  out_ += '}';
  first_.pop_back();
  return *this;
}
json_writer& json_writer::begin_array() {
  comma();
  out_ += '[';
  first_.push_back(true);
  return *this;
}
json_writer& json_writer::end_array() {
  out_ += ']';
  first_.pop_back();
  return *this;
}
json_writer& json_writer::key(std::string_view k) {
  comma();
  out_ += '"';
  out_ += json_escape(k);
  out_ += "\":";
  after_key_ = true;
  return *this;
}
json_writer& json_writer::value(std::string_view v) {
  comma();
  out_ += '"';
  out_ += json_escape(v);
  out_ += '"';
  return *this;
}
json_writer& json_writer::value(double v) {
  comma();
  if (!std::isfinite(v)) {
    out_ += "null";
  } else {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    out_ += buf;
  }
  return *this;
}
json_writer& json_writer::value(int64_t v) {
  comma();
  out_ += std::to_string(v);
  return *this;
}
json_writer& json_writer::value(uint64_t v) {
  comma();
  out_ += std::to_string(v);
  return *this;
}
json_writer& json_writer::value(bool v) {
  comma();
  out_ += v ? "true" : "false";
  return *this;
}
json_writer& json_writer::null() {
  comma();
  out_ += "null";
  return *this;
}
json_writer& json_writer::raw(std::string_view json) {
  comma();
  out_ += json;
  return *this;
}

}  // namespace hetflow::actors
