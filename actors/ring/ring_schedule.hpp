// ring_schedule: the pure arithmetic of a bandwidth-optimal ring all-reduce.
// No CAF, no I/O: a test calls it directly.
//
// N members, ranks 0..N-1 in ring order; rank r sends only to its right
// neighbour (r+1) and receives only from its left (r-1). A collective over
// `len` elements splits them into N segments (balanced: the first len % N
// segments hold one element more; segments may be empty), and each segment
// into chunks of `chunk_elems` elements (the last one shorter).
//
//   reduce-scatter, step s = 0..N-2      all-gather, step s = 0..N-2
//     send segment (r - s)     mod N       send segment (r + 1 - s) mod N
//     recv segment (r - s - 1) mod N       recv segment (r - s)     mod N
//     local += recv                        local  = recv
//
//   N = 3, after reduce-scatter rank r owns the full sum of segment r+1:
//
//            step 0          step 1           all-gather 0      all-gather 1
//   r0  -- seg0 -->  r1  -- seg2+0 --> r2       r2 -- seg0 --> r0 -- seg0 --> r1
//   r1  -- seg1 -->  r2  -- seg0+1 --> r0       r0 -- seg1 --> r1 -- seg1 --> r2
//   r2  -- seg2 -->  r0  -- seg1+2 --> r1       r1 -- seg2 --> r2 -- seg2 --> r0
//
// Pipelining is per chunk: chunk c of a segment moves to the next step as
// soon as chunk c of the previous step arrived, independently of the other
// chunks, so every link carries several chunks at once and a member reduces
// chunk c while chunk c+1 is on the wire.
//
// Every member computes the final value of exactly one segment and the
// others copy it, so all members end with bit-identical results even for
// floats (whose sum depends on the order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace hetflow::actors::ring {

// Element types a ring reduces. f64 is not a codec dtype (schemas/dtype.hpp
// has no f64): its chunks travel as u8 bytes, typed by the ring header.
enum class ring_dtype : uint8_t { f32 = 0, f64 = 1, i32 = 2, i64 = 3 };
// sum: exact on integers (two's complement, wrapping on overflow).
// average: sum / N, floats only.
enum class reduce_op : uint8_t { sum = 0, average = 1 };

constexpr std::size_t element_size(ring_dtype t) noexcept {
  return (t == ring_dtype::f32 || t == ring_dtype::i32) ? 4 : 8;
}
constexpr bool is_float(ring_dtype t) noexcept {
  return t == ring_dtype::f32 || t == ring_dtype::f64;
}
const char* to_string(ring_dtype t) noexcept;
const char* to_string(reduce_op op) noexcept;
std::optional<ring_dtype> parse_ring_dtype(std::string_view s) noexcept;
std::optional<reduce_op> parse_reduce_op(std::string_view s) noexcept;

// Half-open element range [begin, end).
struct elem_range {
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t size() const noexcept { return end - begin; }
  bool operator==(const elem_range&) const = default;
};

// Segment g (0 <= g < n) of a vector of `len` elements.
elem_range segment_range(uint64_t len, uint32_t n, uint32_t g) noexcept;
// Chunks of a segment: ceil(size / chunk_elems); 0 for an empty segment.
uint64_t chunk_count(elem_range seg, uint64_t chunk_elems) noexcept;
// Chunk c of a segment (absolute element indices).
elem_range chunk_range(elem_range seg, uint64_t chunk_elems, uint64_t c) noexcept;
// Elements per chunk for a byte budget: at least 1.
uint64_t chunk_elems_for(uint64_t chunk_bytes, ring_dtype t) noexcept;

// The schedule of rank r (see the diagram above).
inline uint32_t mod_n(int64_t x, uint32_t n) noexcept {
  int64_t m = x % static_cast<int64_t>(n);
  return static_cast<uint32_t>(m < 0 ? m + n : m);
}
inline uint32_t rs_send_segment(uint32_t r, uint32_t n, uint32_t s) noexcept { return mod_n(int64_t(r) - s, n); }
inline uint32_t rs_recv_segment(uint32_t r, uint32_t n, uint32_t s) noexcept { return mod_n(int64_t(r) - s - 1, n); }
inline uint32_t ag_send_segment(uint32_t r, uint32_t n, uint32_t s) noexcept { return mod_n(int64_t(r) + 1 - s, n); }
inline uint32_t ag_recv_segment(uint32_t r, uint32_t n, uint32_t s) noexcept { return mod_n(int64_t(r) - s, n); }
// The segment rank r owns (holds fully reduced) after reduce-scatter.
inline uint32_t owned_segment(uint32_t r, uint32_t n) noexcept { return mod_n(int64_t(r) + 1, n); }
// The step at which rank r receives segment g; nothing if it never does
// (reduce-scatter never brings segment r, all-gather never segment r+1).
std::optional<uint32_t> rs_step_of(uint32_t r, uint32_t n, uint32_t g) noexcept;
std::optional<uint32_t> ag_step_of(uint32_t r, uint32_t n, uint32_t g) noexcept;

// Chunk messages rank r receives in one collective (both phases).
uint64_t expected_receives(uint64_t len, uint32_t n, uint32_t r, uint64_t chunk_elems) noexcept;
// Bytes each member sends in one collective, as NCCL-tests count "bus"
// traffic: 2 (N-1)/N * len * element size.
double bus_bytes(uint64_t len, uint32_t n, ring_dtype t) noexcept;

// --- gradient buckets ----------------------------------------------------------

struct tensor_desc {
  ring_dtype type = ring_dtype::f32;
  uint64_t elems = 0;
};

// One collective: consecutive tensors of one dtype, reduced as if they were
// one vector (no packing copy: see fused_buffer).
struct bucket {
  ring_dtype type = ring_dtype::f32;
  std::vector<std::size_t> tensors;  // indices into the request, in order
  uint64_t elems = 0;
};

// Fuses consecutive tensors of the same dtype while the bucket stays within
// `bucket_bytes`; a tensor larger than that is a bucket of its own (the ring
// chunks it anyway). bucket_bytes == 0: one bucket per tensor. Every member
// computes the same buckets from the same request.
std::vector<bucket> plan_buckets(std::span<const tensor_desc> tensors, uint64_t bucket_bytes);

}  // namespace hetflow::actors::ring
