#include "actors/ps/ps_placement.hpp"

#include <algorithm>
#include <numeric>

namespace hetflow::ps {

placement place_by_bytes(std::span<const int64_t> tensor_bytes, int shards, std::span<const int64_t> sparse_rows) {
  shards = std::max(shards, 1);
  const auto S = std::size_t(shards);
  placement p;
  p.shard_of.assign(tensor_bytes.size(), 0);
  p.tensors_of.assign(S, {});
  p.pieces_of.assign(S, {});
  p.bytes_of.assign(S, 0);
  auto is_sparse = [&](std::size_t i) { return i < sparse_rows.size() && sparse_rows[i] > 0; };
  for (std::size_t i = 0; i < tensor_bytes.size(); ++i) {
    if (!is_sparse(i)) continue;
    p.shard_of[i] = -1;
    const int64_t R = sparse_rows[i], row_bytes = tensor_bytes[i] / R;
    for (std::size_t k = 0; k < S; ++k) {
      piece pc{int(i), R * int64_t(k) / shards, R * int64_t(k + 1) / shards};
      p.bytes_of[k] += pc.rows() * row_bytes;
      p.pieces_of[k].push_back(pc);
    }
  }
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < tensor_bytes.size(); ++i)
    if (!is_sparse(i)) order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return tensor_bytes[a] > tensor_bytes[b]; });
  for (std::size_t i : order) {
    auto least = std::min_element(p.bytes_of.begin(), p.bytes_of.end());
    const int s = int(least - p.bytes_of.begin());
    p.shard_of[i] = s;
    *least += tensor_bytes[i];
  }
  for (std::size_t i = 0; i < tensor_bytes.size(); ++i)
    if (p.shard_of[i] >= 0) p.tensors_of[std::size_t(p.shard_of[i])].push_back(int(i));
  return p;
}

}  // namespace hetflow::ps
