// shape: the dimensions of a tensor, outermost first (N, C, H, W for images).
//
// A small fixed-capacity value type so that hot paths (reshape checks, views)
// never allocate. Rank 0 is a scalar with one element.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

namespace hetflow::kernels {

class shape {
public:
  static constexpr int max_rank = 8;

  constexpr shape() noexcept = default;
  constexpr shape(std::initializer_list<int64_t> dims) noexcept {
    for (int64_t d : dims)
      if (rank_ < max_rank) dims_[rank_++] = d;
  }
  // Ranks above max_rank are truncated; callers validate with valid_rank().
  explicit shape(std::span<const int64_t> dims) noexcept {
    for (int64_t d : dims)
      if (rank_ < max_rank) dims_[rank_++] = d;
  }

  constexpr int rank() const noexcept { return rank_; }
  constexpr int64_t operator[](int i) const noexcept { return dims_[i]; }
  constexpr int64_t& operator[](int i) noexcept { return dims_[i]; }
  constexpr int64_t back() const noexcept { return dims_[rank_ - 1]; }
  std::span<const int64_t> dims() const noexcept { return {dims_.data(), std::size_t(rank_)}; }

  constexpr int64_t numel() const noexcept {
    int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= dims_[i];
    return n;
  }
  // Elements per outermost index: numel() / dims[0] (1 for rank 0).
  constexpr int64_t inner_numel() const noexcept {
    int64_t n = 1;
    for (int i = 1; i < rank_; ++i) n *= dims_[i];
    return n;
  }
  constexpr void push_back(int64_t d) noexcept {
    if (rank_ < max_rank) dims_[rank_++] = d;
  }
  // Same dims with the outermost one replaced (the batch size, usually).
  constexpr shape with_outer(int64_t n) const noexcept {
    shape s = *this;
    if (s.rank_ > 0) s.dims_[0] = n;
    return s;
  }
  // True when every dimension is >= 0 (zero-sized tensors are legal).
  constexpr bool valid() const noexcept {
    for (int i = 0; i < rank_; ++i)
      if (dims_[i] < 0) return false;
    return true;
  }

  friend constexpr bool operator==(const shape& a, const shape& b) noexcept {
    if (a.rank_ != b.rank_) return false;
    for (int i = 0; i < a.rank_; ++i)
      if (a.dims_[i] != b.dims_[i]) return false;
    return true;
  }

  // "[64, 1, 28, 28]"
  std::string to_string() const;

private:
  std::array<int64_t, max_rank> dims_{};
  int rank_ = 0;
};

}  // namespace hetflow::kernels
