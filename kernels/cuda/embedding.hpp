// Inside libhetflow_cuda.so: embedding bags with sparse gradients
// (cpu/embedding.hpp's semantics), shared by the standalone op
// (context::embedding_bag_*) and the DLRM unit.
//
// The host checks ids and offsets and plans the backward: uses sorted by
// (row, position), the distinct rows ascending and where each row's uses
// start. The device then gathers (forward) and sums each row's uses in that
// fixed order (backward): deterministic, and the rows of the sparse gradient
// are known on the host without a device round trip.
#pragma once

#include <span>
#include <vector>

#include "kernels/cuda/cuda_context.hpp"

namespace hetflow::kernels::cuda {

struct bag_plan {
  std::vector<int64_t> starts;      // bags + 1
  std::vector<int64_t> rows;        // distinct rows, ascending
  std::vector<int64_t> row_start;   // rows + 1, into the sorted uses
  std::vector<int64_t> use_bag;     // per sorted use: its bag
  std::vector<float> use_weight;    // per sorted use: 1 or 1/bag size (mean)
};

// errc::invalid_argument naming the bag or index, like the cpu backend.
status check_bags(int64_t table_rows, std::span<const int64_t> indices, std::span<const int64_t> offsets);
// Fills the forward part (starts) and, when `backward`, the rest.
void plan_bags(std::span<const int64_t> indices, std::span<const int64_t> offsets, bool mean, bool backward,
               bag_plan& plan);

// Uploads indices and the plan's forward part, then gathers into
// out (bags, dim) with row stride out_ld.
status bag_forward(context_impl& ctx, bag_buffers& buf, const bag_plan& plan, std::span<const int64_t> indices,
                   const float* table, int64_t dim, bool mean, float* out, int64_t out_ld);
// Uploads the plan's backward part and sums dout (bags, dim; row stride
// dout_ld) into grad (rows from the plan, values on the device).
status bag_backward(context_impl& ctx, bag_buffers& buf, const bag_plan& plan, const float* dout, int64_t dout_ld,
                    int64_t dim, sparse_rows& grad);

}  // namespace hetflow::kernels::cuda
