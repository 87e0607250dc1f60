// wire_buffer: an owned, 64-byte-aligned byte buffer holding one wire message.
//
// Cap'n Proto's FlatArrayMessageReader needs 8-byte-aligned words; the data
// plane receives straight into a wire_buffer (rendezvous into the receiver's
// buffer) so decoding reads tensors in place with no further copy.
//
// Move-only. Share immutable buffers between actors as wire_buffer_ref.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>
#include <span>

namespace hetflow {

// Best effort (THP off: nothing changes). A peer pulling a message out of
// this process over CMA pins every page of it (get_user_pages); with 4 KiB
// pages that page-table walk cost the receiver more CPU than the copy itself
// (perf, 4 MiB over shared memory).
void advise_huge_pages(void* p, std::size_t bytes) noexcept;

// Takes a wire_buffer's memory back when the buffer dies, instead of free().
// Called from whichever thread drops the last reference: thread-safe.
class wire_buffer_recycler {
public:
  virtual ~wire_buffer_recycler() = default;
  // `p` came from std::aligned_alloc(wire_buffer::alignment, capacity).
  virtual void recycle(std::byte* p, std::size_t capacity) noexcept = 0;
};

namespace detail {
// wire_buffer's deleter: to the recycler if there is one, else free().
struct wire_buffer_release {
  std::shared_ptr<wire_buffer_recycler> owner;
  std::size_t capacity = 0;
  void operator()(std::byte* p) const noexcept {
    if (owner)
      owner->recycle(p, capacity);
    else
      std::free(p);
  }
};
}  // namespace detail

class wire_buffer {
public:
  static constexpr std::size_t alignment = 64;
  // Buffers of at least huge_threshold bytes are rounded up to whole 2 MiB
  // pages and advised onto transparent huge pages (see advise_huge_pages).
  // 1 MiB: the ring's default chunk; with its chunks on huge pages (and
  // pooled) a 16 MiB all-reduce of 2 nodes went from ~5 to ~3.3 ms. The
  // price is up to 2x memory for messages of 1-2 MiB.
  static constexpr std::size_t huge_threshold = std::size_t{1} << 20;
  static constexpr std::size_t huge_page_bytes = std::size_t{2} << 20;
  using recycler = wire_buffer_recycler;

  wire_buffer() noexcept = default;
  // Uninitialised storage for `bytes` bytes. Throws std::bad_alloc.
  explicit wire_buffer(std::size_t bytes) : size_(bytes), capacity_(bytes) {
    if (bytes > 0) {
      const std::size_t align = bytes >= huge_threshold ? huge_page_bytes : alignment;
      std::size_t rounded = (bytes + align - 1) / align * align;
      void* p = std::aligned_alloc(align, rounded);
      if (p == nullptr) throw std::bad_alloc();
      if (align == huge_page_bytes) advise_huge_pages(p, rounded);
      data_.reset(static_cast<std::byte*>(p));
    }
  }

  // Adopts `p` (from std::aligned_alloc(alignment, capacity)); when this
  // buffer dies the memory goes to `owner` (kept alive until then).
  wire_buffer(std::byte* p, std::size_t size, std::size_t capacity,
              std::shared_ptr<recycler> owner) noexcept
      : data_(p, detail::wire_buffer_release{std::move(owner), capacity}),
        size_(size),
        capacity_(capacity) {}

  wire_buffer(wire_buffer&&) noexcept = default;
  wire_buffer& operator=(wire_buffer&&) noexcept = default;
  wire_buffer(const wire_buffer&) = delete;
  wire_buffer& operator=(const wire_buffer&) = delete;

  std::byte* data() noexcept { return data_.get(); }
  const std::byte* data() const noexcept { return data_.get(); }
  std::size_t size() const noexcept { return size_; }
  std::size_t capacity() const noexcept { return capacity_; }
  bool empty() const noexcept { return size_ == 0; }
  std::span<std::byte> bytes() noexcept { return {data_.get(), size_}; }
  std::span<const std::byte> bytes() const noexcept { return {data_.get(), size_}; }

  // Shrinks the visible size (never reallocates). `n` must be <= capacity().
  void shrink_to(std::size_t n) noexcept {
    if (n <= capacity_) size_ = n;
  }

private:
  std::unique_ptr<std::byte, detail::wire_buffer_release> data_;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

// A shared, immutable wire message: what actors pass around inside a node.
using wire_buffer_ref = std::shared_ptr<const wire_buffer>;

}  // namespace hetflow
