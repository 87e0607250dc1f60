#include "kernels/cuda/cuda_loader.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "kernels/cuda/cuda_api.hpp"

namespace hetflow::kernels {
namespace {

// The C entry points' version (the probe functions below and
// hetflow_cuda_backend); the C++ interface has its own stamp (cuda_api.hpp).
constexpr int c_abi_version = 2;

using count_fn = int (*)(int*, char*, int);
using info_fn = int (*)(int, char*, int, unsigned long long*, int*, int*);
using selftest_fn = int (*)(int, int, char*, int);
using abi_fn = int (*)();

struct loaded_module {
  void* handle = nullptr;
  std::string path;
  std::string error;
  count_fn count = nullptr;
  info_fn info = nullptr;
  selftest_fn selftest = nullptr;
  hetflow_cuda_backend_fn backend_entry = nullptr;
};

loaded_module& load() {
  static loaded_module b;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("HETFLOW_CUDA_LIBRARY"); env != nullptr && *env != '\0')
      candidates.push_back(env);
    char exe[4096] = {};
    if (ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1); n > 0) {
      auto dir = std::filesystem::path(exe).parent_path();
      candidates.push_back((dir / ".." / "lib" / "libhetflow_cuda.so").lexically_normal().string());
      candidates.push_back((dir / "libhetflow_cuda.so").string());
    }
    std::string first_error;
    for (auto& c : candidates) {
      std::error_code ec;
      if (!std::filesystem::exists(c, ec)) {
        if (first_error.empty()) first_error = "no CUDA backend library at " + c + " (built without nvcc?)";
        if (b.path.empty()) b.path = c;
        continue;
      }
      b.path = c;
      // Never closed: units and tensors from it live until exit.
      void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h == nullptr) {
        const char* e = dlerror();
        std::string detail = e ? e : "unknown dlopen error";
        b.error = "cannot load " + c + ": " + detail;
        if (detail.find("cannot open shared object file") != std::string::npos)
          b.error += " (cuBLAS and cuDNN of the CUDA version it was built with must be on the library path)";
        return;
      }
      auto abi = reinterpret_cast<abi_fn>(dlsym(h, "hetflow_cuda_abi_version"));
      auto count = reinterpret_cast<count_fn>(dlsym(h, "hetflow_cuda_device_count"));
      auto info = reinterpret_cast<info_fn>(dlsym(h, "hetflow_cuda_device_info"));
      auto selftest = reinterpret_cast<selftest_fn>(dlsym(h, "hetflow_cuda_selftest"));
      auto entry = reinterpret_cast<hetflow_cuda_backend_fn>(dlsym(h, "hetflow_cuda_backend"));
      if (abi == nullptr || abi() != c_abi_version || !count || !info || !selftest || !entry) {
        b.error = c + " is not a compatible hetflow CUDA backend (want C ABI " + std::to_string(c_abi_version) +
                  (abi ? ", it has " + std::to_string(abi()) : std::string(", it has none")) +
                  "); rebuild it from this checkout";
        return;
      }
      b.handle = h;
      b.count = count;
      b.info = info;
      b.selftest = selftest;
      b.backend_entry = entry;
      b.error.clear();
      return;
    }
    b.error = first_error.empty() ? "no CUDA backend library found" : first_error;
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

expected<cuda::backend*> load_cuda_backend() {
  static cuda::backend* backend = nullptr;
  static std::string why;
  static std::once_flag once;
  std::call_once(once, [] {
    auto& b = load();
    if (b.backend_entry == nullptr) {
      why = b.error.empty() ? "no CUDA backend library found" : b.error;
      return;
    }
    const cuda::abi_stamp mine = cuda::current_abi();
    char msg[512] = {};
    backend = b.backend_entry(&mine, msg, sizeof msg);
    if (backend == nullptr)
      why = b.path + " refused this program: " + msg + "; rebuild both from one checkout with one compiler";
  });
  if (backend == nullptr) return make_error(errc::unsupported, "CUDA backend: " + why);
  return backend;
}

expected<std::shared_ptr<cuda::context>> make_cuda_context(int index) {
  const std::string dev = "device cuda:" + std::to_string(index);
  auto be = load_cuda_backend();
  if (!be) return be.error().with_context(dev);
  std::string why;
  int n = (*be)->device_count(why);
  if (n == 0)
    return make_error(errc::unsupported,
                      dev + ": no CUDA device is usable here (" + (why.empty() ? "CUDA reports no devices" : why) +
                          "); use a cpu device");
  if (index < 0 || index >= n)
    return make_error(errc::unsupported, dev + ": this machine has " + std::to_string(n) + " CUDA device" +
                                             (n == 1 ? "" : "s") + " (cuda:0" +
                                             (n > 1 ? "..cuda:" + std::to_string(n - 1) : std::string()) + ")");
  auto ctx = (*be)->make_context(index);
  if (!ctx) return ctx.error().with_context(dev);
  return ctx;
}

}  // namespace hetflow::kernels
