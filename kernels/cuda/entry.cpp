// libhetflow_cuda.so's C++ entry point: the backend object behind
// hetflow_cuda_backend (cuda_api.hpp), after checking the host's abi_stamp.
#include <cstdio>
#include <string>

#include "kernels/cuda/cuda_context.hpp"

namespace hetflow::kernels::cuda {
namespace {

class backend_impl final : public backend {
public:
  int device_count(std::string& why) override {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
      return 0;
    }
    if (n == 0) why = "CUDA reports no devices";
    return n;
  }

  expected<std::shared_ptr<context>> make_context(int ordinal) override {
    auto c = context_impl::create(ordinal);
    if (!c) return c.error();
    return std::shared_ptr<context>(std::move(*c));
  }

  std::string versions() override {
    int rt = 0, drv = 0, cublas = 0;
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);
    cublasGetProperty(MAJOR_VERSION, &cublas);
    int cublas_minor = 0;
    cublasGetProperty(MINOR_VERSION, &cublas_minor);
    return "CUDA runtime " + std::to_string(rt) + ", driver " + std::to_string(drv) + ", cuBLAS " +
           std::to_string(cublas) + "." + std::to_string(cublas_minor) + ", cuDNN " +
           std::to_string(cudnnGetVersion());
  }
};

}  // namespace
}  // namespace hetflow::kernels::cuda

extern "C" __attribute__((visibility("default"))) hetflow::kernels::cuda::backend* hetflow_cuda_backend(
    const hetflow::kernels::cuda::abi_stamp* host, char* why, int why_len) {
  using namespace hetflow::kernels::cuda;
  const abi_stamp mine = current_abi();
  if (host == nullptr || !(*host == mine)) {
    if (why != nullptr && why_len > 0) {
      if (host == nullptr)
        std::snprintf(why, std::size_t(why_len), "no ABI stamp given");
      else
        std::snprintf(why, std::size_t(why_len),
                      "interface version %u (module %u), compiler %u (module %u), or shared type sizes differ",
                      host->version, mine.version, host->compiler, mine.compiler);
    }
    return nullptr;
  }
  static backend_impl instance;  // process lifetime: the module is never unloaded
  return &instance;
}
