// Elementwise kernels of the cpu backend (oneTBB + vectorisable loops).
// All pointers address n floats; in-place use (out == in) is allowed where
// the parameter names say so.
#pragma once

#include <cstdint>

namespace hetflow::kernels::cpu {

// y = max(x, 0); y may alias x.
void relu_forward(const float* x, float* y, int64_t n);
// dx = dy where y > 0 else 0 (y is the relu output); dx may alias dy.
void relu_backward(const float* dy, const float* y, float* dx, int64_t n);
// out = a + b; out may alias a or b.
void add(const float* a, const float* b, float* out, int64_t n);
// out = a * b; out may alias a or b.
void multiply(const float* a, const float* b, float* out, int64_t n);
// y += alpha * x
void axpy(float alpha, const float* x, float* y, int64_t n);
// Sum over rows of a row-major (rows, cols) matrix into out (cols).
void sum_rows(const float* x, int64_t rows, int64_t cols, float* out);

}  // namespace hetflow::kernels::cpu
