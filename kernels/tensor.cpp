#include "kernels/tensor.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

namespace hetflow::kernels {

std::string shape::to_string() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

tensor tensor::empty(const kernels::shape& dims, dtype type) {
  tensor t;
  t.resize(dims, type);
  return t;
}

tensor tensor::zeros(const kernels::shape& dims, dtype type) {
  tensor t = empty(dims, type);
  t.zero();
  return t;
}

tensor tensor::filled(const kernels::shape& dims, float value) {
  tensor t = empty(dims, dtype::f32);
  std::fill_n(t.f32(), t.numel(), value);
  return t;
}

tensor tensor::from(tensor_view v) {
  assert(v.where().kind == device_kind::cpu);
  tensor t = empty(v.shape(), v.type());
  if (v.byte_size() > 0) std::memcpy(t.bytes(), v.raw(), v.byte_size());
  return t;
}

tensor tensor::empty_on(std::shared_ptr<device_allocator> memory, const kernels::shape& dims, dtype type) {
  tensor t;
  t.memory_ = std::move(memory);
  t.storage_ = std::unique_ptr<std::byte, free_deleter>(nullptr, free_deleter{t.memory_.get()});
  t.resize(dims, type);
  return t;
}

tensor tensor::zeros_on(std::shared_ptr<device_allocator> memory, const kernels::shape& dims, dtype type) {
  tensor t = empty_on(std::move(memory), dims, type);
  t.zero();
  return t;
}

tensor tensor::clone() const {
  if (!memory_) return from(view());
  tensor t = empty_on(memory_, shape_, type_);
  if (byte_size() > 0) (void)memory_->copy_within(t.bytes(), bytes(), byte_size());
  return t;
}

void tensor::resize(const kernels::shape& dims, dtype type) {
  std::size_t need = std::size_t(dims.numel()) * dtype_size(type);
  if (need > capacity_ || !storage_) {
    std::size_t rounded = std::max<std::size_t>((need + alignment - 1) / alignment * alignment, alignment);
    // Free the old buffer first: device memory is scarcer than host memory.
    storage_.reset();
    capacity_ = 0;
    void* p = memory_ ? memory_->allocate(rounded) : std::aligned_alloc(alignment, rounded);
    if (p == nullptr) throw std::bad_alloc();
    storage_ = std::unique_ptr<std::byte, free_deleter>(static_cast<std::byte*>(p), free_deleter{memory_.get()});
    capacity_ = rounded;
  }
  shape_ = dims;
  type_ = type;
}

void tensor::zero() noexcept {
  if (!storage_) return;
  if (memory_) (void)memory_->zero(storage_.get(), byte_size());
  else std::memset(storage_.get(), 0, byte_size());
}

status copy_into(tensor_view src, mutable_tensor_view dst) {
  if (src.where().kind != device_kind::cpu || dst.where().kind != device_kind::cpu)
    return make_error(errc::invalid_argument, "copy_into: " + src.where().to_string() + " -> " +
                                                  dst.where().to_string() +
                                                  " involves device memory; use device_context::copy");
  if (src.type() != dst.type() || src.numel() != dst.numel())
    return make_error(errc::invalid_argument, "copy_into: source " + src.shape().to_string() + " " +
                                                  to_string(src.type()) + " does not fit destination " +
                                                  dst.shape().to_string() + " " + to_string(dst.type()));
  if (src.byte_size() > 0) std::memmove(dst.raw(), src.raw(), src.byte_size());
  return {};
}

float max_abs_diff(tensor_view a, tensor_view b) {
  if (a.numel() != b.numel() || a.where().kind != device_kind::cpu || b.where().kind != device_kind::cpu)
    return INFINITY;
  float m = 0.0f;
  const float* x = a.f32();
  const float* y = b.f32();
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

}  // namespace hetflow::kernels
