// GPU test (label gpu): loads the CUDA backend, lists devices and runs the
// self-test kernel on each. Exits 77 (skipped) where there is no GPU.
#include <cstdio>

#include "kernels/cuda/cuda_loader.hpp"

int main() {
  auto r = hetflow::kernels::probe_cuda();
  if (r.devices.empty()) {
    std::printf("SKIP: no CUDA device: %s\n", r.why_none.c_str());
    return 77;
  }
  int failed = 0;
  for (auto& d : r.devices) {
    auto s = hetflow::kernels::cuda_selftest(d.index);
    std::printf("cuda %d (%s): %s\n", d.index, d.name.c_str(), s.ok() ? "ok" : s.to_string().c_str());
    failed += s.ok() ? 0 : 1;
  }
  std::printf("%d passed, %d failed\n", static_cast<int>(r.devices.size()) - failed, failed);
  return failed == 0 ? 0 : 1;
}
