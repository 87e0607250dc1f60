// huge_memory: big, short-lived arrays of the preprocess kernels on
// transparent huge pages.
//
// Pass 1's block buffers, the sort and merge arrays of a column and pass 2's
// id maps are tens of MiB that are allocated, filled once and freed. On
// 4 KiB pages every page of them costs a fault the first time it is touched
// (and a TLB entry after); on the 2-core PVM guest that fault costs ~7 us:
// writing 64 MiB of fresh 4 KiB pages took 110 ms there, of fresh 2 MiB
// pages 2-3 ms (/tmp test, 2026-12-06; MADV_POPULATE_WRITE first did not
// help the 4 KiB case: the first store still trapped). So from 256 KiB on
// these come from their own 2 MiB-aligned anonymous mapping with
// MADV_HUGEPAGE (the kernel's "madvise" THP mode, Debian's default, gives
// huge pages only to such ranges), smaller ones from operator new. Where the
// kernel has no huge page at hand it falls back to 4 KiB pages, as before.
// (From 1 MiB until 2026-12-06: the 2-node merge's per-column arrays of 256
// KiB - 1 MiB - most of Criteo's columns - then faulted in 4 KiB at a time,
// half of a 2-node 1M-row job's 11k page faults; from 256 KiB the job has
// 6k and the merge took 0.104-0.121 s instead of 0.155-0.171 s, 6 rounds of
// bench/preprocess/ab.sh. Peak RSS did not grow: a range is rounded up to 2
// MiB, but freed ranges are reused, column after column.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>
#include <vector>

namespace hetflow::kernels::preprocess {

inline constexpr std::size_t huge_page_bytes = std::size_t{2} << 20;
inline constexpr std::size_t huge_memory_from = std::size_t{256} << 10;

// What an allocation of n bytes takes here: whole 2 MiB pages from
// huge_memory_from on, else n.
constexpr std::size_t huge_bytes(std::size_t n) noexcept {
  return n >= huge_memory_from ? (n + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes : n;
}

// n bytes (n >= huge_memory_from): a 2 MiB-aligned range of n rounded up to
// 2 MiB. A range freed before (huge_unmap) is handed out again when one of
// that rounded size is kept, else the front of the smallest bigger one kept
// (the rest stays kept): its pages are already there, where a fresh
// mapping faults each 2 MiB in again, zeroed (the vocabulary merge asks for
// the same few sizes column after column: a fresh mapping each time made
// page faults and zeroing a quarter of the merge's CPU on the PVM guest,
// 2026-12-06). Its contents are then whatever was there. Throws
// std::bad_alloc.
void* huge_map(std::size_t n);
// Gives back huge_map(n): kept for reuse while the kept ranges total at most
// huge_keep_bytes, else unmapped. What is kept stays resident and is not
// counted in a job's memory_cap (which bounds the count tables), hence a
// small bound: the merge's arrays for 1M rows are a few MiB a column.
void huge_unmap(void* p, std::size_t n) noexcept;
inline constexpr std::size_t huge_keep_bytes = std::size_t{64} << 20;
// The ranges kept for reuse, in bytes (tests).
std::size_t huge_kept_bytes() noexcept;
// Unmaps every range kept for reuse (tests: a known start).
void huge_release_kept() noexcept;

// A std allocator: huge_map from huge_memory_from bytes on.
template <class T>
struct huge_allocator {
  using value_type = T;
  huge_allocator() = default;
  template <class U>
  huge_allocator(const huge_allocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    if (bytes >= huge_memory_from) return static_cast<T*>(huge_map(bytes));
    return static_cast<T*>(::operator new(bytes));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    const std::size_t bytes = n * sizeof(T);
    if (bytes >= huge_memory_from) huge_unmap(p, bytes);
    else ::operator delete(p);
  }
  template <class U>
  bool operator==(const huge_allocator<U>&) const noexcept { return true; }
  template <class U>
  bool operator!=(const huge_allocator<U>&) const noexcept { return false; }
};

template <class T>
using big_vector = std::vector<T, huge_allocator<T>>;

// Uninitialised bytes, reused: grows (contents not kept), never shrinks.
class huge_buffer {
public:
  huge_buffer() = default;
  huge_buffer(huge_buffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), cap_(std::exchange(o.cap_, 0)) {}
  huge_buffer& operator=(huge_buffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      cap_ = std::exchange(o.cap_, 0);
    }
    return *this;
  }
  ~huge_buffer() { release(); }
  // At least n bytes (16-byte aligned); the contents are not kept.
  char* reserve(std::size_t n) {
    if (n <= cap_) return p_;
    release();
    n = huge_bytes(n);
    p_ = huge_allocator<char>().allocate(n);
    cap_ = n;
    return p_;
  }
  char* data() const noexcept { return p_; }
  std::size_t capacity() const noexcept { return cap_; }

private:
  void release() noexcept {
    if (p_) huge_allocator<char>().deallocate(p_, cap_);
    p_ = nullptr;
    cap_ = 0;
  }
  char* p_ = nullptr;
  std::size_t cap_ = 0;
};

}  // namespace hetflow::kernels::preprocess
