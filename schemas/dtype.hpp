// Element types of tensors on the wire and in kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace hetflow {

enum class dtype : uint8_t { f32 = 0, f16 = 1, bf16 = 2, i32 = 3, i64 = 4, u8 = 5 };

constexpr std::size_t dtype_size(dtype t) noexcept {
  switch (t) {
    case dtype::f32: return 4;
    case dtype::f16: return 2;
    case dtype::bf16: return 2;
    case dtype::i32: return 4;
    case dtype::i64: return 8;
    case dtype::u8: return 1;
  }
  return 0;
}

const char* to_string(dtype t) noexcept;              // "f32", ...
std::optional<dtype> parse_dtype(std::string_view s) noexcept;

}  // namespace hetflow
