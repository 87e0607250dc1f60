#include "kernels/cuda/cuda_check.hpp"

#include <string>

namespace hetflow::kernels::cuda {

status cuda_error(const char* call, cudaError_t code) {
  errc ec = code == cudaErrorMemoryAllocation ? errc::out_of_memory : errc::device_error;
  return make_error(ec, std::string("CUDA call `") + call + "` failed: " + cudaGetErrorName(code) + " (" +
                            cudaGetErrorString(code) + ")");
}

status cublas_error(const char* call, cublasStatus_t code) {
  errc ec = code == CUBLAS_STATUS_ALLOC_FAILED ? errc::out_of_memory
            : code == CUBLAS_STATUS_NOT_SUPPORTED ? errc::unsupported
                                                  : errc::device_error;
  return make_error(ec, std::string("cuBLAS call `") + call + "` failed: " + cublasGetStatusName(code) + " (" +
                            cublasGetStatusString(code) + ")");
}

status cudnn_error(const char* call, cudnnStatus_t code) {
  errc ec = code == CUDNN_STATUS_ALLOC_FAILED ? errc::out_of_memory
            : code == CUDNN_STATUS_NOT_SUPPORTED ? errc::unsupported
                                                 : errc::device_error;
  std::string msg = std::string("cuDNN call `") + call + "` failed: " + cudnnGetErrorString(code);
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof detail);
  if (detail[0] != '\0') msg += std::string(" (") + detail + ")";
  return make_error(ec, std::move(msg));
}

}  // namespace hetflow::kernels::cuda
