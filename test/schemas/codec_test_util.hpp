// Helpers shared by the codec suites.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "schemas/tensor_codec.hpp"
#include "test_printing.hpp"

namespace hetflow::schemas::test {

inline constexpr dtype all_dtypes[] = {dtype::f32, dtype::f16, dtype::bf16,
                                       dtype::i32, dtype::i64, dtype::u8};

// Deterministic, position- and seed-dependent bytes (never all zero).
inline void fill_pattern(std::span<std::byte> out, uint32_t seed) {
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = std::byte((i * 131u + seed * 17u + (i >> 8)) & 0xff);
}

inline std::vector<std::byte> pattern(std::size_t n, uint32_t seed) {
  std::vector<std::byte> v(n);
  fill_pattern(v, seed);
  return v;
}

inline wire_buffer_ref share(wire_buffer b) {
  return std::make_shared<const wire_buffer>(std::move(b));
}

inline wire_buffer copy_of(std::span<const std::byte> bytes) {
  wire_buffer b(bytes.size());
  if (!bytes.empty()) std::memcpy(b.data(), bytes.data(), bytes.size());
  return b;
}

inline bool inside(std::span<const std::byte> part, const wire_buffer& whole) {
  auto* b = whole.data();
  return part.data() >= b && part.data() + part.size() <= b + whole.size();
}

}  // namespace hetflow::schemas::test
