#include "topology/settings.hpp"

namespace hetflow::topology {

namespace {
template <class T>
const T* find_as(const std::map<std::string, setting_value, std::less<>>& values,
                 std::string_view key) {
  auto it = values.find(key);
  if (it == values.end()) return nullptr;
  return std::get_if<T>(&it->second);
}
}  // namespace

bool settings::get_bool(std::string_view key, bool fallback) const {
  const bool* v = find_as<bool>(values_, key);
  return v ? *v : fallback;
}

int64_t settings::get_int(std::string_view key, int64_t fallback) const {
  const int64_t* v = find_as<int64_t>(values_, key);
  return v ? *v : fallback;
}

double settings::get_number(std::string_view key, double fallback) const {
  if (const double* v = find_as<double>(values_, key)) return *v;
  if (const int64_t* v = find_as<int64_t>(values_, key)) return static_cast<double>(*v);
  return fallback;
}

std::string settings::get_string(std::string_view key, std::string fallback) const {
  const std::string* v = find_as<std::string>(values_, key);
  return v ? *v : fallback;
}

std::vector<std::string> settings::get_strings(std::string_view key) const {
  const auto* v = find_as<std::vector<std::string>>(values_, key);
  return v ? *v : std::vector<std::string>{};
}

std::vector<int64_t> settings::get_ints(std::string_view key) const {
  const auto* v = find_as<std::vector<int64_t>>(values_, key);
  return v ? *v : std::vector<int64_t>{};
}

}  // namespace hetflow::topology
