// Deterministic random numbers that are identical on every platform and
// standard library (std::*_distribution is not), so that every node of a
// cluster initialises the same weights and draws the same synthetic data
// from the same seed.
#pragma once

#include <cmath>
#include <cstdint>

namespace hetflow::kernels {

// splitmix64: one 64-bit hash step. Also a counter-based generator:
// mix(seed ^ index) is a good independent value per (seed, index).
constexpr uint64_t splitmix64(uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) from 24 high bits.
constexpr float to_unit_float(uint64_t bits) noexcept {
  return float(bits >> 40) * (1.0f / 16777216.0f);
}

class rng {
public:
  explicit constexpr rng(uint64_t seed) noexcept : state_(seed) {}

  constexpr uint64_t next() noexcept {
    state_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // [0, 1)
  constexpr float uniform() noexcept { return to_unit_float(next()); }
  // [lo, hi)
  constexpr float uniform(float lo, float hi) noexcept { return lo + (hi - lo) * uniform(); }
  // [0, n), n > 0 (slightly biased for huge n; fine for shuffling and ids).
  constexpr uint64_t below(uint64_t n) noexcept { return next() % n; }
  // Standard normal (Box-Muller).
  float normal() noexcept {
    float u1 = uniform();
    float u2 = uniform();
    if (u1 < 1e-12f) u1 = 1e-12f;
    return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853071795864f * u2);
  }

private:
  uint64_t state_;
};

}  // namespace hetflow::kernels
