// buffer_pool: receive buffers that come back when their last reader drops
// them, so large tensors land in memory that is already faulted in (a fresh
// 64 MiB buffer costs ~16k page faults and the kernel zeroing every page:
// about a third of a 64 MiB shared-memory transfer).
//
// Thread-safe: allocate() runs on the data plane's progress thread, buffers
// die on actor threads.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

#include "schemas/wire_buffer.hpp"

namespace hetflow::actors {

class buffer_pool final : public wire_buffer::recycler,
                          public std::enable_shared_from_this<buffer_pool> {
public:
  // Buffers under `min_bytes` are not pooled; at most `max_cached_bytes` wait
  // for reuse (the rest are freed).
  static std::shared_ptr<buffer_pool> create(std::size_t min_bytes, std::size_t max_cached_bytes);
  ~buffer_pool() override;

  // A buffer of `bytes` bytes: a cached one whose capacity is within 2x, or
  // a new one. Throws std::bad_alloc like wire_buffer(bytes).
  wire_buffer allocate(std::size_t bytes);

  void recycle(std::byte* p, std::size_t capacity) noexcept override;

  std::size_t cached_bytes() const;
  std::size_t hits() const;

private:
  buffer_pool(std::size_t min_bytes, std::size_t max_cached_bytes)
      : min_bytes_(min_bytes), max_cached_bytes_(max_cached_bytes) {}

  const std::size_t min_bytes_;
  const std::size_t max_cached_bytes_;
  mutable std::mutex mu_;
  std::multimap<std::size_t, std::byte*> free_;  // capacity -> memory
  std::size_t cached_ = 0;
  std::size_t hits_ = 0;
};

}  // namespace hetflow::actors
