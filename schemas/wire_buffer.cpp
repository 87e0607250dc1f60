#include "schemas/wire_buffer.hpp"

#include <sys/mman.h>

namespace hetflow {

void advise_huge_pages(void* p, std::size_t bytes) noexcept {
  (void)madvise(p, bytes, MADV_HUGEPAGE);
}

}  // namespace hetflow
