#include "kernels/loss.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/parallel.hpp"

namespace hetflow::kernels {

expected<loss_result> softmax_cross_entropy(tensor_view logits, std::span<const int32_t> labels,
                                            mutable_tensor_view grad) {
  HF_RETURN_IF_ERROR(check_softmax_cross_entropy(logits, labels, grad));
  const int64_t n = logits.shape()[0], c = logits.shape()[1];
  if (n == 0) return loss_result{};
  const float* z = logits.f32();
  float* g = grad.empty() ? nullptr : grad.f32();
  const float inv_n = 1.0f / float(n);
  // Per-chunk partial sums summed in order: the same result for any thread count.
  const int64_t rows_per_chunk = std::max<int64_t>(1, cpu::serial_elements / std::max<int64_t>(c, 1));
  const int64_t chunks = (n + rows_per_chunk - 1) / rows_per_chunk;
  // Typical batches make one chunk: keep the partials on the stack then.
  constexpr int64_t stack_chunks = 16;
  double loss_stack[stack_chunks];
  int64_t correct_stack[stack_chunks];
  std::vector<double> loss_heap;
  std::vector<int64_t> correct_heap;
  double* loss_part = loss_stack;
  int64_t* correct_part = correct_stack;
  if (chunks > stack_chunks) {
    loss_heap.resize(std::size_t(chunks));
    correct_heap.resize(std::size_t(chunks));
    loss_part = loss_heap.data();
    correct_part = correct_heap.data();
  }
  cpu::parallel_range(chunks, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t ch = cb; ch < ce; ++ch) {
      double loss = 0.0;
      int64_t correct = 0;
      for (int64_t r = ch * rows_per_chunk; r < std::min(n, (ch + 1) * rows_per_chunk); ++r) {
        const float* row = z + r * c;
        int64_t arg = 0;
        float mx = row[0];
        for (int64_t j = 1; j < c; ++j)
          if (row[j] > mx) {
            mx = row[j];
            arg = j;
          }
        float sum = 0.0f;
        for (int64_t j = 0; j < c; ++j) sum += std::exp(row[j] - mx);
        const int32_t y = labels[std::size_t(r)];
        loss += double(std::log(sum) + mx - row[y]);
        correct += arg == y;
        if (g) {
          float* grow = g + r * c;
          const float inv_sum = 1.0f / sum;
          for (int64_t j = 0; j < c; ++j) grow[j] = std::exp(row[j] - mx) * inv_sum * inv_n;
          grow[y] -= inv_n;
        }
      }
      loss_part[ch] = loss;
      correct_part[ch] = correct;
    }
  });
  loss_result res;
  for (int64_t ch = 0; ch < chunks; ++ch) {
    res.loss += loss_part[ch];
    res.correct += correct_part[ch];
  }
  res.loss /= double(n);
  return res;
}

}  // namespace hetflow::kernels
