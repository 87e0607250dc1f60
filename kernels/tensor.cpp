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
  tensor t = empty(v.shape(), v.type());
  if (v.byte_size() > 0) std::memcpy(t.bytes(), v.raw(), v.byte_size());
  return t;
}

void tensor::resize(const kernels::shape& dims, dtype type) {
  std::size_t need = std::size_t(dims.numel()) * dtype_size(type);
  if (need > capacity_ || !storage_) {
    std::size_t rounded = std::max<std::size_t>((need + alignment - 1) / alignment * alignment, alignment);
    void* p = std::aligned_alloc(alignment, rounded);
    if (p == nullptr) throw std::bad_alloc();
    storage_.reset(static_cast<std::byte*>(p));
    capacity_ = rounded;
  }
  shape_ = dims;
  type_ = type;
}

void tensor::zero() noexcept {
  if (storage_) std::memset(storage_.get(), 0, byte_size());
}

status copy_into(tensor_view src, mutable_tensor_view dst) {
  if (src.type() != dst.type() || src.numel() != dst.numel())
    return make_error(errc::invalid_argument, "copy_into: source " + src.shape().to_string() + " " +
                                                  to_string(src.type()) + " does not fit destination " +
                                                  dst.shape().to_string() + " " + to_string(dst.type()));
  if (src.byte_size() > 0) std::memmove(dst.raw(), src.raw(), src.byte_size());
  return {};
}

float max_abs_diff(tensor_view a, tensor_view b) {
  if (a.numel() != b.numel()) return INFINITY;
  float m = 0.0f;
  const float* x = a.f32();
  const float* y = b.f32();
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

}  // namespace hetflow::kernels
