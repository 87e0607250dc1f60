// The CUDA backend's C++ interface: what libhetflow_cuda.so implements and the
// host (kernels library, via cuda_loader) calls. The host never links CUDA;
// it dlopens the module and asks its one C entry point for a `backend`:
//
//   host (hetflow, libhetflow_kernels)          libhetflow_cuda.so
//   ----------------------------------          ------------------------------
//   cuda_loader: dlopen, dlsym ---------------> hetflow_cuda_abi_version() == 2
//                hetflow_cuda_backend(&stamp) -> checks stamp == its own abi_stamp
//                                  <---------- backend* (process lifetime)
//   make_device_context(cuda(i)) -> backend::make_context(i) -> cuda::context
//   build_model -> context::make_unit(layer_spec) -> unit (device tensors)
//   trainer     -> context::softmax_cross_entropy, context::make_optimizer
//
// Both sides share C++ objects (units, tensors, statuses, std::string), so
// they must be built from the same sources by the same compiler: the
// abi_stamp (interface version, compiler version, sizes of the shared types)
// is compared on load and a mismatch is refused with a message, never run.
//
// Contracts of everything a context makes:
//  - Tensors live on the context's device (tensor::empty_on(memory())).
//    Parameters keep PyTorch's canonical layouts, like the cpu backend, and
//    are initialised from the same rng draws in the same order: a model
//    built with the same seed has the same initial weights on cpu and cuda.
//  - Work is queued on the context's one stream; units follow unit.hpp's
//    lockstep contract. One thread drives a context at a time.
//  - Every CUDA / cuBLAS / cuDNN failure comes back as errc::device_error
//    (errc::out_of_memory for allocation failures) naming the call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kernels/device_context.hpp"
#include "kernels/layer_spec.hpp"
#include "kernels/loss.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/random.hpp"
#include "kernels/unit.hpp"

namespace hetflow::kernels::cuda {

// Bump on any change to the classes below or the types they share.
inline constexpr uint32_t api_version = 5;

struct abi_stamp {
  uint32_t version = 0;
  uint32_t compiler = 0;  // __GNUC__ * 10000 + __GNUC_MINOR__ * 100
  uint32_t sizes[10] = {};

  friend bool operator==(const abi_stamp&, const abi_stamp&) = default;
};

inline abi_stamp current_abi() noexcept {
  abi_stamp s;
  s.version = api_version;
#if defined(__GNUC__)
  s.compiler = uint32_t(__GNUC__ * 10000 + __GNUC_MINOR__ * 100);
#endif
  s.sizes[0] = uint32_t(sizeof(tensor));
  s.sizes[1] = uint32_t(sizeof(tensor_view));
  s.sizes[2] = uint32_t(sizeof(parameter));
  s.sizes[3] = uint32_t(sizeof(layer_spec));
  s.sizes[4] = uint32_t(sizeof(status));
  s.sizes[5] = uint32_t(sizeof(shape));
  s.sizes[6] = uint32_t(sizeof(std::string));
  s.sizes[7] = uint32_t(sizeof(optimizer_config));
  s.sizes[8] = uint32_t(sizeof(sparse_rows));
  s.sizes[9] = uint32_t(sizeof(loss_result));
  return s;
}

// One CUDA device's execution state: a stream, cuBLAS and cuDNN handles on
// it, a workspace shared by the units it made (sized when they prepare), and
// its device memory.
class context : public device_context {
public:
  virtual int ordinal() const noexcept = 0;
  // "NVIDIA H100 80GB HBM3, cc 9.0, CUDA runtime 13000, cuDNN 91900"
  virtual std::string description() const = 0;

  // How convolutions and matmuls compute (device_context.hpp's math_mode;
  // bf16 and f16 units keep 16-bit copies of their inputs):
  // tf32 by default, like PyTorch; f32 when the environment has
  // HETFLOW_CUDA_TF32=0. Read when a unit prepares a shape: set it before
  // the first forward.
  virtual void set_math(math_mode m) noexcept = 0;
  virtual math_mode math() const noexcept = 0;
  // Shorthands: strict f32 or tf32; whether tensor cores may run convolutions.
  void set_tf32(bool on) noexcept { set_math(on ? math_mode::tf32 : math_mode::f32); }
  bool tf32() const noexcept { return math() != math_mode::f32; }

  // Loss scaling: multiplies every dense gradient of `params` by `factor`
  // (and the values of sparse ones) in place, and says whether all of them
  // are finite afterwards. Waits for the answer.
  virtual expected<bool> scale_gradients(std::span<parameter* const> params, float factor) = 0;
  // t *= factor (t on this device).
  virtual status scale(mutable_tensor_view t, float factor) = 0;
  // y += a - b (y = 0 + (a - b) when !add_to_y); an empty b counts as 0.
  // All f32 of one element count, on this device. HetPipe's overlapped waves
  // sum each local step into its wave's update and add the kept updates to
  // a pulled G.
  virtual status accumulate(mutable_tensor_view y, tensor_view a, tensor_view b = {}, bool add_to_y = true) = 0;
  // accumulate() of every k (y[k], a[k], b[k]; b empty: no b, else one per
  // y, an empty b[k] counting as 0), and copy() of every k from src[k] to
  // dst[k], all f32 on this device, in a launch per 64 tensors rather than
  // one each (a HetPipe stage's per-parameter steps: dozens of small
  // tensors per minibatch, where the launches cost more than the work). No
  // destination may overlap another entry's destination or sources.
  virtual status accumulate_many(std::span<const mutable_tensor_view> y, std::span<const tensor_view> a,
                                 std::span<const tensor_view> b, bool add_to_y = true) = 0;
  virtual status copy_many(std::span<const tensor_view> src, std::span<const mutable_tensor_view> dst) = 0;
  // A point in this context's stream, after everything queued on it so far
  // (an event; freed with the last copy of the pointer), and a wait for
  // such a point, of any context of this device, queued on this stream:
  // what is queued here afterwards runs once the point has passed. Neither
  // makes the host wait.
  virtual expected<std::shared_ptr<void>> record_point() = 0;
  virtual status wait_for(const std::shared_ptr<void>& point) = 0;

  // The cuda counterpart of cpu::make_unit: same specs, same checks, same
  // parameter names, layouts and initialisation draws from `init`.
  virtual expected<built_unit> make_unit(const layer_spec& spec, const shape& sample_input, rng& init,
                                         const std::string& prefix = {}) = 0;

  // loss.hpp's softmax_cross_entropy for device logits: labels from the host
  // (checked there), grad (N, C) on this device or empty. Waits for the
  // result (two numbers come back to the host).
  virtual expected<loss_result> softmax_cross_entropy(tensor_view logits, std::span<const int32_t> labels,
                                                      mutable_tensor_view grad = {}) = 0;

  // optimizer.hpp's rules, applied on this device to device parameters
  // (dense, and sparse rows of embedding tables).
  virtual expected<std::unique_ptr<optimizer>> make_optimizer(const optimizer_config& config) = 0;

  // Embedding bags (cpu/embedding.hpp's semantics): table (rows, dim) and out
  // (bags, dim) on this device; indices and offsets from the host (checked
  // there). backward fills grad.rows (ascending, distinct) and grad.values
  // (device, (rows, dim)) from dout (bags, dim).
  virtual status embedding_bag_forward(tensor_view table, std::span<const int64_t> indices,
                                       std::span<const int64_t> offsets, bool mean, mutable_tensor_view out) = 0;
  virtual status embedding_bag_backward(int64_t table_rows, std::span<const int64_t> indices,
                                        std::span<const int64_t> offsets, bool mean, tensor_view dout,
                                        sparse_rows& grad) = 0;

  // Bytes of the shared workspace (the largest any prepared unit asked for).
  virtual std::size_t workspace_bytes() const noexcept = 0;

  // Page-locks host memory [p, p + bytes) (cudaHostRegister) so copies
  // between it and the device run at the link's speed; false when it
  // cannot (the pages overlap a locked range, no memory to lock): copies
  // from and to it then stay pageable, only slower. unpin_host(p) before
  // that memory is freed.
  virtual bool pin_host(void* p, std::size_t bytes) noexcept = 0;
  virtual void unpin_host(void* p) noexcept = 0;
};

// The loaded module. Lives as long as the process (never unloaded).
class backend {
public:
  virtual ~backend() = default;
  // Devices CUDA sees; on failure 0 and the reason in `why` ("CUDA driver
  // version is insufficient ...", "no CUDA-capable device is detected").
  virtual int device_count(std::string& why) = 0;
  virtual expected<std::shared_ptr<context>> make_context(int ordinal) = 0;
  // Versions of the CUDA runtime, cuBLAS and cuDNN the module runs with.
  virtual std::string versions() = 0;
};

}  // namespace hetflow::kernels::cuda

// The module's entry point: the backend when `host` equals the module's own
// abi_stamp, else nullptr with the reason in why (NUL-terminated, at most
// why_len bytes).
extern "C" {
using hetflow_cuda_backend_fn = hetflow::kernels::cuda::backend* (*)(const hetflow::kernels::cuda::abi_stamp* host,
                                                                       char* why, int why_len);
}
