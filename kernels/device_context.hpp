// device_context: a backend's per-thread execution state for one device (for
// cpu: oneDNN engine/stream, OpenMP thread count, oneTBB arena). Models hold
// one; whoever drives a model runs it inside run() on one thread.
//
// The cpu implementation is cpu/cpu_context.hpp. A cuda implementation (CUDA
// stream, cuDNN/cuBLAS handles) plugs in here; make_device_context returns
// errc::unsupported for cuda until then.
#pragma once

#include <functional>
#include <memory>

#include "kernels/device.hpp"
#include "schemas/error.hpp"

namespace hetflow::kernels {

class device_context {
public:
  virtual ~device_context() = default;
  virtual device where() const noexcept = 0;
  virtual int threads() const noexcept = 0;
  // Runs fn on the calling thread with this device's threading in force.
  virtual void run(const std::function<void()>& fn) = 0;
};

// threads <= 0: all hardware threads (cpu); ignored for cuda.
expected<std::shared_ptr<device_context>> make_device_context(device where, int threads);

}  // namespace hetflow::kernels
