// Inside libhetflow_cuda.so: the cuda::context implementation and the
// device memory it hands to tensors.
//
// Ownership: `stream_memory` owns the CUDA stream (tensors keep it alive, so
// a tensor freed after its context still frees on a valid stream); the
// context owns the cuBLAS and cuDNN handles (bound to that stream), the
// shared workspace and small scratch buffers. Units hold a reference to the
// context that made them; models destroy units before their context.
//
// Thread affinity: one thread drives a context at a time (unit.hpp). Every
// entry point makes the context's device current on the calling thread.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <memory>
#include <string>
#include <string_view>

#include "kernels/cuda/cuda_api.hpp"
#include "kernels/cuda/cuda_check.hpp"

namespace hetflow::kernels::cuda {

// Device copies of an embedding bag plan (embedding.hpp).
struct bag_buffers {
  tensor indices, starts, use_bag, use_weight, row_start;
};

// Makes `ordinal` the calling thread's current device.
status make_current(int ordinal);

class stream_memory final : public device_allocator {
public:
  static expected<std::shared_ptr<stream_memory>> create(int ordinal);
  ~stream_memory() override;

  device where() const noexcept override { return device::cuda(ordinal_); }
  void* allocate(std::size_t bytes) override;
  void deallocate(void* p) noexcept override;
  status zero(void* p, std::size_t bytes) noexcept override;
  status copy_within(void* dst, const void* src, std::size_t bytes) noexcept override;

  int ordinal() const noexcept { return ordinal_; }
  cudaStream_t stream() const noexcept { return stream_; }

private:
  stream_memory(int ordinal, cudaStream_t s) : ordinal_(ordinal), stream_(s) {}
  int ordinal_;
  cudaStream_t stream_;
};

class context_impl final : public context {
public:
  static expected<std::shared_ptr<context_impl>> create(int ordinal);
  ~context_impl() override;

  // device_context
  device where() const noexcept override { return device::cuda(ordinal_); }
  int threads() const noexcept override { return 1; }
  void run(const std::function<void()>& fn) override;
  std::shared_ptr<device_allocator> memory() override { return memory_; }
  status copy(tensor_view src, mutable_tensor_view dst) override;
  status synchronize() override;

  // cuda::context
  int ordinal() const noexcept override { return ordinal_; }
  std::string description() const override { return description_; }
  void set_math(math_mode m) noexcept override { math_ = m; }
  math_mode math() const noexcept override { return math_; }
  expected<bool> scale_gradients(std::span<parameter* const> params, float factor) override;
  status scale(mutable_tensor_view t, float factor) override;
  status accumulate(mutable_tensor_view y, tensor_view a, tensor_view b, bool add_to_y) override;
  status accumulate_many(std::span<const mutable_tensor_view> y, std::span<const tensor_view> a,
                         std::span<const tensor_view> b, bool add_to_y) override;
  status copy_many(std::span<const tensor_view> src, std::span<const mutable_tensor_view> dst) override;
  expected<std::shared_ptr<void>> record_point() override;
  status wait_for(const std::shared_ptr<void>& point) override;
  expected<built_unit> make_unit(const layer_spec& spec, const shape& sample_input, rng& init,
                                 const std::string& prefix) override;
  expected<loss_result> softmax_cross_entropy(tensor_view logits, std::span<const int32_t> labels,
                                              mutable_tensor_view grad) override;
  expected<std::unique_ptr<optimizer>> make_optimizer(const optimizer_config& config) override;
  status embedding_bag_forward(tensor_view table, std::span<const int64_t> indices,
                               std::span<const int64_t> offsets, bool mean, mutable_tensor_view out) override;
  status embedding_bag_backward(int64_t table_rows, std::span<const int64_t> indices,
                                std::span<const int64_t> offsets, bool mean, tensor_view dout,
                                sparse_rows& grad) override;
  std::size_t workspace_bytes() const noexcept override { return workspace_.capacity_bytes(); }
  bool pin_host(void* p, std::size_t bytes) noexcept override;
  void unpin_host(void* p) noexcept override;

  // For the units.
  status activate() const { return make_current(ordinal_); }
  cudaStream_t stream() const noexcept { return memory_->stream(); }
  cublasHandle_t cublas() const noexcept { return cublas_; }
  cudnnHandle_t cudnn() const noexcept { return cudnn_; }
  const std::shared_ptr<stream_memory>& device_memory() const noexcept { return memory_; }
  // A tensor on this device (throws std::bad_alloc like tensor::empty).
  tensor make_tensor(const shape& s, dtype t = dtype::f32) { return tensor::empty_on(memory_, s, t); }
  // Grows the shared workspace to at least `bytes` (prepare time only: it
  // reallocates). Units read workspace()/workspace_size() at each call.
  status reserve_workspace(std::size_t bytes);
  void* workspace() noexcept { return workspace_.empty() ? nullptr : workspace_.bytes(); }
  std::size_t workspace_size() const noexcept { return workspace_.capacity_bytes(); }
  // Largest workspace an algorithm may ask for (a share of free memory).
  std::size_t workspace_limit() const;
  // n ones (for bias gradients by gemv); grows at prepare time.
  expected<const float*> ones(int64_t n);
  // errc::invalid_argument unless v lives on this device.
  // `who` a literal, spelled out only in the error: copy_many and
  // accumulate_many check every tensor of every call.
  status check_here(tensor_view v, std::string_view who) const;
  // Host -> device copy of a small host array into `dst` (resized), ordered
  // on the stream; the host data may be reused when it returns.
  status upload(const void* host, std::size_t bytes, tensor& dst, dtype t, int64_t count);

private:
  context_impl(int ordinal, std::shared_ptr<stream_memory> memory) : ordinal_(ordinal), memory_(std::move(memory)) {}

  int ordinal_;
  std::shared_ptr<stream_memory> memory_;
  cublasHandle_t cublas_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  math_mode math_ = math_mode::tf32;
  std::string description_;
  tensor workspace_;
  tensor ones_;
  // Loss scratch: per-row values on the device, totals in pinned memory.
  tensor row_loss_, row_correct_, labels_, totals_;
  void* pinned_ = nullptr;  // double loss, long long correct
  // Embedding bag scratch (standalone op).
  bag_buffers bag_scratch_;
};

}  // namespace hetflow::kernels::cuda
