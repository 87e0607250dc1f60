// settings: typed key/value pairs of a [job] table or an actor's args, already
// checked against the catalog's key_spec (so get_* of a declared key never fails
// on type). Sizes are bytes (int64), durations seconds (double), paths absolute.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace hetflow::topology {

using setting_value = std::variant<bool, int64_t, double, std::string, std::vector<std::string>,
                                   std::vector<int64_t>>;

class settings {
public:
  void set(std::string key, setting_value v) { values_[std::move(key)] = std::move(v); }
  bool contains(std::string_view key) const { return values_.find(key) != values_.end(); }

  // Each returns `fallback` when the key is absent or holds another type.
  bool get_bool(std::string_view key, bool fallback = false) const;
  int64_t get_int(std::string_view key, int64_t fallback = 0) const;  // integer, size
  double get_number(std::string_view key, double fallback = 0) const;  // number, duration, integer
  std::string get_string(std::string_view key, std::string fallback = {}) const;  // string, path
  std::vector<std::string> get_strings(std::string_view key) const;  // string_list, path_list
  std::vector<int64_t> get_ints(std::string_view key) const;         // size_list

  const std::map<std::string, setting_value, std::less<>>& values() const { return values_; }

  // Where a table key's field lives: "categorical" + "mode" -> "categorical.mode".
  static std::string field_key(std::string_view table, std::string_view field) {
    std::string k(table);
    k += '.';
    k += field;
    return k;
  }

private:
  std::map<std::string, setting_value, std::less<>> values_;
};

}  // namespace hetflow::topology
