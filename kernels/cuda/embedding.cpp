#include "kernels/cuda/embedding.hpp"

#include <algorithm>
#include <numeric>

#include "kernels/cuda/ops.hpp"
#include "kernels/cuda/units.hpp"

namespace hetflow::kernels::cuda {

status check_bags(int64_t table_rows, std::span<const int64_t> indices, std::span<const int64_t> offsets) {
  for (std::size_t b = 0; b < offsets.size(); ++b) {
    const int64_t lo = offsets[b], hi = b + 1 < offsets.size() ? offsets[b + 1] : int64_t(indices.size());
    if (lo < 0 || hi < lo || hi > int64_t(indices.size()) || (b == 0 && lo != 0))
      return make_error(errc::invalid_argument, "embedding_bag: bad offsets at bag " + std::to_string(b));
  }
  for (std::size_t i = 0; i < indices.size(); ++i)
    if (indices[i] < 0 || indices[i] >= table_rows)
      return make_error(errc::invalid_argument, "embedding_bag: index " + std::to_string(indices[i]) +
                                                    " at position " + std::to_string(i) + " is outside a table of " +
                                                    std::to_string(table_rows) + " rows");
  return {};
}

void plan_bags(std::span<const int64_t> indices, std::span<const int64_t> offsets, bool mean, bool backward,
               bag_plan& plan) {
  const std::size_t bags = offsets.size();
  plan.starts.assign(offsets.begin(), offsets.end());
  plan.starts.push_back(int64_t(indices.size()));
  if (!backward) return;
  std::vector<int64_t> bag_of(indices.size());
  std::vector<float> weight(indices.size(), 1.0f);
  for (std::size_t b = 0; b < bags; ++b)
    for (int64_t i = plan.starts[b]; i < plan.starts[b + 1]; ++i) {
      bag_of[std::size_t(i)] = int64_t(b);
      if (mean) weight[std::size_t(i)] = 1.0f / float(plan.starts[b + 1] - plan.starts[b]);
    }
  std::vector<int64_t> order(indices.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return indices[std::size_t(a)] != indices[std::size_t(b)] ? indices[std::size_t(a)] < indices[std::size_t(b)]
                                                              : a < b;
  });
  plan.rows.clear();
  plan.row_start.clear();
  plan.use_bag.resize(order.size());
  plan.use_weight.resize(order.size());
  for (std::size_t u = 0; u < order.size(); ++u) {
    const int64_t pos = order[u];
    if (u == 0 || indices[std::size_t(pos)] != indices[std::size_t(order[u - 1])]) {
      plan.rows.push_back(indices[std::size_t(pos)]);
      plan.row_start.push_back(int64_t(u));
    }
    plan.use_bag[u] = bag_of[std::size_t(pos)];
    plan.use_weight[u] = weight[std::size_t(pos)];
  }
  plan.row_start.push_back(int64_t(order.size()));
}

status bag_forward(context_impl& ctx, bag_buffers& buf, const bag_plan& plan, std::span<const int64_t> indices,
                   const float* table, int64_t dim, bool mean, float* out, int64_t out_ld) {
  HF_RETURN_IF_ERROR(ctx.activate());
  HF_RETURN_IF_ERROR(ctx.upload(indices.data(), indices.size_bytes(), buf.indices, dtype::i64,
                                int64_t(indices.size())));
  HF_RETURN_IF_ERROR(ctx.upload(plan.starts.data(), plan.starts.size() * sizeof(int64_t), buf.starts, dtype::i64,
                                int64_t(plan.starts.size())));
  const int64_t bags = int64_t(plan.starts.size()) - 1;
  HF_CUDA_CHECK(ops::embedding_bag_forward(table, dim, buf.indices.data<int64_t>(), buf.starts.data<int64_t>(), bags,
                                           mean, out, out_ld, ctx.stream()));
  return {};
}

status bag_backward(context_impl& ctx, bag_buffers& buf, const bag_plan& plan, const float* dout, int64_t dout_ld,
                    int64_t dim, sparse_rows& grad) {
  HF_RETURN_IF_ERROR(ctx.activate());
  HF_RETURN_IF_ERROR(ctx.upload(plan.use_bag.data(), plan.use_bag.size() * sizeof(int64_t), buf.use_bag,
                                dtype::i64, int64_t(plan.use_bag.size())));
  HF_RETURN_IF_ERROR(ctx.upload(plan.use_weight.data(), plan.use_weight.size() * sizeof(float), buf.use_weight,
                                dtype::f32, int64_t(plan.use_weight.size())));
  HF_RETURN_IF_ERROR(ctx.upload(plan.row_start.data(), plan.row_start.size() * sizeof(int64_t), buf.row_start,
                                dtype::i64, int64_t(plan.row_start.size())));
  grad.rows = plan.rows;
  HF_RETURN_IF_ERROR(sized(ctx, "embedding_bag backward", [&]() -> status {
    ensure(ctx, grad.values, shape{int64_t(plan.rows.size()), dim});
    return {};
  }));
  HF_CUDA_CHECK(ops::embedding_bag_backward(dout, dout_ld, dim, buf.use_bag.data<int64_t>(),
                                            buf.use_weight.f32(), buf.row_start.data<int64_t>(),
                                            int64_t(plan.rows.size()), grad.values.f32(), ctx.stream()));
  return {};
}

status context_impl::embedding_bag_forward(tensor_view table, std::span<const int64_t> indices,
                                           std::span<const int64_t> offsets, bool mean, mutable_tensor_view out) {
  if (table.shape().rank() != 2 || table.type() != dtype::f32)
    return make_error(errc::invalid_argument, "embedding_bag: table must be f32 (rows, dim)");
  HF_RETURN_IF_ERROR(check_here(table, "embedding_bag table"));
  HF_RETURN_IF_ERROR(check_here(out, "embedding_bag output"));
  const int64_t dim = table.shape()[1];
  if (out.numel() != int64_t(offsets.size()) * dim)
    return make_error(errc::invalid_argument, "embedding_bag: output must be (bags, dim)");
  HF_RETURN_IF_ERROR(check_bags(table.shape()[0], indices, offsets));
  bag_plan plan;
  plan_bags(indices, offsets, mean, false, plan);
  return bag_forward(*this, bag_scratch_, plan, indices, table.f32(), dim, mean, out.f32(), dim);
}

status context_impl::embedding_bag_backward(int64_t table_rows, std::span<const int64_t> indices,
                                            std::span<const int64_t> offsets, bool mean, tensor_view dout,
                                            sparse_rows& grad) {
  HF_RETURN_IF_ERROR(check_here(dout, "embedding_bag gradient"));
  if (dout.shape().rank() != 2 || dout.shape()[0] != int64_t(offsets.size()))
    return make_error(errc::invalid_argument, "embedding_bag: gradient must be (bags, dim)");
  HF_RETURN_IF_ERROR(check_bags(table_rows, indices, offsets));
  bag_plan plan;
  plan_bags(indices, offsets, mean, true, plan);
  const int64_t dim = dout.shape()[1];
  return bag_backward(*this, bag_scratch_, plan, dout.f32(), dim, dim, grad);
}

}  // namespace hetflow::kernels::cuda
