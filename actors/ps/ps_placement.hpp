// ps_placement: which parameter-server shard holds which parameter tensor.
// A pure function (no CAF): every node computes the same placement from the
// same model, so workers and shards agree without a message.
//
// Sparse tensors (embedding tables, pushed and pulled by rows) are split by
// rows across every shard: shard k holds rows [k*R/S, (k+1)*R/S) of each
// table. A table of any size then fits (each shard holds 1/S of it), and the
// rows a batch touches spread over the shards, so no shard serves every
// embedding pull.
//
// Dense tensors are whole, placed after the sparse slices: largest first
// (ties: lower index first), each to the shard with the fewest bytes so far
// (ties: lower shard). LPT scheduling: the largest shard holds at most the
// mean plus the largest dense tensor, and at most 4/3 of the optimum for the
// dense part. TODO(perf): row ranges for large dense tensors too.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace hetflow::ps {

// Rows [row_begin, row_end) of sparse tensor `tensor`.
struct piece {
  int tensor = 0;
  int64_t row_begin = 0, row_end = 0;
  int64_t rows() const noexcept { return row_end - row_begin; }
};

struct placement {
  std::vector<int> shard_of;                  // per tensor, in model order; -1: sparse (see pieces_of)
  std::vector<std::vector<int>> tensors_of;   // per shard, dense tensor indices ascending
  std::vector<std::vector<piece>> pieces_of;  // per shard, one piece per sparse tensor, in tensor order
  std::vector<int64_t> bytes_of;              // per shard
};

// `shards` >= 1. `sparse_rows`: per tensor, its rows when it is sparse, 0 when
// dense (empty: every tensor dense). Shards may stay empty when there are
// fewer tensors.
placement place_by_bytes(std::span<const int64_t> tensor_bytes, int shards,
                         std::span<const int64_t> sparse_rows = {});

}  // namespace hetflow::ps
