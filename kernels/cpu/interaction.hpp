// DLRM's dot interaction and row-wise concat (oneTBB over samples).
#pragma once

#include <cstdint>
#include <span>

namespace hetflow::kernels::cpu {

// Pairs kept by the interaction: F*(F-1)/2 (strictly lower triangle).
constexpr int64_t interaction_pairs(int64_t features) noexcept { return features * (features - 1) / 2; }

// t: (n, f, d) feature vectors per sample. z: (n, f*(f-1)/2) with, for
// i = 1..f-1 and j = 0..i-1 in that order, z = <t_i, t_j>.
void dot_interaction_forward(const float* t, int64_t n, int64_t f, int64_t d, float* z);
// dz: (n, pairs). dt: (n, f, d), overwritten.
void dot_interaction_backward(const float* t, const float* dz, int64_t n, int64_t f, int64_t d, float* dt);

// Row-wise concat of row-major matrices parts[k] (n, widths[k]) into
// out (n, sum widths).
void concat_rows(std::span<const float* const> parts, std::span<const int64_t> widths, int64_t n, float* out);
// The inverse: splits `in` (n, sum widths) into parts[k] (n, widths[k]).
void split_rows(const float* in, std::span<const int64_t> widths, int64_t n, std::span<float* const> parts);

}  // namespace hetflow::kernels::cpu
