#include "kernels/cuda/cuda_context.hpp"

#include <cudnn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels/cuda/ops.hpp"

namespace hetflow::kernels::cuda {

status make_current(int ordinal) {
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur == ordinal) return {};
  HF_CUDA_CHECK(cudaSetDevice(ordinal));
  return {};
}

// --- stream_memory ------------------------------------------------------------

expected<std::shared_ptr<stream_memory>> stream_memory::create(int ordinal) {
  HF_RETURN_IF_ERROR(make_current(ordinal));
  cudaStream_t s = nullptr;
  HF_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return std::shared_ptr<stream_memory>(new stream_memory(ordinal, s));
}

stream_memory::~stream_memory() {
  if (make_current(ordinal_).ok()) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

void* stream_memory::allocate(std::size_t bytes) {
  if (!make_current(ordinal_).ok()) throw std::bad_alloc();
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky; clear it for the next check
    throw std::bad_alloc();
  }
  return p;
}

void stream_memory::deallocate(void* p) noexcept {
  if (p == nullptr || !make_current(ordinal_).ok()) return;
  // Work queued on the stream may still read p.
  cudaStreamSynchronize(stream_);
  cudaFree(p);
}

status stream_memory::zero(void* p, std::size_t bytes) noexcept {
  if (bytes == 0) return {};
  HF_RETURN_IF_ERROR(make_current(ordinal_));
  HF_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
  return {};
}

status stream_memory::copy_within(void* dst, const void* src, std::size_t bytes) noexcept {
  if (bytes == 0) return {};
  HF_RETURN_IF_ERROR(make_current(ordinal_));
  HF_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  return {};
}

// --- context_impl ----------------------------------------------------------------

expected<std::shared_ptr<context_impl>> context_impl::create(int ordinal) {
  HF_ASSIGN_OR_RETURN(auto mem, stream_memory::create(ordinal));
  std::shared_ptr<context_impl> c(new context_impl(ordinal, std::move(mem)));
  HF_CUBLAS_CHECK(cublasCreate(&c->cublas_));
  HF_CUBLAS_CHECK(cublasSetStream(c->cublas_, c->stream()));
  // Full f32 for matmuls (PyTorch's default: allow_tf32 = False for matmul).
  HF_CUBLAS_CHECK(cublasSetMathMode(c->cublas_, CUBLAS_DEFAULT_MATH));
  HF_CUDNN_CHECK(cudnnCreate(&c->cudnn_));
  HF_CUDNN_CHECK(cudnnSetStream(c->cudnn_, c->stream()));
  HF_CUDA_CHECK(cudaMallocHost(&c->pinned_, 16));
  // HETFLOW_CUDA_TF32=0: strict f32 convolutions for contexts made by
  // make_device_context (train_single, the train job), e.g. to compare runs.
  if (const char* e = std::getenv("HETFLOW_CUDA_TF32"); e != nullptr && std::strcmp(e, "0") == 0) c->math_ = math_mode::f32;
  cudaDeviceProp p{};
  HF_CUDA_CHECK(cudaGetDeviceProperties(&p, ordinal));
  int rt = 0;
  cudaRuntimeGetVersion(&rt);
  c->description_ = std::string(p.name) + ", cc " + std::to_string(p.major) + "." + std::to_string(p.minor) +
                    ", CUDA runtime " + std::to_string(rt) + ", cuDNN " + std::to_string(cudnnGetVersion());
  try {
    c->totals_ = c->make_tensor({2}, dtype::i64);  // double + long long
  } catch (const std::bad_alloc&) {
    return make_error(errc::out_of_memory, "cuda:" + std::to_string(ordinal) + ": out of memory");
  }
  return c;
}

context_impl::~context_impl() {
  if (!make_current(ordinal_).ok()) return;
  cudaStreamSynchronize(stream());
  if (cudnn_) cudnnDestroy(cudnn_);
  if (cublas_) cublasDestroy(cublas_);
  if (pinned_) cudaFreeHost(pinned_);
}

void context_impl::run(const std::function<void()>& fn) {
  (void)activate();  // a failure here shows up as the first call's error
  fn();
}

status context_impl::check_here(tensor_view v, std::string_view who) const {
  if (v.where() == where()) return {};
  return make_error(errc::invalid_argument, std::string(who) + ": tensor " + v.shape().to_string() + " lives on " +
                                                v.where().to_string() + " but this runs on " + where().to_string() +
                                                "; copy it there with device_context::copy");
}

status context_impl::copy(tensor_view src, mutable_tensor_view dst) {
  if (src.type() != dst.type() || src.numel() != dst.numel())
    return make_error(errc::invalid_argument, "copy: source " + src.shape().to_string() + " " +
                                                  to_string(src.type()) + " does not fit destination " +
                                                  dst.shape().to_string() + " " + to_string(dst.type()));
  const bool src_host = src.where().kind == device_kind::cpu, dst_host = dst.where().kind == device_kind::cpu;
  if (src_host && dst_host) return copy_into(src, dst);
  if ((!src_host && src.where() != where()) || (!dst_host && dst.where() != where()))
    return make_error(errc::invalid_argument, "copy: " + src.where().to_string() + " -> " +
                                                  dst.where().to_string() + " through the context of " +
                                                  where().to_string());
  if (src.byte_size() == 0) return {};
  HF_RETURN_IF_ERROR(activate());
  HF_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), src.byte_size(), cudaMemcpyDefault, stream()));
  if (dst_host) HF_CUDA_CHECK(cudaStreamSynchronize(stream()));
  return {};
}

bool context_impl::pin_host(void* p, std::size_t bytes) noexcept {
  if (p == nullptr || bytes == 0 || !activate().ok()) return false;
  if (cudaHostRegister(p, bytes, cudaHostRegisterDefault) == cudaSuccess) return true;
  (void)cudaGetLastError();  // not sticky: clear it, the copies stay pageable
  return false;
}

void context_impl::unpin_host(void* p) noexcept {
  if (p == nullptr || !activate().ok()) return;
  if (cudaHostUnregister(p) != cudaSuccess) (void)cudaGetLastError();
}

status context_impl::synchronize() {
  HF_RETURN_IF_ERROR(activate());
  HF_CUDA_CHECK(cudaStreamSynchronize(stream()));
  return {};
}

status context_impl::reserve_workspace(std::size_t bytes) {
  if (bytes <= workspace_.capacity_bytes()) return {};
  try {
    if (workspace_.memory() == nullptr) workspace_ = make_tensor({int64_t(bytes)}, dtype::u8);
    else workspace_.resize({int64_t(bytes)}, dtype::u8);
  } catch (const std::bad_alloc&) {
    return make_error(errc::out_of_memory, where().to_string() + ": no room for a workspace of " +
                                               std::to_string(bytes >> 20) + " MiB");
  }
  return {};
}

std::size_t context_impl::workspace_limit() const {
  std::size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return std::size_t(256) << 20;
  // The workspace is shared by every unit; the model's activations need the rest.
  return std::clamp(free_b / 8, std::size_t(64) << 20, std::size_t(4) << 30);
}

expected<const float*> context_impl::ones(int64_t n) {
  if (ones_.numel() < n) {
    try {
      ones_ = make_tensor({std::max<int64_t>(n, 256)});
    } catch (const std::bad_alloc&) {
      return make_error(errc::out_of_memory, where().to_string() + ": out of memory");
    }
    HF_CUDA_CHECK(ops::fill(ones_.f32(), 1.0f, ones_.numel(), stream()));
  }
  return static_cast<const float*>(ones_.f32());
}

status context_impl::upload(const void* host, std::size_t bytes, tensor& dst, dtype t, int64_t count) {
  try {
    if (dst.memory() == nullptr) dst = make_tensor({std::max<int64_t>(count, 1)}, t);
    else dst.resize({std::max<int64_t>(count, 1)}, t);
  } catch (const std::bad_alloc&) {
    return make_error(errc::out_of_memory, where().to_string() + ": out of memory");
  }
  if (bytes == 0) return {};
  // From pageable memory this returns once the data is staged: the caller
  // may reuse `host` right away.
  HF_CUDA_CHECK(cudaMemcpyAsync(dst.bytes(), host, bytes, cudaMemcpyHostToDevice, stream()));
  return {};
}

expected<loss_result> context_impl::softmax_cross_entropy(tensor_view logits, std::span<const int32_t> labels,
                                                          mutable_tensor_view grad) {
  HF_RETURN_IF_ERROR(check_softmax_cross_entropy(logits, labels, grad));
  HF_RETURN_IF_ERROR(check_here(logits, "softmax_cross_entropy"));
  if (!grad.empty()) HF_RETURN_IF_ERROR(check_here(grad, "softmax_cross_entropy gradient"));
  const int64_t n = logits.shape()[0], c = logits.shape()[1];
  if (n == 0) return loss_result{};
  HF_RETURN_IF_ERROR(activate());
  HF_RETURN_IF_ERROR(upload(labels.data(), labels.size_bytes(), labels_, dtype::i32, n));
  try {
    if (row_loss_.memory() == nullptr) {
      row_loss_ = make_tensor({n});
      row_correct_ = make_tensor({n}, dtype::i32);
    } else {
      row_loss_.resize({n});
      row_correct_.resize({n}, dtype::i32);
    }
  } catch (const std::bad_alloc&) {
    return make_error(errc::out_of_memory, where().to_string() + ": out of memory");
  }
  auto* totals = reinterpret_cast<std::byte*>(totals_.bytes());
  HF_CUDA_CHECK(ops::softmax_xent(logits.f32(), labels_.data<int32_t>(), n, c, grad.empty() ? nullptr : grad.f32(),
                                  row_loss_.f32(), row_correct_.data<int32_t>(), reinterpret_cast<double*>(totals),
                                  reinterpret_cast<long long*>(totals + 8), stream()));
  HF_CUDA_CHECK(cudaMemcpyAsync(pinned_, totals, 16, cudaMemcpyDeviceToHost, stream()));
  HF_CUDA_CHECK(cudaStreamSynchronize(stream()));
  double sum = 0.0;
  long long correct = 0;
  std::memcpy(&sum, pinned_, 8);
  std::memcpy(&correct, static_cast<std::byte*>(pinned_) + 8, 8);
  loss_result r;
  r.loss = sum / double(n);
  r.correct = int64_t(correct);
  return r;
}

status context_impl::scale(mutable_tensor_view t, float factor) {
  HF_RETURN_IF_ERROR(check_here(t, "scaled tensor"));
  HF_RETURN_IF_ERROR(activate());
  int* flag = reinterpret_cast<int*>(totals_.bytes());
  HF_CUDA_CHECK(ops::scale_check(t.f32(), t.numel(), factor, flag, stream()));
  return {};
}

status context_impl::accumulate(mutable_tensor_view y, tensor_view a, tensor_view b, bool add_to_y) {
  HF_RETURN_IF_ERROR(check_here(y, "accumulated tensor"));
  HF_RETURN_IF_ERROR(check_here(a, "accumulate's a"));
  if (!b.empty()) HF_RETURN_IF_ERROR(check_here(b, "accumulate's b"));
  if (y.type() != dtype::f32 || a.type() != dtype::f32 || (!b.empty() && b.type() != dtype::f32) ||
      a.numel() != y.numel() || (!b.empty() && b.numel() != y.numel()))
    return make_error(errc::invalid_argument, "cuda accumulate: y, a and b must be f32 of " +
                                                  std::to_string(y.numel()) + " elements");
  HF_RETURN_IF_ERROR(activate());
  HF_CUDA_CHECK(ops::accumulate(y.f32(), a.f32(), b.empty() ? nullptr : b.f32(), y.numel(), add_to_y, stream()));
  return {};
}

status context_impl::accumulate_many(std::span<const mutable_tensor_view> y, std::span<const tensor_view> a,
                                     std::span<const tensor_view> b, bool add_to_y) {
  if (a.size() != y.size() || (!b.empty() && b.size() != y.size()))
    return make_error(errc::invalid_argument, "cuda accumulate_many: " + std::to_string(y.size()) + " sums, " +
                                                  std::to_string(a.size()) + " a and " + std::to_string(b.size()) + " b");
  std::vector<ops::batch_entry> entries;
  entries.reserve(y.size());
  for (std::size_t k = 0; k < y.size(); ++k) {
    const tensor_view bk = b.empty() ? tensor_view{} : b[k];
    HF_RETURN_IF_ERROR(check_here(y[k], "accumulated tensor"));
    HF_RETURN_IF_ERROR(check_here(a[k], "accumulate's a"));
    if (!bk.empty()) HF_RETURN_IF_ERROR(check_here(bk, "accumulate's b"));
    if (y[k].type() != dtype::f32 || a[k].type() != dtype::f32 || (!bk.empty() && bk.type() != dtype::f32) ||
        a[k].numel() != y[k].numel() || (!bk.empty() && bk.numel() != y[k].numel()))
      return make_error(errc::invalid_argument, "cuda accumulate_many: y, a and b of sum " + std::to_string(k) +
                                                    " must be f32 of " + std::to_string(y[k].numel()) + " elements");
    entries.push_back({y[k].f32(), a[k].f32(), bk.empty() ? nullptr : bk.f32(), y[k].numel()});
  }
  HF_RETURN_IF_ERROR(activate());
  HF_CUDA_CHECK(ops::batch_apply(entries.data(), int(entries.size()), /*copy=*/false, add_to_y, stream()));
  return {};
}

status context_impl::copy_many(std::span<const tensor_view> src, std::span<const mutable_tensor_view> dst) {
  if (src.size() != dst.size())
    return make_error(errc::invalid_argument, "cuda copy_many: " + std::to_string(src.size()) + " sources for " +
                                                  std::to_string(dst.size()) + " destinations");
  std::vector<ops::batch_entry> entries;
  entries.reserve(src.size());
  for (std::size_t k = 0; k < src.size(); ++k) {
    HF_RETURN_IF_ERROR(check_here(src[k], "copy_many's source"));
    HF_RETURN_IF_ERROR(check_here(dst[k], "copy_many's destination"));
    if (src[k].type() != dtype::f32 || dst[k].type() != dtype::f32 || src[k].numel() != dst[k].numel())
      return make_error(errc::invalid_argument, "cuda copy_many: source " + std::to_string(k) + " " +
                                                    src[k].shape().to_string() + " does not fit destination " +
                                                    dst[k].shape().to_string() + " (both f32 of one size)");
    entries.push_back({dst[k].f32(), src[k].f32(), nullptr, dst[k].numel()});
  }
  HF_RETURN_IF_ERROR(activate());
  HF_CUDA_CHECK(ops::batch_apply(entries.data(), int(entries.size()), /*copy=*/true, false, stream()));
  return {};
}

expected<std::shared_ptr<void>> context_impl::record_point() {
  HF_RETURN_IF_ERROR(activate());
  cudaEvent_t e = nullptr;
  HF_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  std::shared_ptr<void> point(e, [](void* x) { (void)cudaEventDestroy(static_cast<cudaEvent_t>(x)); });
  HF_CUDA_CHECK(cudaEventRecord(e, stream()));
  return point;
}

status context_impl::wait_for(const std::shared_ptr<void>& point) {
  if (!point) return make_error(errc::invalid_argument, "cuda wait_for: no point to wait for");
  HF_RETURN_IF_ERROR(activate());
  HF_CUDA_CHECK(cudaStreamWaitEvent(stream(), static_cast<cudaEvent_t>(point.get()), 0));
  return {};
}

expected<bool> context_impl::scale_gradients(std::span<parameter* const> params, float factor) {
  HF_RETURN_IF_ERROR(activate());
  // totals_ holds 16 bytes; its first int is the flag.
  int* flag = reinterpret_cast<int*>(totals_.bytes());
  HF_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), stream()));
  for (parameter* p : params) {
    if (p == nullptr) continue;
    tensor& g = p->sparse ? p->sparse_grad.values : p->grad;
    if (g.numel() == 0 || g.memory() == nullptr) continue;
    HF_CUDA_CHECK(ops::scale_check(g.f32(), g.numel(), factor, flag, stream()));
  }
  HF_CUDA_CHECK(cudaMemcpyAsync(pinned_, flag, sizeof(int), cudaMemcpyDeviceToHost, stream()));
  HF_CUDA_CHECK(cudaStreamSynchronize(stream()));
  int bad = 0;
  std::memcpy(&bad, pinned_, sizeof(int));
  return bad == 0;
}

}  // namespace hetflow::kernels::cuda
