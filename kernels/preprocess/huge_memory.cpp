#include "kernels/preprocess/huge_memory.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <mutex>

namespace hetflow::kernels::preprocess {
namespace {

struct kept_ranges {
  std::mutex mu;
  std::multimap<std::size_t, void*> by_size;  // whole-page size -> range
  std::size_t bytes = 0;
};
kept_ranges& kept() {
  static kept_ranges* k = new kept_ranges;  // never destroyed: huge_unmap may run at exit
  return *k;
}

}  // namespace

void* huge_map(std::size_t n) {
  const std::size_t bytes = huge_bytes(std::max(n, huge_memory_from));
  {
    auto& k = kept();
    std::lock_guard<std::mutex> g(k.mu);
    // The last one kept of that size (equal keys keep their insertion
    // order): its pages were touched last. Else the front of the smallest
    // bigger one, the rest kept: pass 1's block ranges (4 MiB) are then
    // the merge's arrays (2 MiB and up), where a fresh mapping's pages on
    // the PVM guest are ~1 ms a MiB against ~0.05 for pages touched
    // before (2026-12-07; with exact sizes only, the 2-node merge took
    // 0.09-0.12 s instead of 0.07 once pass 1's ranges were 4 MiB).
    if (auto [first, last] = k.by_size.equal_range(bytes); first != last) {
      const auto it = std::prev(last);
      void* p = it->second;
      k.by_size.erase(it);
      k.bytes -= bytes;
      return p;
    }
    if (auto bigger = k.by_size.upper_bound(bytes); bigger != k.by_size.end()) {
      const std::size_t have = bigger->first;
      const auto it = std::prev(k.by_size.upper_bound(have));  // of that size, the last kept
      char* p = static_cast<char*>(it->second);
      k.by_size.erase(it);
      k.bytes -= have;
      try {
        k.by_size.emplace(have - bytes, p + bytes);
        k.bytes += have - bytes;
      } catch (...) {
        ::munmap(p + bytes, have - bytes);
      }
      return p;
    }
  }
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

void huge_unmap(void* p, std::size_t n) noexcept {
  const std::size_t bytes = huge_bytes(std::max(n, huge_memory_from));
  {
    auto& k = kept();
    std::lock_guard<std::mutex> g(k.mu);
    if (k.bytes + bytes <= huge_keep_bytes) {
      try {
        k.by_size.emplace(bytes, p);
        k.bytes += bytes;
        return;
      } catch (...) {
        // no memory for the node: unmap it below
      }
    }
  }
  ::munmap(p, bytes);
}

std::size_t huge_kept_bytes() noexcept {
  auto& k = kept();
  std::lock_guard<std::mutex> g(k.mu);
  return k.bytes;
}

void huge_release_kept() noexcept {
  auto& k = kept();
  std::lock_guard<std::mutex> g(k.mu);
  for (auto& [bytes, p] : k.by_size) ::munmap(p, bytes);
  k.by_size.clear();
  k.bytes = 0;
}

}  // namespace hetflow::kernels::preprocess
