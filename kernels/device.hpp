// device: where a tensor lives and where a unit runs.
//
// This is the backend seam: `cpu` is oneDNN + oneTBB (kernels/cpu/), `cuda`
// is cuDNN/cuBLAS + our own .cu kernels in the dlopen'ed module
// (kernels/cuda/). Building a model for a cuda device returns
// errc::unsupported, saying why, where that module, a driver or the device
// is missing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace hetflow::kernels {

enum class device_kind : uint8_t { cpu = 0, cuda = 1 };

struct device {
  device_kind kind = device_kind::cpu;
  int index = 0;  // cuda ordinal; 0 for cpu

  static constexpr device cpu() noexcept { return {device_kind::cpu, 0}; }
  static constexpr device cuda(int ordinal) noexcept { return {device_kind::cuda, ordinal}; }

  friend constexpr bool operator==(const device&, const device&) noexcept = default;

  // "cpu", "cuda:1"
  std::string to_string() const;
};

// Parses "cpu", "cuda", "cuda:N".
std::optional<device> parse_device(std::string_view text);

}  // namespace hetflow::kernels
