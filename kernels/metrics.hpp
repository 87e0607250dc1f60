// Evaluation metrics over a whole test set (plain functions, host data).
#pragma once

#include <cstdint>
#include <span>

namespace hetflow::kernels {

// ROC AUC of `scores` for binary `labels` (1: positive, anything else:
// negative): the probability that a random positive scores above a random
// negative, a tie counting one half (the Mann-Whitney statistic with average
// ranks for tied scores). O(n log n). -1 when the labels hold only one class
// (the AUC is undefined) or the spans differ in size.
double roc_auc(std::span<const float> scores, std::span<const int32_t> labels);

}  // namespace hetflow::kernels
