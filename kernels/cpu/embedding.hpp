// Embedding bags with sparse gradients (oneTBB over bags).
//
// A bag is a run of indices [offsets[b], offsets[b+1]) (the last bag ends at
// `index_count`); its output row is the sum or the mean of those table rows.
// The gradient of the table is sparse: only the rows that occur.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/unit.hpp"
#include "schemas/error.hpp"

namespace hetflow::kernels::cpu {

enum class bag_pooling : uint8_t { sum, mean };

struct embedding_bag_args {
  const float* table = nullptr;   // (rows, dim)
  int64_t rows = 0, dim = 0;
  std::span<const int64_t> indices;
  std::span<const int64_t> offsets;  // one per bag, non-decreasing, offsets[0] == 0
  bag_pooling pooling = bag_pooling::sum;
};

// out: (bags, dim). errc::invalid_argument for an index outside the table or
// bad offsets (naming the bag and index).
status embedding_bag_forward(const embedding_bag_args& a, float* out);

// dout: (bags, dim). Fills grad.rows with the distinct rows used (ascending)
// and grad.values (rows.size(), dim) with their summed gradients. Assumes
// the arguments passed embedding_bag_forward.
void embedding_bag_backward(const embedding_bag_args& a, const float* dout, sparse_rows& grad);

}  // namespace hetflow::kernels::cpu
