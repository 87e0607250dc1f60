#include "kernels/cpu/interaction.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "kernels/cpu/parallel.hpp"

namespace hetflow::kernels::cpu {

void dot_interaction_forward(const float* t, int64_t n, int64_t f, int64_t d, float* z) {
  const int64_t pairs = interaction_pairs(f);
  parallel_range(n, std::max<int64_t>(1, serial_elements / std::max<int64_t>(pairs * d, 1)), [=](int64_t lo, int64_t hi) {
    for (int64_t s = lo; s < hi; ++s) {
      const float* ts = t + s * f * d;
      float* zs = z + s * pairs;
      int64_t k = 0;
      for (int64_t i = 1; i < f; ++i)
        for (int64_t j = 0; j < i; ++j) {
          const float* a = ts + i * d;
          const float* b = ts + j * d;
          float acc = 0.0f;
          for (int64_t x = 0; x < d; ++x) acc += a[x] * b[x];
          zs[k++] = acc;
        }
    }
  });
}

void dot_interaction_backward(const float* t, const float* dz, int64_t n, int64_t f, int64_t d, float* dt) {
  const int64_t pairs = interaction_pairs(f);
  parallel_range(n, std::max<int64_t>(1, serial_elements / std::max<int64_t>(pairs * d, 1)), [=](int64_t lo, int64_t hi) {
    for (int64_t s = lo; s < hi; ++s) {
      const float* ts = t + s * f * d;
      const float* g = dz + s * pairs;
      float* out = dt + s * f * d;
      std::memset(out, 0, sizeof(float) * std::size_t(f * d));
      int64_t k = 0;
      for (int64_t i = 1; i < f; ++i)
        for (int64_t j = 0; j < i; ++j) {
          const float w = g[k++];
          const float* a = ts + i * d;
          const float* b = ts + j * d;
          float* da = out + i * d;
          float* db = out + j * d;
          for (int64_t x = 0; x < d; ++x) {
            da[x] += w * b[x];
            db[x] += w * a[x];
          }
        }
    }
  });
}

void concat_rows(std::span<const float* const> parts, std::span<const int64_t> widths, int64_t n, float* out) {
  const int64_t total = std::accumulate(widths.begin(), widths.end(), int64_t{0});
  parallel_range(n, std::max<int64_t>(1, serial_elements / std::max<int64_t>(total, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      float* o = out + r * total;
      for (std::size_t k = 0; k < parts.size(); ++k) {
        std::memcpy(o, parts[k] + r * widths[k], sizeof(float) * std::size_t(widths[k]));
        o += widths[k];
      }
    }
  });
}

void split_rows(const float* in, std::span<const int64_t> widths, int64_t n, std::span<float* const> parts) {
  const int64_t total = std::accumulate(widths.begin(), widths.end(), int64_t{0});
  parallel_range(n, std::max<int64_t>(1, serial_elements / std::max<int64_t>(total, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const float* i = in + r * total;
      for (std::size_t k = 0; k < parts.size(); ++k) {
        std::memcpy(parts[k] + r * widths[k], i, sizeof(float) * std::size_t(widths[k]));
        i += widths[k];
      }
    }
  });
}

}  // namespace hetflow::kernels::cpu
