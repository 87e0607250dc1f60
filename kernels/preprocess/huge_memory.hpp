// huge_memory: big, short-lived arrays of the preprocess kernels on
// transparent huge pages.
//
// Pass 1's block buffers, the sort and merge arrays of a column and pass 2's
// id maps are tens of MiB that are allocated, filled once and freed. On
// 4 KiB pages every page of them costs a fault the first time it is touched
// (and a TLB entry after); on the 2-core PVM guest that fault costs ~7 us:
// writing 64 MiB of fresh 4 KiB pages took 110 ms there, of fresh 2 MiB
// pages 2-3 ms (/tmp test, 2026-12-06; MADV_POPULATE_WRITE first did not
// help the 4 KiB case: the first store still trapped). So from 1 MiB on these
// come from their own 2 MiB-aligned anonymous mapping with MADV_HUGEPAGE (the
// kernel's "madvise" THP mode, Debian's default, gives huge pages only to
// such ranges), smaller ones from operator new. Where the kernel has no huge
// page at hand it falls back to 4 KiB pages, as before.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>
#include <vector>

namespace hetflow::kernels::preprocess {

inline constexpr std::size_t huge_page_bytes = std::size_t{2} << 20;
inline constexpr std::size_t huge_memory_from = std::size_t{1} << 20;

// n bytes (n >= huge_memory_from): a 2 MiB-aligned range of n rounded up to
// 2 MiB, its own mapping. Throws std::bad_alloc.
inline void* huge_map(std::size_t n) {
  const std::size_t bytes = (n + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes;
  void* m = ::mmap(nullptr, bytes + huge_page_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t at = (reinterpret_cast<uintptr_t>(m) + huge_page_bytes - 1) & ~uintptr_t{huge_page_bytes - 1};
  // The unaligned head and tail go back at once: the range is then exactly
  // [at, at + bytes), which huge_unmap(at, n) can compute.
  const std::size_t head = at - reinterpret_cast<uintptr_t>(m);
  if (head) ::munmap(m, head);
  if (huge_page_bytes - head) ::munmap(reinterpret_cast<void*>(at + bytes), huge_page_bytes - head);
  ::madvise(reinterpret_cast<void*>(at), bytes, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(at);
}
inline void huge_unmap(void* p, std::size_t n) noexcept {
  ::munmap(p, (n + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes);
}

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
    if (n >= huge_memory_from) n = (n + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes;
    p_ = huge_allocator<char>().allocate(n);
    cap_ = n;
    return p_;
  }
  char* data() const noexcept { return p_; }

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
