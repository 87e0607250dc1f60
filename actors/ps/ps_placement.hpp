// ps_placement: which parameter-server shard holds which parameter tensor.
// A pure function (no CAF): every node computes the same placement from the
// same model, so workers and shards agree without a message.
//
// Rule: largest tensor first (ties: lower index first), each to the shard
// with the fewest bytes so far (ties: lower shard). LPT scheduling: the
// largest shard holds at most the mean plus the largest tensor, and at most
// 4/3 of the optimum. Tensors are whole (a tensor larger than a shard's fair
// share is not split yet: TODO(perf) row ranges, as sparse tables will need).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace hetflow::ps {

struct placement {
  std::vector<int> shard_of;                  // per tensor, in model order
  std::vector<std::vector<int>> tensors_of;   // per shard, tensor indices ascending
  std::vector<int64_t> bytes_of;              // per shard
};

// `shards` >= 1. Shards may stay empty when there are fewer tensors.
placement place_by_bytes(std::span<const int64_t> tensor_bytes, int shards);

}  // namespace hetflow::ps
