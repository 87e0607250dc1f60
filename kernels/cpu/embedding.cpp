#include "kernels/cpu/embedding.hpp"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cpu/parallel.hpp"

namespace hetflow::kernels::cpu {
namespace {

int64_t bag_end(const embedding_bag_args& a, std::size_t b) {
  return b + 1 < a.offsets.size() ? a.offsets[b + 1] : int64_t(a.indices.size());
}

}  // namespace

status embedding_bag_forward(const embedding_bag_args& a, float* out) {
  const std::size_t bags = a.offsets.size();
  for (std::size_t b = 0; b < bags; ++b) {
    int64_t lo = a.offsets[b], hi = bag_end(a, b);
    if (lo < 0 || hi < lo || hi > int64_t(a.indices.size()) || (b == 0 && lo != 0))
      return make_error(errc::invalid_argument, "embedding_bag: bad offsets at bag " + std::to_string(b));
  }
  for (std::size_t i = 0; i < a.indices.size(); ++i)
    if (a.indices[i] < 0 || a.indices[i] >= a.rows)
      return make_error(errc::invalid_argument, "embedding_bag: index " + std::to_string(a.indices[i]) +
                                                    " at position " + std::to_string(i) + " is outside a table of " +
                                                    std::to_string(a.rows) + " rows");
  const int64_t dim = a.dim;
  parallel_range(int64_t(bags), std::max<int64_t>(1, serial_elements / std::max<int64_t>(dim, 1)),
                 [&](int64_t lo, int64_t hi) {
                   for (int64_t b = lo; b < hi; ++b) {
                     float* o = out + b * dim;
                     std::memset(o, 0, sizeof(float) * std::size_t(dim));
                     int64_t s = a.offsets[std::size_t(b)], e = bag_end(a, std::size_t(b));
                     for (int64_t i = s; i < e; ++i) {
                       const float* row = a.table + a.indices[std::size_t(i)] * dim;
                       for (int64_t j = 0; j < dim; ++j) o[j] += row[j];
                     }
                     if (a.pooling == bag_pooling::mean && e > s) {
                       float inv = 1.0f / float(e - s);
                       for (int64_t j = 0; j < dim; ++j) o[j] *= inv;
                     }
                   }
                 });
  return {};
}

void embedding_bag_backward(const embedding_bag_args& a, const float* dout, sparse_rows& grad) {
  // (row, position) pairs sorted by row: deterministic accumulation order.
  std::vector<std::pair<int64_t, int64_t>> uses(a.indices.size());
  std::vector<float> weight(a.indices.size(), 1.0f);
  std::vector<int64_t> bag_of(a.indices.size());
  for (std::size_t b = 0; b < a.offsets.size(); ++b) {
    int64_t s = a.offsets[b], e = bag_end(a, b);
    for (int64_t i = s; i < e; ++i) {
      bag_of[std::size_t(i)] = int64_t(b);
      if (a.pooling == bag_pooling::mean) weight[std::size_t(i)] = 1.0f / float(e - s);
    }
  }
  for (std::size_t i = 0; i < a.indices.size(); ++i) uses[i] = {a.indices[i], int64_t(i)};
  std::sort(uses.begin(), uses.end());
  grad.rows.clear();
  std::vector<std::size_t> starts;
  for (std::size_t i = 0; i < uses.size(); ++i)
    if (i == 0 || uses[i].first != uses[i - 1].first) {
      grad.rows.push_back(uses[i].first);
      starts.push_back(i);
    }
  starts.push_back(uses.size());
  const int64_t dim = a.dim;
  grad.values.resize({int64_t(grad.rows.size()), dim});
  float* g = grad.values.f32();
  parallel_range(int64_t(grad.rows.size()), std::max<int64_t>(1, serial_elements / std::max<int64_t>(dim, 1)),
                 [&](int64_t lo, int64_t hi) {
                   for (int64_t r = lo; r < hi; ++r) {
                     float* o = g + r * dim;
                     std::memset(o, 0, sizeof(float) * std::size_t(dim));
                     for (std::size_t u = starts[std::size_t(r)]; u < starts[std::size_t(r) + 1]; ++u) {
                       int64_t pos = uses[u].second;
                       const float* d = dout + bag_of[std::size_t(pos)] * dim;
                       const float w = weight[std::size_t(pos)];
                       for (int64_t j = 0; j < dim; ++j) o[j] += w * d[j];
                     }
                   }
                 });
}

}  // namespace hetflow::kernels::cpu
