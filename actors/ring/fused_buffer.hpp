// fused_buffer: the caller's tensors of one bucket, seen as one logical
// vector of elements, and the ring's element-wise kernels on it.
//
// Borrowed memory: the pieces belong to the caller (a trainer's gradients)
// and must stay alive and untouched until the collective completes. No
// packing copy: a chunk that spans two tensors is read from / written to
// both pieces.
//
// Kernels are plain loops the compiler vectorises (this file's .cpp is
// built with -O3); a chunk of 16 MiB or more is also split across oneTBB
// workers. Integer sums use unsigned arithmetic: exact, wrapping on
// overflow, identical on every member. Not thread-safe: one collective
// uses it from one thread at a time (the actor's, or in shared-memory
// mode the ring member's worker while the actor waits for its result).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "actors/ring/ring_schedule.hpp"

namespace hetflow::actors::ring {

class fused_buffer {
public:
  fused_buffer() = default;
  // `pieces` are byte spans of whole elements of `type`, in order.
  fused_buffer(ring_dtype type, std::vector<std::span<std::byte>> pieces);

  ring_dtype type() const noexcept { return type_; }
  uint64_t size() const noexcept { return offsets_.empty() ? 0 : offsets_.back(); }

  // message <- local[r]
  void copy_out(elem_range r, std::byte* dst) const;
  // local[r] <- message
  void copy_in(elem_range r, const std::byte* src);
  // out <- local[r] + recv  (a partial sum travelling on; local unchanged)
  void add_out(elem_range r, const std::byte* recv, std::byte* out) const;
  // local[r] <- out <- finish(local[r] + recv): the final value of a chunk,
  // divided by `members` for average.
  void add_final(elem_range r, const std::byte* recv, std::byte* out, reduce_op op,
                 uint32_t members);

private:
  template <class F>
  void for_each_piece(elem_range r, F&& f) const;

  ring_dtype type_ = ring_dtype::f32;
  std::vector<std::span<std::byte>> pieces_;
  std::vector<uint64_t> offsets_;  // offsets_[i] = first element of piece i; back() = size
};

// The kernels, on contiguous memory (exposed for tests and benchmarks).
// out[i] = a[i] + b[i]
void add_elems(ring_dtype t, std::byte* out, const std::byte* a, const std::byte* b, uint64_t n);
// out1[i] = out2[i] = (a[i] + b[i]) [/ members]; out2 may be null.
void add_final_elems(ring_dtype t, reduce_op op, uint32_t members, std::byte* out1,
                     std::byte* out2, const std::byte* a, const std::byte* b, uint64_t n);

}  // namespace hetflow::actors::ring
