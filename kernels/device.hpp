// device: where a tensor lives and where a unit runs.
//
// This is the backend seam. Today only `cpu` is implemented (oneDNN + oneTBB,
// kernels/cpu/). `cuda` is named so that tensors, specs, profiles and plans can
// already talk about GPUs; building a model for a cuda device returns
// errc::unsupported until kernels/cuda/ (cuDNN/cuBLAS + own .cu) exists.
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
