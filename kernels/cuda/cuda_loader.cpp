#include "kernels/cuda/cuda_loader.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>

namespace hetflow::kernels {
namespace {

using count_fn = int (*)(int*, char*, int);
using info_fn = int (*)(int, char*, int, unsigned long long*, int*, int*);
using selftest_fn = int (*)(int, int, char*, int);
using abi_fn = int (*)();

struct backend {
  void* handle = nullptr;
  std::string path;
  std::string error;
  count_fn count = nullptr;
  info_fn info = nullptr;
  selftest_fn selftest = nullptr;
};

backend& load() {
  static backend b;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("HETFLOW_CUDA_LIBRARY")) candidates.push_back(env);
    char exe[4096] = {};
    if (ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1); n > 0) {
      auto dir = std::filesystem::path(exe).parent_path();
      candidates.push_back((dir / ".." / "lib" / "libhetflow_cuda.so").lexically_normal().string());
      candidates.push_back((dir / "libhetflow_cuda.so").string());
    }
    for (auto& c : candidates) {
      if (!std::filesystem::exists(c)) {
        b.error = "no CUDA backend library at " + c + " (built without nvcc?)";
        b.path = c;
        continue;
      }
      b.path = c;
      b.handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (b.handle == nullptr) {
        const char* e = dlerror();
        b.error = "cannot load " + c + ": " + (e ? e : "unknown dlopen error");
        continue;
      }
      auto abi = reinterpret_cast<abi_fn>(dlsym(b.handle, "hetflow_cuda_abi_version"));
      b.count = reinterpret_cast<count_fn>(dlsym(b.handle, "hetflow_cuda_device_count"));
      b.info = reinterpret_cast<info_fn>(dlsym(b.handle, "hetflow_cuda_device_info"));
      b.selftest = reinterpret_cast<selftest_fn>(dlsym(b.handle, "hetflow_cuda_selftest"));
      if (abi == nullptr || abi() != 1 || !b.count || !b.info || !b.selftest) {
        b.error = c + " is not a compatible hetflow CUDA backend (ABI 1)";
        b.count = nullptr;
        continue;
      }
      b.error.clear();
      return;
    }
  });
  return b;
}

}  // namespace

cuda_probe_result probe_cuda() {
  cuda_probe_result r;
  auto& b = load();
  r.library_path = b.path;
  if (b.count == nullptr) {
    r.why_none = b.error.empty() ? "no CUDA backend library found" : b.error;
    return r;
  }
  r.library_loaded = true;
  int n = 0;
  char msg[256] = {};
  if (b.count(&n, msg, sizeof msg) != 0) {
    r.why_none = std::string("CUDA reports: ") + msg;
    return r;
  }
  if (n == 0) r.why_none = "CUDA reports no devices";
  for (int i = 0; i < n; ++i) {
    cuda_device_info d;
    d.index = i;
    char name[256] = {};
    unsigned long long mem = 0;
    if (b.info(i, name, sizeof name, &mem, &d.cc_major, &d.cc_minor) == 0) {
      d.name = name;
      d.memory_bytes = mem;
      r.devices.push_back(d);
    }
  }
  return r;
}

status cuda_selftest(int index) {
  auto& b = load();
  if (b.selftest == nullptr) return make_error(errc::unsupported, b.error);
  char msg[512] = {};
  if (b.selftest(index, 1 << 20, msg, sizeof msg) != 0)
    return make_error(errc::device_error, "CUDA device " + std::to_string(index) + ": " + msg);
  return {};
}

}  // namespace hetflow::kernels
