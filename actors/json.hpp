// A tiny JSON writer for reports (no parsing). Values are appended in order;
// the caller is responsible for matching begin/end.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hetflow::actors {

std::string json_escape(std::string_view s);

class json_writer {
public:
  json_writer& begin_object();
  json_writer& end_object();
  json_writer& begin_array();
  json_writer& end_array();
  json_writer& key(std::string_view k);
  json_writer& value(std::string_view v);
  json_writer& value(const char* v) { return value(std::string_view{v}); }
  json_writer& value(const std::string& v) { return value(std::string_view{v}); }
  json_writer& value(double v);
  json_writer& value(int64_t v);
  json_writer& value(uint64_t v);
  json_writer& value(int v) { return value(int64_t{v}); }
  json_writer& value(bool v);
  json_writer& null();
  // Inserts already-serialised JSON as a value.
  json_writer& raw(std::string_view json);

  template <class T>
  json_writer& field(std::string_view k, const T& v) {
    key(k);
    return value(v);
  }

  const std::string& str() const { return out_; }

private:
  void comma();
  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

}  // namespace hetflow::actors
