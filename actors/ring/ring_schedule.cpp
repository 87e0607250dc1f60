#include "actors/ring/ring_schedule.hpp"

#include <algorithm>

namespace hetflow::actors::ring {

const char* to_string(ring_dtype t) noexcept {
  switch (t) {
    case ring_dtype::f32: return "f32";
    case ring_dtype::f64: return "f64";
    case ring_dtype::i32: return "i32";
    case ring_dtype::i64: return "i64";
  }
  return "?";
}

const char* to_string(reduce_op op) noexcept {
  return op == reduce_op::sum ? "sum" : "average";
}

std::optional<ring_dtype> parse_ring_dtype(std::string_view s) noexcept {
  if (s == "f32") return ring_dtype::f32;
  if (s == "f64") return ring_dtype::f64;
  if (s == "i32") return ring_dtype::i32;
  if (s == "i64") return ring_dtype::i64;
  return std::nullopt;
}

std::optional<reduce_op> parse_reduce_op(std::string_view s) noexcept {
  if (s == "sum") return reduce_op::sum;
  if (s == "average" || s == "avg") return reduce_op::average;
  return std::nullopt;
}

elem_range segment_range(uint64_t len, uint32_t n, uint32_t g) noexcept {
  if (n == 0) return {};
  uint64_t base = len / n, extra = len % n;
  uint64_t begin = g * base + std::min<uint64_t>(g, extra);
  return {begin, begin + base + (g < extra ? 1 : 0)};
}

uint64_t chunk_count(elem_range seg, uint64_t chunk_elems) noexcept {
  if (chunk_elems == 0) return 0;
  return (seg.size() + chunk_elems - 1) / chunk_elems;
}

elem_range chunk_range(elem_range seg, uint64_t chunk_elems, uint64_t c) noexcept {
  uint64_t b = std::min(seg.end, seg.begin + c * chunk_elems);
  return {b, std::min(seg.end, b + chunk_elems)};
}

uint64_t chunk_elems_for(uint64_t chunk_bytes, ring_dtype t) noexcept {
  return std::max<uint64_t>(1, chunk_bytes / element_size(t));
}

std::optional<uint32_t> rs_step_of(uint32_t r, uint32_t n, uint32_t g) noexcept {
  if (n < 2 || g >= n) return std::nullopt;
  uint32_t s = mod_n(int64_t(r) - 1 - g, n);
  if (s > n - 2) return std::nullopt;
  return s;
}

std::optional<uint32_t> ag_step_of(uint32_t r, uint32_t n, uint32_t g) noexcept {
  if (n < 2 || g >= n) return std::nullopt;
  uint32_t s = mod_n(int64_t(r) - g, n);
  if (s > n - 2) return std::nullopt;
  return s;
}

uint64_t expected_receives(uint64_t len, uint32_t n, uint32_t r, uint64_t chunk_elems) noexcept {
  if (n < 2) return 0;
  uint64_t total = 0;
  for (uint32_t s = 0; s + 1 < n; ++s) {
    total += chunk_count(segment_range(len, n, rs_recv_segment(r, n, s)), chunk_elems);
    total += chunk_count(segment_range(len, n, ag_recv_segment(r, n, s)), chunk_elems);
  }
  return total;
}

double bus_bytes(uint64_t len, uint32_t n, ring_dtype t) noexcept {
  if (n == 0) return 0;
  return 2.0 * (n - 1) / n * static_cast<double>(len) * static_cast<double>(element_size(t));
}

std::vector<bucket> plan_buckets(std::span<const tensor_desc> tensors, uint64_t bucket_bytes) {
  std::vector<bucket> out;
  uint64_t cur_bytes = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    uint64_t bytes = t.elems * element_size(t.type);
    bool fits = !out.empty() && bucket_bytes > 0 && out.back().type == t.type &&
                cur_bytes + bytes <= bucket_bytes;
    if (!fits) {
      out.push_back(bucket{t.type, {}, 0});
      cur_bytes = 0;
    }
    out.back().tensors.push_back(i);
    out.back().elems += t.elems;
    cur_bytes += bytes;
  }
  return out;
}

}  // namespace hetflow::actors::ring
