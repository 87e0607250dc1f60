#include "kernels/cpu/elementwise.hpp"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/parallel.hpp"

namespace hetflow::kernels::cpu {

void relu_forward(const float* x, float* y, int64_t n) {
  parallel_elements(n, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  });
}

void relu_backward(const float* dy, const float* y, float* dx, int64_t n) {
  parallel_elements(n, [=](int64_t b, int64_t e) {
    // Load dy unconditionally: a conditional load does not vectorise, and a
    // branch mispredicts on real activations (half positive, at random).
    for (int64_t i = b; i < e; ++i) {
      const float g = dy[i];
      dx[i] = y[i] > 0.0f ? g : 0.0f;
    }
  });
}

void add(const float* a, const float* b, float* out, int64_t n) {
  parallel_elements(n, [=](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) out[i] = a[i] + b[i];
  });
}

void multiply(const float* a, const float* b, float* out, int64_t n) {
  parallel_elements(n, [=](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) out[i] = a[i] * b[i];
  });
}

void axpy(float alpha, const float* x, float* y, int64_t n) {
  parallel_elements(n, [=](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) y[i] += alpha * x[i];
  });
}

void sum_rows(const float* x, int64_t rows, int64_t cols, float* out) {
  // Columns are independent: split them, stream over rows (row-major reads).
  int64_t grain = std::max<int64_t>(16, serial_elements / std::max<int64_t>(rows, 1));
  parallel_range(cols, grain, [=](int64_t lo, int64_t hi) {
    std::memset(out + lo, 0, sizeof(float) * std::size_t(hi - lo));
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = x + r * cols;
      for (int64_t c = lo; c < hi; ++c) out[c] += row[c];
    }
  });
}

}  // namespace hetflow::kernels::cpu
