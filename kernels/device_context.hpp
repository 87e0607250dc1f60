// device_context: a backend's per-thread execution state for one device (for
// cpu: oneDNN engine/stream, OpenMP thread count, oneTBB arena; for cuda: the
// CUDA stream, cuBLAS and cuDNN handles, the shared workspace). Models hold
// one; whoever drives a model runs it inside run() on one thread.
//
// Work a context queues may be asynchronous (cuda): a result is ready once
// copy() to the host returns or synchronize() does. Errors of asynchronous
// work surface at the next call that checks (copy, synchronize, a unit call).
//
// The cpu implementation is cpu/cpu_context.hpp; the cuda one lives in the
// dlopen'ed libhetflow_cuda.so (cuda/cuda_api.hpp), so make_device_context for
// cuda returns errc::unsupported, saying why, where that library, a driver or
// the device is missing.
#pragma once

#include <functional>
#include <string_view>
#include <memory>

#include "kernels/device.hpp"
#include "kernels/tensor.hpp"
#include "schemas/error.hpp"

namespace hetflow::kernels {

// How a cuda device computes convolutions and matmuls. Parameters,
// activations and gradients stay f32 in memory in every mode; bf16 and f16
// convert each product's inputs to 16-bit copies, run it on tensor cores
// with f32 accumulation and convert the result back. cpu devices compute
// f32.
//   f32   strict f32 (cuDNN FMA math, cuBLAS f32)
//   tf32  TF32 convolutions, f32 matmuls: PyTorch's defaults, and ours
//   bf16  bf16 convolutions and matmuls
//   f16   f16 convolutions and matmuls; gradients below f16's range vanish
//         and large ones overflow unless the loss is scaled (the trainer
//         does, dynamically)
enum class math_mode : int32_t { f32 = 0, tf32 = 1, bf16 = 2, f16 = 3 };
const char* to_string(math_mode m) noexcept;
// "f32", "tf32", "bf16", "f16"; false for anything else.
bool parse_math_mode(std::string_view text, math_mode& out) noexcept;

class device_context {
public:
  virtual ~device_context() = default;
  virtual device where() const noexcept = 0;
  virtual int threads() const noexcept = 0;
  // Runs fn on the calling thread with this device's threading in force (and,
  // for cuda, the device current).
  virtual void run(const std::function<void()>& fn) = 0;

  // Memory of this device for tensor::empty_on; nullptr for cpu (host memory).
  virtual std::shared_ptr<device_allocator> memory() { return nullptr; }
  // Copies src into dst (same type and element count) between the host and
  // this device, either way or within one side, ordered after the work queued
  // before it. Returns once dst is written when dst is host memory.
  virtual status copy(tensor_view src, mutable_tensor_view dst) { return copy_into(src, dst); }
  // Waits for the queued work; reports its first error.
  virtual status synchronize() { return {}; }
};

// threads <= 0: all hardware threads (cpu); ignored for cuda.
expected<std::shared_ptr<device_context>> make_device_context(device where, int threads);

// A tensor on ctx's device holding a copy of `v` (host or device).
expected<tensor> copy_to_device(device_context& ctx, tensor_view v);
// A host tensor holding a copy of `v` (host or ctx's device).
expected<tensor> copy_to_host(device_context& ctx, tensor_view v);

}  // namespace hetflow::kernels
