// cuda_loader: finds and dlopens libhetflow_cuda.so (built when nvcc is
// present) and answers what CUDA devices this machine has.
//
// The hetflow binary never links CUDA: on a machine with no CUDA libraries,
// driver or GPU, probe() says why and everything else runs on CPU.
// Search order: $HETFLOW_CUDA_LIBRARY, then <dir of executable>/../lib/,
// then the executable's own directory. The module's C++ interface is
// cuda_api.hpp; it is checked for version (abi_stamp) on load.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "schemas/error.hpp"

namespace hetflow::kernels {

namespace cuda {
class backend;
class context;
}  // namespace cuda

struct cuda_device_info {
  int index = 0;
  std::string name;
  uint64_t memory_bytes = 0;
  int cc_major = 0;
  int cc_minor = 0;
};

struct cuda_probe_result {
  bool library_loaded = false;
  std::string library_path;  // what was loaded (or tried)
  std::vector<cuda_device_info> devices;
  std::string why_none;  // when devices is empty: the reason, for people
};

// Thread-safe; the library is loaded once per process and never unloaded.
cuda_probe_result probe_cuda();

// Runs a small kernel on device `index` and checks the result.
status cuda_selftest(int index);

// The module's interface, loaded and ABI-checked once per process;
// errc::unsupported saying why not (no library, cannot load it, built from
// other sources).
expected<cuda::backend*> load_cuda_backend();

// A fresh context on CUDA device `index`; errc::unsupported saying why there
// is none (no library, no driver, no device, no device `index`),
// errc::device_error when CUDA fails to set it up.
expected<std::shared_ptr<cuda::context>> make_cuda_context(int index);

}  // namespace hetflow::kernels
