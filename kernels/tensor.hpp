// tensor (owns), tensor_view / mutable_tensor_view (borrow), tensor_ref
// (shared immutable handle).
//
// Storage is dense, row-major (outermost dimension first), 64-byte aligned so
// oneDNN and vector loops get aligned rows. Element types come from
// schemas/dtype.hpp; kernels compute in f32 and use i32/i64 for labels and
// embedding indices. Storage is host memory, or device memory from a
// `device_allocator` (the cuda backend's) for tensors made with empty_on():
// `where()` says which. Host code must not dereference a device tensor's data;
// move it with device_context::copy (device_context.hpp).
//
// Views never own: they are valid while the tensor (or wire buffer) they came
// from lives and is not resized. A unit's forward() output is a view into the
// unit's own buffer, valid until its next forward().
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>

#include "kernels/device.hpp"
#include "kernels/shape.hpp"
#include "schemas/dtype.hpp"
#include "schemas/error.hpp"

namespace hetflow::kernels {

template <class T> constexpr dtype dtype_of() noexcept;
template <> constexpr dtype dtype_of<float>() noexcept { return dtype::f32; }
template <> constexpr dtype dtype_of<int32_t>() noexcept { return dtype::i32; }
template <> constexpr dtype dtype_of<int64_t>() noexcept { return dtype::i64; }
template <> constexpr dtype dtype_of<uint8_t>() noexcept { return dtype::u8; }

// A read-only borrow of dense tensor data.
class tensor_view {
public:
  tensor_view() noexcept = default;
  tensor_view(dtype type, const void* data, const kernels::shape& dims,
              device where = device::cpu()) noexcept
      : data_(data), shape_(dims), type_(type), where_(where) {}
  tensor_view(const float* data, const kernels::shape& dims) noexcept
      : tensor_view(dtype::f32, data, dims) {}

  dtype type() const noexcept { return type_; }
  const kernels::shape& shape() const noexcept { return shape_; }
  int64_t numel() const noexcept { return shape_.numel(); }
  std::size_t byte_size() const noexcept { return std::size_t(numel()) * dtype_size(type_); }
  device where() const noexcept { return where_; }
  const void* raw() const noexcept { return data_; }
  bool empty() const noexcept { return data_ == nullptr; }

  template <class T> const T* data() const noexcept {
    assert(type_ == dtype_of<T>());
    return static_cast<const T*>(data_);
  }
  const float* f32() const noexcept { return data<float>(); }
  std::span<const float> f32_span() const noexcept { return {f32(), std::size_t(numel())}; }

  // Same data, other dims; the element count must match (checked by assert).
  tensor_view reshaped(const kernels::shape& dims) const noexcept {
    assert(dims.numel() == numel());
    return {type_, data_, dims, where_};
  }
  // Rows [begin, end) of the outermost dimension.
  tensor_view slice_outer(int64_t begin, int64_t end) const noexcept {
    kernels::shape s = shape_.with_outer(end - begin);
    auto* p = static_cast<const std::byte*>(data_) +
              std::size_t(begin * shape_.inner_numel()) * dtype_size(type_);
    return {type_, p, s, where_};
  }

private:
  const void* data_ = nullptr;
  kernels::shape shape_;
  dtype type_ = dtype::f32;
  device where_ = device::cpu();
};

// A writable borrow of dense tensor data.
class mutable_tensor_view {
public:
  mutable_tensor_view() noexcept = default;
  mutable_tensor_view(dtype type, void* data, const kernels::shape& dims,
                      device where = device::cpu()) noexcept
      : data_(data), shape_(dims), type_(type), where_(where) {}
  mutable_tensor_view(float* data, const kernels::shape& dims) noexcept
      : mutable_tensor_view(dtype::f32, data, dims) {}

  dtype type() const noexcept { return type_; }
  const kernels::shape& shape() const noexcept { return shape_; }
  int64_t numel() const noexcept { return shape_.numel(); }
  std::size_t byte_size() const noexcept { return std::size_t(numel()) * dtype_size(type_); }
  device where() const noexcept { return where_; }
  void* raw() const noexcept { return data_; }
  bool empty() const noexcept { return data_ == nullptr; }

  template <class T> T* data() const noexcept {
    assert(type_ == dtype_of<T>());
    return static_cast<T*>(data_);
  }
  float* f32() const noexcept { return data<float>(); }
  std::span<float> f32_span() const noexcept { return {f32(), std::size_t(numel())}; }

  mutable_tensor_view reshaped(const kernels::shape& dims) const noexcept {
    assert(dims.numel() == numel());
    return {type_, data_, dims, where_};
  }
  mutable_tensor_view slice_outer(int64_t begin, int64_t end) const noexcept {
    kernels::shape s = shape_.with_outer(end - begin);
    auto* p = static_cast<std::byte*>(data_) +
              std::size_t(begin * shape_.inner_numel()) * dtype_size(type_);
    return {type_, p, s, where_};
  }

  operator tensor_view() const noexcept { return {type_, data_, shape_, where_}; }

private:
  void* data_ = nullptr;
  kernels::shape shape_;
  dtype type_ = dtype::f32;
  device where_ = device::cpu();
};

// Memory of a non-host device, implemented by a device backend (cuda). The
// backend keeps it alive as long as any tensor holds it. Thread-safe.
class device_allocator {
public:
  virtual ~device_allocator() = default;
  virtual device where() const noexcept = 0;
  // Throws std::bad_alloc when the device has no room, like host storage.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p) noexcept = 0;
  // Sets `bytes` bytes at p to zero (ordered with the backend's other work).
  virtual status zero(void* p, std::size_t bytes) noexcept = 0;
  // Copies within this device (ordered with the backend's other work).
  virtual status copy_within(void* dst, const void* src, std::size_t bytes) noexcept = 0;
};

namespace detail {
// Frees a tensor's storage: std::free for host memory, else its allocator.
struct storage_deleter {
  device_allocator* memory;  // nullptr: host
  constexpr storage_deleter(device_allocator* m = nullptr) noexcept : memory(m) {}
  void operator()(std::byte* p) const noexcept {
    if (memory) memory->deallocate(p);
    else std::free(p);
  }
};
}  // namespace detail

// An owning dense tensor. Move-only; copy explicitly with clone().
class tensor {
public:
  static constexpr std::size_t alignment = 64;

  tensor() noexcept = default;
  // Uninitialised storage. Throws std::bad_alloc like any container.
  static tensor empty(const kernels::shape& dims, dtype type = dtype::f32);
  static tensor zeros(const kernels::shape& dims, dtype type = dtype::f32);
  static tensor filled(const kernels::shape& dims, float value);
  static tensor from(tensor_view v);  // deep copy of a HOST view (asserted)
  // Uninitialised / zeroed storage on `memory`'s device.
  static tensor empty_on(std::shared_ptr<device_allocator> memory, const kernels::shape& dims,
                         dtype type = dtype::f32);
  static tensor zeros_on(std::shared_ptr<device_allocator> memory, const kernels::shape& dims,
                         dtype type = dtype::f32);

  tensor(tensor&&) noexcept = default;
  tensor& operator=(tensor&&) noexcept = default;
  tensor(const tensor&) = delete;
  tensor& operator=(const tensor&) = delete;

  // A deep copy on the same device.
  tensor clone() const;

  // Changes dims (and type), keeping the storage when it is large enough: the
  // way units keep one buffer per layer across batches. Contents are
  // unspecified afterwards.
  void resize(const kernels::shape& dims, dtype type = dtype::f32);
  // Sets every byte to zero (on the tensor's device).
  void zero() noexcept;

  dtype type() const noexcept { return type_; }
  const kernels::shape& shape() const noexcept { return shape_; }
  int64_t numel() const noexcept { return shape_.numel(); }
  std::size_t byte_size() const noexcept { return std::size_t(numel()) * dtype_size(type_); }
  std::size_t capacity_bytes() const noexcept { return capacity_; }
  device where() const noexcept { return memory_ ? memory_->where() : device::cpu(); }
  // The device memory this tensor lives in; nullptr for host tensors.
  const std::shared_ptr<device_allocator>& memory() const noexcept { return memory_; }
  bool empty() const noexcept { return !storage_ || numel() == 0; }

  template <class T> T* data() noexcept {
    assert(type_ == dtype_of<T>());
    return reinterpret_cast<T*>(storage_.get());
  }
  template <class T> const T* data() const noexcept {
    assert(type_ == dtype_of<T>());
    return reinterpret_cast<const T*>(storage_.get());
  }
  float* f32() noexcept { return data<float>(); }
  const float* f32() const noexcept { return data<float>(); }
  std::span<float> f32_span() noexcept { return {f32(), std::size_t(numel())}; }
  std::span<const float> f32_span() const noexcept { return {f32(), std::size_t(numel())}; }
  std::byte* bytes() noexcept { return storage_.get(); }
  const std::byte* bytes() const noexcept { return storage_.get(); }

  tensor_view view() const noexcept { return {type_, storage_.get(), shape_, where()}; }
  mutable_tensor_view mutable_view() noexcept { return {type_, storage_.get(), shape_, where()}; }
  operator tensor_view() const noexcept { return view(); }

private:
  using free_deleter = detail::storage_deleter;
  // Declared before storage_ so that it outlives it.
  std::shared_ptr<device_allocator> memory_;
  std::unique_ptr<std::byte, free_deleter> storage_;
  std::size_t capacity_ = 0;
  kernels::shape shape_;
  dtype type_ = dtype::f32;
};

// A shared immutable tensor: what actors pass around inside one node.
using tensor_ref = std::shared_ptr<const tensor>;

inline tensor_ref share(tensor t) { return std::make_shared<const tensor>(std::move(t)); }

// Copies `src` into `dst`; types and element counts must match. Host views
// only (errc::invalid_argument otherwise): device_context::copy moves data
// to and from a device.
status copy_into(tensor_view src, mutable_tensor_view dst);

// Largest |a[i] - b[i]| over f32 host views of equal size (tests, checks).
float max_abs_diff(tensor_view a, tensor_view b);

}  // namespace hetflow::kernels
