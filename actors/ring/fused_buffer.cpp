#include "actors/ring/fused_buffer.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace hetflow::actors::ring {
namespace {

// Below this, one thread: a oneTBB fork costs more than it saves, and the
// data plane's progress thread wants the other core.
constexpr uint64_t parallel_bytes = 16u << 20;
constexpr uint64_t grain_bytes = 1u << 20;

template <class F>
void maybe_parallel(uint64_t n, std::size_t esize, F&& f) {
  if (n * esize < parallel_bytes) return f(uint64_t{0}, n);
  uint64_t grain = grain_bytes / esize;
  tbb::parallel_for(tbb::blocked_range<uint64_t>(0, n, grain),
                    [&](const tbb::blocked_range<uint64_t>& br) { f(br.begin(), br.end()); });
}

template <class T>
void add_loop(T* __restrict out, const T* __restrict a, const T* __restrict b, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

// `a` may alias out1 (local += recv): no __restrict on it.
template <class T>
void add_final_loop(T* out1, T* __restrict out2, const T* a, const T* __restrict b, uint64_t n,
                    bool divide, T members) {
  if (divide) {
    if (out2)
      for (uint64_t i = 0; i < n; ++i) { T v = (a[i] + b[i]) / members; out1[i] = v; out2[i] = v; }
    else
      for (uint64_t i = 0; i < n; ++i) out1[i] = (a[i] + b[i]) / members;
  } else {
    if (out2)
      for (uint64_t i = 0; i < n; ++i) { T v = a[i] + b[i]; out1[i] = v; out2[i] = v; }
    else
      for (uint64_t i = 0; i < n; ++i) out1[i] = a[i] + b[i];
  }
}

template <class T>
void add_typed(std::byte* out, const std::byte* a, const std::byte* b, uint64_t n) {
  maybe_parallel(n, sizeof(T), [&](uint64_t lo, uint64_t hi) {
    add_loop(reinterpret_cast<T*>(out) + lo, reinterpret_cast<const T*>(a) + lo,
             reinterpret_cast<const T*>(b) + lo, hi - lo);
  });
}

template <class T>
void add_final_typed(bool divide, uint32_t members, std::byte* out1, std::byte* out2,
                     const std::byte* a, const std::byte* b, uint64_t n) {
  maybe_parallel(n, sizeof(T), [&](uint64_t lo, uint64_t hi) {
    add_final_loop(reinterpret_cast<T*>(out1) + lo,
                   out2 ? reinterpret_cast<T*>(out2) + lo : nullptr,
                   reinterpret_cast<const T*>(a) + lo, reinterpret_cast<const T*>(b) + lo,
                   hi - lo, divide, static_cast<T>(members));
  });
}

}  // namespace

void add_elems(ring_dtype t, std::byte* out, const std::byte* a, const std::byte* b, uint64_t n) {
  switch (t) {
    case ring_dtype::f32: return add_typed<float>(out, a, b, n);
    case ring_dtype::f64: return add_typed<double>(out, a, b, n);
    case ring_dtype::i32: return add_typed<uint32_t>(out, a, b, n);
    case ring_dtype::i64: return add_typed<uint64_t>(out, a, b, n);
  }
}

void add_final_elems(ring_dtype t, reduce_op op, uint32_t members, std::byte* out1,
                     std::byte* out2, const std::byte* a, const std::byte* b, uint64_t n) {
  bool divide = op == reduce_op::average && is_float(t);
  switch (t) {
    case ring_dtype::f32: return add_final_typed<float>(divide, members, out1, out2, a, b, n);
    case ring_dtype::f64: return add_final_typed<double>(divide, members, out1, out2, a, b, n);
    case ring_dtype::i32: return add_final_typed<uint32_t>(false, members, out1, out2, a, b, n);
    case ring_dtype::i64: return add_final_typed<uint64_t>(false, members, out1, out2, a, b, n);
  }
}

fused_buffer::fused_buffer(ring_dtype type, std::vector<std::span<std::byte>> pieces)
    : type_(type), pieces_(std::move(pieces)) {
  std::size_t es = element_size(type_);
  offsets_.reserve(pieces_.size() + 1);
  uint64_t off = 0;
  for (auto& p : pieces_) {
    if (p.size() % es != 0)
      throw std::invalid_argument("fused_buffer: a piece is not a whole number of elements");
    offsets_.push_back(off);
    off += p.size() / es;
  }
  offsets_.push_back(off);
}

// f(local bytes, byte offset within r, elements) for each piece overlapping r.
template <class F>
void fused_buffer::for_each_piece(elem_range r, F&& f) const {
  if (r.size() == 0) return;
  std::size_t es = element_size(type_);
  // First piece whose end is past r.begin.
  auto it = std::upper_bound(offsets_.begin(), offsets_.end() - 1, r.begin);
  std::size_t i = static_cast<std::size_t>(it - offsets_.begin()) - 1;
  for (; i < pieces_.size() && offsets_[i] < r.end; ++i) {
    uint64_t lo = std::max(r.begin, offsets_[i]);
    uint64_t hi = std::min(r.end, offsets_[i + 1]);
    if (hi <= lo) continue;
    f(pieces_[i].data() + (lo - offsets_[i]) * es, (lo - r.begin) * es, hi - lo);
  }
}

void fused_buffer::copy_out(elem_range r, std::byte* dst) const {
  std::size_t es = element_size(type_);
  for_each_piece(r, [&](std::byte* local, uint64_t off, uint64_t n) {
    std::memcpy(dst + off, local, n * es);
  });
}

void fused_buffer::copy_in(elem_range r, const std::byte* src) {
  std::size_t es = element_size(type_);
  for_each_piece(r, [&](std::byte* local, uint64_t off, uint64_t n) {
    std::memcpy(local, src + off, n * es);
  });
}

void fused_buffer::add_out(elem_range r, const std::byte* recv, std::byte* out) const {
  for_each_piece(r, [&](std::byte* local, uint64_t off, uint64_t n) {
    add_elems(type_, out + off, local, recv + off, n);
  });
}

void fused_buffer::add_final(elem_range r, const std::byte* recv, std::byte* out, reduce_op op,
                             uint32_t members) {
  for_each_piece(r, [&](std::byte* local, uint64_t off, uint64_t n) {
    add_final_elems(type_, op, members, local, out ? out + off : nullptr, local, recv + off, n);
  });
}

}  // namespace hetflow::actors::ring
