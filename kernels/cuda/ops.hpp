// Inside libhetflow_cuda.so: our own CUDA kernels, where no cuBLAS / cuDNN
// call fits (elementwise, bias + ReLU epilogues, dropout, loss, embedding
// bags, DLRM's dot interaction, optimizer updates). Each launcher queues its
// kernel on `s` and returns cudaGetLastError(), so callers write
// HF_CUDA_CHECK(ops::relu_forward(...)) and an error names the launch.
// Pointers are device pointers unless said otherwise. Sizes are element
// counts; an empty range launches nothing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace hetflow::kernels::cuda::ops {

cudaError_t fill(float* p, float value, int64_t n, cudaStream_t s);

// f32 -> 16-bit (bf16 when `bf16`, else IEEE half; round to nearest even)
// and back. The 16-bit buffers hold n elements of 2 bytes.
cudaError_t to_16bit(const float* x, void* y, int64_t n, bool bf16, cudaStream_t s);
cudaError_t from_16bit(const void* x, float* y, int64_t n, bool bf16, cudaStream_t s);

// p[i] *= factor; sets *nonfinite (a device int) to 1 when a result is inf or
// NaN, leaves it otherwise (loss scaling's unscale and overflow check).
cudaError_t scale_check(float* p, int64_t n, float factor, int* nonfinite, cudaStream_t s);

// y[i] = act(y[i] + bias[(i / inner) % channels]); bias may be null (no add).
// Linear: channels = out, inner = 1. NCHW conv: channels = C, inner = H*W.
cudaError_t bias_relu(float* y, const float* bias, int64_t n, int64_t channels, int64_t inner, bool relu,
                      cudaStream_t s);

cudaError_t relu_forward(const float* x, float* y, int64_t n, cudaStream_t s);
// dx = y > 0 ? dy : 0 (y: the ReLU's output); dx may alias dy.
cudaError_t relu_backward(const float* dy, const float* y, float* dx, int64_t n, cudaStream_t s);
// out = act(a + b); out may alias a or b.
cudaError_t add(const float* a, const float* b, float* out, int64_t n, bool relu, cudaStream_t s);
// y = (add_to_y ? y : 0) + (a - b) (b null: a).
cudaError_t accumulate(float* y, const float* a, const float* b, int64_t n, bool add_to_y, cudaStream_t s);
// Many of accumulate's sums, or plain copies, in one launch per
// batch_max entries: entry k: y = (add_to_y ? y : 0) + (a - b) (b null: a);
// with `copy`, y = a (b and add_to_y unused). No entry's y may overlap
// another entry's y, a or b (one launch runs them in any order). HetPipe's per-parameter steps (a few dozen small
// tensors per minibatch) pay one launch instead of one per tensor.
struct batch_entry {
  float* y;
  const float* a;
  const float* b;
  int64_t n;
};
constexpr int batch_max = 64;
cudaError_t batch_apply(const batch_entry* entries, int count, bool copy, bool add_to_y, cudaStream_t s);
// out = a * b.
cudaError_t multiply(const float* a, const float* b, float* out, int64_t n, cudaStream_t s);
// dst[r * dst_ld + j] += src[r * src_ld + j] for r < rows, j < cols.
cudaError_t add_rows(const float* src, int64_t src_ld, float* dst, int64_t dst_ld, int64_t rows, int64_t cols,
                     cudaStream_t s);

// Inverted dropout with the cpu backend's mask: u = unit(splitmix64(key + i)),
// mask = u >= p ? scale : 0, y = x * mask.
cudaError_t dropout_forward(const float* x, float* y, float* mask, int64_t n, uint64_t key, float p, float scale,
                            cudaStream_t s);

// Per row of logits (n, c): loss = logsumexp - logit[label], correct = argmax
// == label (lowest index among ties), grad (nullable) = (softmax - onehot) / n.
// Then totals[0] = sum of row losses (double), counts[0] = sum of correct,
// summed in a fixed order (deterministic).
cudaError_t softmax_xent(const float* logits, const int32_t* labels, int64_t n, int64_t c, float* grad,
                         float* row_loss, int32_t* row_correct, double* total_loss, long long* total_correct,
                         cudaStream_t s);

// out[b * out_ld + j] = sum (or mean) over i in [starts[b], starts[b+1]) of
// table[indices[i] * dim + j].
cudaError_t embedding_bag_forward(const float* table, int64_t dim, const int64_t* indices, const int64_t* starts,
                                  int64_t bags, bool mean, float* out, int64_t out_ld, cudaStream_t s);
// values[r * dim + j] = sum over u in [row_start[r], row_start[r+1]) of
// use_weight[u] * dout[use_bag[u] * dout_ld + j]: uses sorted by row, so the
// order of accumulation is fixed (deterministic, like the cpu backend's).
cudaError_t embedding_bag_backward(const float* dout, int64_t dout_ld, int64_t dim, const int64_t* use_bag,
                                   const float* use_weight, const int64_t* row_start, int64_t rows, float* values,
                                   cudaStream_t s);

// DLRM: t (n, f, d) -> z (n, f(f-1)/2), z = <t_i, t_j> for i = 1..f-1, j < i.
cudaError_t dot_interaction_forward(const float* t, int64_t n, int64_t f, int64_t d, float* z, cudaStream_t s);
// dt (n, f, d) = d z / d t contracted with dz, overwritten.
cudaError_t dot_interaction_backward(const float* t, const float* dz, int64_t n, int64_t f, int64_t d, float* dt,
                                     cudaStream_t s);

// Batch norm with fixed statistics (eval mode) backward, NCHW (hw = 1 for
// (N, C)): xhat = (x - mean) * rsqrt(var + eps); dgamma = sum dy * xhat,
// dbeta = sum dy per channel; dx (nullable) = dy * gamma * rsqrt(var + eps).
cudaError_t batch_norm_frozen_backward(const float* x, const float* dy, const float* mean, const float* var,
                                       const float* gamma, float eps, int64_t n, int64_t c, int64_t hw, float* dx,
                                       float* dgamma, float* dbeta, cudaStream_t s);

// Optimizer updates (optimizer.hpp's rules). Dense: n elements. Sparse: for
// each of `count` rows rows[k] of width dim, g row k of `g`.
cudaError_t sgd_update(float* w, const float* g, float* buf, int64_t n, float lr, float momentum, float wd,
                       bool nesterov, cudaStream_t s);
cudaError_t sgd_sparse_update(float* w, const float* g, float* buf, const int64_t* rows, int64_t count,
                              int64_t dim, float lr, float momentum, float wd, bool nesterov, cudaStream_t s);
cudaError_t adam_update(float* w, const float* g, float* m, float* v, int64_t n, float step_size, float b1,
                        float b2, float eps, float wd, float inv_sqrt_bc2, cudaStream_t s);
cudaError_t adam_sparse_update(float* w, const float* g, float* m, float* v, const int64_t* rows, int64_t count,
                               int64_t dim, float step_size, float b1, float b2, float eps, float wd,
                               float inv_sqrt_bc2, cudaStream_t s);

// Runs y = a*x + b over n floats (the module's self-test).
cudaError_t affine(const float* x, float* y, int64_t n, float a, float b, cudaStream_t s);

}  // namespace hetflow::kernels::cuda::ops
