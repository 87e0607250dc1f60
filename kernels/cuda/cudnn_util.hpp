// Inside libhetflow_cuda.so: owning handles for cuDNN descriptors (legacy
// API, which cuDNN 9 still ships in cudnn_ops / cudnn_cnn).
#pragma once

#include <cudnn.h>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/shape.hpp"

namespace hetflow::kernels::cuda {

template <class T, cudnnStatus_t (*Destroy)(T)> class cudnn_handle {
public:
  cudnn_handle() = default;
  ~cudnn_handle() { reset(); }
  cudnn_handle(const cudnn_handle&) = delete;
  cudnn_handle& operator=(const cudnn_handle&) = delete;
  T get() const noexcept { return h_; }
  T* out() noexcept {
    reset();
    return &h_;
  }
  void reset() noexcept {
    if (h_) Destroy(h_);
    h_ = nullptr;
  }

private:
  T h_ = nullptr;
};

using tensor_desc = cudnn_handle<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>;
using filter_desc = cudnn_handle<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor>;
using conv_desc = cudnn_handle<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor>;
using pool_desc = cudnn_handle<cudnnPoolingDescriptor_t, cudnnDestroyPoolingDescriptor>;

// NCHW f32; rank-2 (N, C) becomes (N, C, 1, 1).
inline status make_nchw(tensor_desc& d, const shape& s, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
  int n = int(s[0]), c = s.rank() > 1 ? int(s[1]) : 1, h = s.rank() > 2 ? int(s[2]) : 1,
      w = s.rank() > 3 ? int(s[3]) : 1;
  HF_CUDNN_CHECK(cudnnCreateTensorDescriptor(d.out()));
  HF_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d.get(), CUDNN_TENSOR_NCHW, type, n, c, h, w));
  return {};
}

}  // namespace hetflow::kernels::cuda
