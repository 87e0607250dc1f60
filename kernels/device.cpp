#include "kernels/device.hpp"

#include <charconv>

namespace hetflow::kernels {

std::string device::to_string() const {
  if (kind == device_kind::cpu) return "cpu";
  return "cuda:" + std::to_string(index);
}

std::optional<device> parse_device(std::string_view text) {
  if (text == "cpu") return device::cpu();
  if (text == "cuda") return device::cuda(0);
  if (text.starts_with("cuda:")) {
    std::string_view rest = text.substr(5);
    int ordinal = -1;
    auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), ordinal);
    if (ec == std::errc{} && p == rest.data() + rest.size() && ordinal >= 0)
      return device::cuda(ordinal);
  }
  return std::nullopt;
}

}  // namespace hetflow::kernels
