// libhetflow_cuda.so: the CUDA side of hetflow, loaded with dlopen so the
// hetflow binary starts on machines without CUDA, a driver or a GPU.
//
// Runtime API only, cudart linked statically; never the driver API.
// The C entry points below are the probe part of the module's ABI (C ABI
// version 2, see cuda_loader.cpp); the C++ interface comes from
// hetflow_cuda_backend (entry.cpp, cuda_api.hpp). The module is built with
// hidden visibility: only what is marked HF_EXPORT is seen by dlsym.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <vector>

#define HF_EXPORT __attribute__((visibility("default")))

namespace {

void put(char* out, int len, const char* text) {
  if (out != nullptr && len > 0) std::snprintf(out, static_cast<std::size_t>(len), "%s", text);
}

__global__ void affine_kernel(const float* x, float* y, int n, float a, float b) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + b;
}

}  // namespace

extern "C" {

// ABI version of this file's entry points.
HF_EXPORT int hetflow_cuda_abi_version() { return 2; }

// Number of devices; on error 0 devices and the CUDA error text in msg.
HF_EXPORT int hetflow_cuda_device_count(int* count, char* msg, int msg_len) {
  *count = 0;
  cudaError_t e = cudaGetDeviceCount(count);
  if (e != cudaSuccess) {
    *count = 0;
    put(msg, msg_len, cudaGetErrorString(e));
    return static_cast<int>(e);
  }
  return 0;
}

HF_EXPORT int hetflow_cuda_device_info(int index, char* name, int name_len, unsigned long long* total_bytes,
                             int* cc_major, int* cc_minor) {
  cudaDeviceProp p{};
  cudaError_t e = cudaGetDeviceProperties(&p, index);
  if (e != cudaSuccess) {
    put(name, name_len, cudaGetErrorString(e));
    return static_cast<int>(e);
  }
  put(name, name_len, p.name);
  *total_bytes = p.totalGlobalMem;
  *cc_major = p.major;
  *cc_minor = p.minor;
  return 0;
}

// Runs y = 2x + 1 over n floats on the device and checks it on the host.
HF_EXPORT int hetflow_cuda_selftest(int index, int n, char* msg, int msg_len) {
#define HF_CUDA_TRY(call)                                                        \
  do {                                                                           \
    cudaError_t e_ = (call);                                                     \
    if (e_ != cudaSuccess) {                                                     \
      char b_[256];                                                              \
      std::snprintf(b_, sizeof b_, "%s failed: %s", #call, cudaGetErrorString(e_)); \
      put(msg, msg_len, b_);                                                     \
      return static_cast<int>(e_);                                               \
    }                                                                            \
  } while (0)
  HF_CUDA_TRY(cudaSetDevice(index));
  std::vector<float> x(static_cast<std::size_t>(n)), y(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i % 1000) * 0.5f;
  float *dx = nullptr, *dy = nullptr;
  HF_CUDA_TRY(cudaMalloc(&dx, sizeof(float) * n));
  HF_CUDA_TRY(cudaMalloc(&dy, sizeof(float) * n));
  HF_CUDA_TRY(cudaMemcpy(dx, x.data(), sizeof(float) * n, cudaMemcpyHostToDevice));
  affine_kernel<<<(n + 255) / 256, 256>>>(dx, dy, n, 2.0f, 1.0f);
  HF_CUDA_TRY(cudaGetLastError());
  HF_CUDA_TRY(cudaMemcpy(y.data(), dy, sizeof(float) * n, cudaMemcpyDeviceToHost));
  HF_CUDA_TRY(cudaFree(dx));
  HF_CUDA_TRY(cudaFree(dy));
#undef HF_CUDA_TRY
  for (int i = 0; i < n; ++i) {
    if (y[i] != 2.0f * x[i] + 1.0f) {
      char b[128];
      std::snprintf(b, sizeof b, "wrong result at %d: %g", i, static_cast<double>(y[i]));
      put(msg, msg_len, b);
      return -1;
    }
  }
  put(msg, msg_len, "ok");
  return 0;
}

}  // extern "C"
