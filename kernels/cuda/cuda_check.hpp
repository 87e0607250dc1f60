// Inside libhetflow_cuda.so: CUDA, cuBLAS and cuDNN return codes -> status
// naming the call (NCCL's CUDACHECK style). Usable in functions returning
// status or expected<T>.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "schemas/error.hpp"

namespace hetflow::kernels::cuda {

status cuda_error(const char* call, cudaError_t code);
status cublas_error(const char* call, cublasStatus_t code);
status cudnn_error(const char* call, cudnnStatus_t code);

}  // namespace hetflow::kernels::cuda

#define HF_CUDA_CHECK(call)                                                            \
  do {                                                                                 \
    cudaError_t hf_cuda_e_ = (call);                                                   \
    if (hf_cuda_e_ != cudaSuccess) return ::hetflow::kernels::cuda::cuda_error(#call, hf_cuda_e_); \
  } while (0)

// After a kernel launch: launch configuration errors (and earlier sticky ones).
#define HF_CUDA_LAUNCHED(what)                                                         \
  do {                                                                                 \
    cudaError_t hf_cuda_e_ = cudaGetLastError();                                       \
    if (hf_cuda_e_ != cudaSuccess) return ::hetflow::kernels::cuda::cuda_error(what, hf_cuda_e_); \
  } while (0)

#define HF_CUBLAS_CHECK(call)                                                          \
  do {                                                                                 \
    cublasStatus_t hf_cublas_e_ = (call);                                              \
    if (hf_cublas_e_ != CUBLAS_STATUS_SUCCESS)                                         \
      return ::hetflow::kernels::cuda::cublas_error(#call, hf_cublas_e_);              \
  } while (0)

#define HF_CUDNN_CHECK(call)                                                           \
  do {                                                                                 \
    cudnnStatus_t hf_cudnn_e_ = (call);                                                \
    if (hf_cudnn_e_ != CUDNN_STATUS_SUCCESS)                                           \
      return ::hetflow::kernels::cuda::cudnn_error(#call, hf_cudnn_e_);                \
  } while (0)
