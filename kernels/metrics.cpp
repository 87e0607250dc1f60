#include "kernels/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace hetflow::kernels {

double roc_auc(std::span<const float> scores, std::span<const int32_t> labels) {
  const std::size_t n = scores.size();
  if (labels.size() != n) return -1.0;
  // NaN sorts lowest: std::sort needs a strict weak order.
  auto key = [&](uint32_t i) {
    const float s = scores[i];
    return std::isnan(s) ? -std::numeric_limits<float>::infinity() : s;
  };
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), uint32_t{0});
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return key(a) < key(b); });
  // Sum of the positives' 1-based ranks, each run of equal scores getting
  // the run's average rank.
  double rank_sum = 0.0;
  int64_t positives = 0;
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i;
    int64_t pos_in_run = 0;
    while (j < n && key(order[j]) == key(order[i])) pos_in_run += labels[order[j++]] == 1 ? 1 : 0;
    rank_sum += double(pos_in_run) * (double(i + 1) + double(j)) / 2.0;
    positives += pos_in_run;
    i = j;
  }
  const int64_t negatives = int64_t(n) - positives;
  if (positives == 0 || negatives == 0) return -1.0;
  const double p = double(positives);
  return (rank_sum - p * (p + 1.0) / 2.0) / (p * double(negatives));
}

}  // namespace hetflow::kernels
