// Our own CUDA kernels (see ops.hpp for the contracts).
//
// Elementwise kernels use grid-stride loops over int64 indices so any size
// fits one launch. Reductions that feed results back (loss, batch norm
// statistics, embedding gradients) sum in a fixed order: the same inputs give
// the same bits on every run.
#include "kernels/cuda/ops.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

namespace hetflow::kernels::cuda::ops {
namespace {

constexpr int block = 256;

int blocks_for(int64_t n) {
  int64_t b = (n + block - 1) / block;
  return int(std::min<int64_t>(std::max<int64_t>(b, 1), 65535 * 8));
}

#define HF_GRID_STRIDE(i, n) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(blockDim.x) * gridDim.x)

__global__ void fill_k(float* p, float v, int64_t n) {
  HF_GRID_STRIDE(i, n) p[i] = v;
}

__global__ void to_bf16_k(const float* x, __nv_bfloat16* y, int64_t n) {
  HF_GRID_STRIDE(i, n) y[i] = __float2bfloat16_rn(x[i]);
}
__global__ void to_half_k(const float* x, __half* y, int64_t n) {
  HF_GRID_STRIDE(i, n) y[i] = __float2half_rn(x[i]);
}
__global__ void from_bf16_k(const __nv_bfloat16* x, float* y, int64_t n) {
  HF_GRID_STRIDE(i, n) y[i] = __bfloat162float(x[i]);
}
__global__ void from_half_k(const __half* x, float* y, int64_t n) {
  HF_GRID_STRIDE(i, n) y[i] = __half2float(x[i]);
}

__global__ void scale_check_k(float* p, int64_t n, float factor, int* nonfinite) {
  bool bad = false;
  HF_GRID_STRIDE(i, n) {
    const float v = p[i] * factor;
    p[i] = v;
    bad |= !isfinite(v);
  }
  if (bad) *nonfinite = 1;
}

__global__ void bias_relu_k(float* y, const float* bias, int64_t n, int64_t channels, int64_t inner, bool relu) {
  HF_GRID_STRIDE(i, n) {
    float v = y[i];
    if (bias != nullptr) v += bias[(i / inner) % channels];
    y[i] = relu ? fmaxf(v, 0.0f) : v;
  }
}

__global__ void relu_k(const float* x, float* y, int64_t n) {
  HF_GRID_STRIDE(i, n) y[i] = fmaxf(x[i], 0.0f);
}

__global__ void relu_back_k(const float* dy, const float* y, float* dx, int64_t n) {
  HF_GRID_STRIDE(i, n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

__global__ void add_k(const float* a, const float* b, float* out, int64_t n, bool relu) {
  HF_GRID_STRIDE(i, n) {
    float v = a[i] + b[i];
    out[i] = relu ? fmaxf(v, 0.0f) : v;
  }
}

__global__ void accumulate_k(float* y, const float* a, const float* b, int64_t n, bool add_to_y) {
  HF_GRID_STRIDE(i, n) y[i] = (add_to_y ? y[i] : 0.0f) + (b ? a[i] - b[i] : a[i]);
}

// Kernel parameters (2 KiB, under the 4 KiB every architecture takes):
// block row blockIdx.y serves entry blockIdx.y.
struct batch_args {
  batch_entry e[batch_max];
  int count;
  bool copy;
  bool add_to_y;
};
__global__ void batch_k(const batch_args args) {
  const batch_entry x = args.e[blockIdx.y];
  HF_GRID_STRIDE(i, x.n) {
    if (args.copy) x.y[i] = x.a[i];
    else x.y[i] = (args.add_to_y ? x.y[i] : 0.0f) + (x.b ? x.a[i] - x.b[i] : x.a[i]);
  }
}

__global__ void mul_k(const float* a, const float* b, float* out, int64_t n) {
  HF_GRID_STRIDE(i, n) out[i] = a[i] * b[i];
}

__global__ void add_rows_k(const float* src, int64_t src_ld, float* dst, int64_t dst_ld, int64_t rows,
                           int64_t cols) {
  HF_GRID_STRIDE(i, rows * cols) {
    int64_t r = i / cols, j = i % cols;
    dst[r * dst_ld + j] += src[r * src_ld + j];
  }
}

// random.hpp's splitmix64 and to_unit_float, on the device.
__device__ __forceinline__ uint64_t splitmix64_d(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__global__ void dropout_k(const float* x, float* y, float* mask, int64_t n, uint64_t key, float p, float scale) {
  HF_GRID_STRIDE(i, n) {
    float u = float(splitmix64_d(key + uint64_t(i)) >> 40) * (1.0f / 16777216.0f);
    float m = u >= p ? scale : 0.0f;
    mask[i] = m;
    y[i] = x[i] * m;
  }
}

// One warp per row.
__global__ void softmax_xent_k(const float* logits, const int32_t* labels, int64_t n, int64_t c, float* grad,
                               float* row_loss, int32_t* row_correct) {
  const int lane = threadIdx.x & 31;
  const int64_t warps_per_block = blockDim.x / 32;
  for (int64_t r = int64_t(blockIdx.x) * warps_per_block + threadIdx.x / 32; r < n;
       r += int64_t(gridDim.x) * warps_per_block) {
    const float* row = logits + r * c;
    float mx = -INFINITY;
    int64_t arg = c;
    for (int64_t j = lane; j < c; j += 32) {
      float v = row[j];
      if (v > mx || (v == mx && j < arg)) {
        mx = v;
        arg = j;
      }
    }
    for (int off = 16; off > 0; off >>= 1) {
      float om = __shfl_down_sync(0xffffffffu, mx, off);
      int64_t oa = __shfl_down_sync(0xffffffffu, arg, off);
      if (om > mx || (om == mx && oa < arg)) {
        mx = om;
        arg = oa;
      }
    }
    mx = __shfl_sync(0xffffffffu, mx, 0);
    arg = __shfl_sync(0xffffffffu, arg, 0);
    float sum = 0.0f;
    for (int64_t j = lane; j < c; j += 32) sum += expf(row[j] - mx);
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, off);
    sum = __shfl_sync(0xffffffffu, sum, 0);
    const int32_t y = labels[r];
    if (grad != nullptr) {
      const float inv_sum = 1.0f / sum, inv_n = 1.0f / float(n);
      float* g = grad + r * c;
      for (int64_t j = lane; j < c; j += 32) g[j] = expf(row[j] - mx) * inv_sum * inv_n - (j == y ? inv_n : 0.0f);
    }
    if (lane == 0) {
      row_loss[r] = logf(sum) + mx - row[y];
      row_correct[r] = arg == y ? 1 : 0;
    }
  }
}

// One block: fixed-order partial sums, then a fixed-order tree.
__global__ void sum_rows_k(const float* row_loss, const int32_t* row_correct, int64_t n, double* total,
                           long long* correct) {
  __shared__ double ls[block];
  __shared__ long long cs[block];
  double l = 0.0;
  long long k = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    l += double(row_loss[i]);
    k += row_correct[i];
  }
  ls[threadIdx.x] = l;
  cs[threadIdx.x] = k;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (int(threadIdx.x) < w) {
      ls[threadIdx.x] += ls[threadIdx.x + w];
      cs[threadIdx.x] += cs[threadIdx.x + w];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    *total = ls[0];
    *correct = cs[0];
  }
}

__global__ void bag_fwd_k(const float* table, int64_t dim, const int64_t* indices, const int64_t* starts,
                          int64_t bags, bool mean, float* out, int64_t out_ld) {
  HF_GRID_STRIDE(i, bags * dim) {
    int64_t b = i / dim, j = i % dim;
    int64_t s = starts[b], e = starts[b + 1];
    float acc = 0.0f;
    for (int64_t k = s; k < e; ++k) acc += table[indices[k] * dim + j];
    if (mean && e > s) acc *= 1.0f / float(e - s);
    out[b * out_ld + j] = acc;
  }
}

__global__ void bag_bwd_k(const float* dout, int64_t dout_ld, int64_t dim, const int64_t* use_bag,
                          const float* use_weight, const int64_t* row_start, int64_t rows, float* values) {
  HF_GRID_STRIDE(i, rows * dim) {
    int64_t r = i / dim, j = i % dim;
    float acc = 0.0f;
    for (int64_t u = row_start[r]; u < row_start[r + 1]; ++u) acc += use_weight[u] * dout[use_bag[u] * dout_ld + j];
    values[i] = acc;
  }
}

// One thread per (sample, pair).
__global__ void interact_fwd_k(const float* t, int64_t n, int64_t f, int64_t d, float* z) {
  const int64_t pairs = f * (f - 1) / 2;
  HF_GRID_STRIDE(idx, n * pairs) {
    int64_t s = idx / pairs, k = idx % pairs;
    // k = i*(i-1)/2 + j with j < i.
    int64_t i = int64_t((1.0 + sqrt(1.0 + 8.0 * double(k))) / 2.0);
    while (i * (i - 1) / 2 > k) --i;
    while ((i + 1) * i / 2 <= k) ++i;
    int64_t j = k - i * (i - 1) / 2;
    const float* a = t + (s * f + i) * d;
    const float* b = t + (s * f + j) * d;
    float acc = 0.0f;
    for (int64_t x = 0; x < d; ++x) acc += a[x] * b[x];
    z[idx] = acc;
  }
}

// One thread per (sample, feature, element): dt[s,p,x] = sum over q != p of
// dz[pair(p,q)] * t[s,q,x], in q order.
__global__ void interact_bwd_k(const float* t, const float* dz, int64_t n, int64_t f, int64_t d, float* dt) {
  const int64_t pairs = f * (f - 1) / 2;
  HF_GRID_STRIDE(idx, n * f * d) {
    int64_t x = idx % d, p = (idx / d) % f, s = idx / (d * f);
    const float* g = dz + s * pairs;
    const float* ts = t + s * f * d;
    float acc = 0.0f;
    for (int64_t q = 0; q < f; ++q) {
      if (q == p) continue;
      int64_t i = p > q ? p : q, j = p > q ? q : p;
      acc += g[i * (i - 1) / 2 + j] * ts[q * d + x];
    }
    dt[idx] = acc;
  }
}

// One block per channel.
__global__ void bn_frozen_reduce_k(const float* x, const float* dy, const float* mean, const float* var,
                                   float eps, int64_t n, int64_t c, int64_t hw, float* dgamma, float* dbeta) {
  __shared__ float s_dy[block], s_dyx[block];
  const int64_t ch = blockIdx.x;
  const float m = mean[ch], inv = rsqrtf(var[ch] + eps);
  float a = 0.0f, b = 0.0f;
  for (int64_t k = threadIdx.x; k < n * hw; k += blockDim.x) {
    int64_t idx = (k / hw) * c * hw + ch * hw + k % hw;
    float g = dy[idx];
    a += g;
    b += g * (x[idx] - m) * inv;
  }
  s_dy[threadIdx.x] = a;
  s_dyx[threadIdx.x] = b;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (int(threadIdx.x) < w) {
      s_dy[threadIdx.x] += s_dy[threadIdx.x + w];
      s_dyx[threadIdx.x] += s_dyx[threadIdx.x + w];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    dbeta[ch] = s_dy[0];
    dgamma[ch] = s_dyx[0];
  }
}

__global__ void bn_frozen_dx_k(const float* dy, const float* var, const float* gamma, float eps, int64_t total,
                               int64_t c, int64_t hw, float* dx) {
  HF_GRID_STRIDE(i, total) {
    int64_t ch = (i / hw) % c;
    dx[i] = dy[i] * gamma[ch] * rsqrtf(var[ch] + eps);
  }
}

__device__ __forceinline__ void sgd_one(float& w, float g, float& buf, float lr, float mu, float wd, bool nesterov) {
  const float d = g + wd * w;
  if (mu == 0.0f) {
    w -= lr * d;
    return;
  }
  const float v = mu * buf + d;
  buf = v;
  w -= lr * (nesterov ? d + mu * v : v);
}

__device__ __forceinline__ void adam_one(float& w, float g, float& m, float& v, float step_size, float b1, float b2,
                                         float eps, float wd, float inv_sqrt_bc2) {
  const float gj = g + wd * w;
  const float mj = b1 * m + (1.0f - b1) * gj;
  const float vj = b2 * v + (1.0f - b2) * gj * gj;
  m = mj;
  v = vj;
  w -= step_size * mj / (sqrtf(vj) * inv_sqrt_bc2 + eps);
}

__global__ void sgd_k(float* w, const float* g, float* buf, int64_t n, float lr, float mu, float wd, bool nesterov) {
  float dummy = 0.0f;
  HF_GRID_STRIDE(i, n) sgd_one(w[i], g[i], buf ? buf[i] : dummy, lr, mu, wd, nesterov);
}

__global__ void sgd_sparse_k(float* w, const float* g, float* buf, const int64_t* rows, int64_t count, int64_t dim,
                             float lr, float mu, float wd, bool nesterov) {
  float dummy = 0.0f;
  HF_GRID_STRIDE(i, count * dim) {
    int64_t k = i / dim, j = i % dim;
    int64_t off = rows[k] * dim + j;
    sgd_one(w[off], g[i], buf ? buf[off] : dummy, lr, mu, wd, nesterov);
  }
}

__global__ void adam_k(float* w, const float* g, float* m, float* v, int64_t n, float step_size, float b1, float b2,
                       float eps, float wd, float inv_sqrt_bc2) {
  HF_GRID_STRIDE(i, n) adam_one(w[i], g[i], m[i], v[i], step_size, b1, b2, eps, wd, inv_sqrt_bc2);
}

__global__ void adam_sparse_k(float* w, const float* g, float* m, float* v, const int64_t* rows, int64_t count,
                              int64_t dim, float step_size, float b1, float b2, float eps, float wd,
                              float inv_sqrt_bc2) {
  HF_GRID_STRIDE(i, count * dim) {
    int64_t k = i / dim, j = i % dim;
    int64_t off = rows[k] * dim + j;
    adam_one(w[off], g[i], m[off], v[off], step_size, b1, b2, eps, wd, inv_sqrt_bc2);
  }
}

__global__ void affine_k(const float* x, float* y, int64_t n, float a, float b) {
  HF_GRID_STRIDE(i, n) y[i] = a * x[i] + b;
}

}  // namespace

#define HF_LAUNCH(kernel, n, ...)                                    \
  do {                                                               \
    if ((n) <= 0) return cudaSuccess;                                \
    kernel<<<blocks_for(n), block, 0, s>>>(__VA_ARGS__);             \
    return cudaGetLastError();                                       \
  } while (0)

cudaError_t fill(float* p, float value, int64_t n, cudaStream_t s) { HF_LAUNCH(fill_k, n, p, value, n); }

cudaError_t to_16bit(const float* x, void* y, int64_t n, bool bf16, cudaStream_t s) {
  if (bf16) HF_LAUNCH(to_bf16_k, n, x, static_cast<__nv_bfloat16*>(y), n);
  HF_LAUNCH(to_half_k, n, x, static_cast<__half*>(y), n);
}

cudaError_t from_16bit(const void* x, float* y, int64_t n, bool bf16, cudaStream_t s) {
  if (bf16) HF_LAUNCH(from_bf16_k, n, static_cast<const __nv_bfloat16*>(x), y, n);
  HF_LAUNCH(from_half_k, n, static_cast<const __half*>(x), y, n);
}

cudaError_t scale_check(float* p, int64_t n, float factor, int* nonfinite, cudaStream_t s) {
  HF_LAUNCH(scale_check_k, n, p, n, factor, nonfinite);
}

cudaError_t bias_relu(float* y, const float* bias, int64_t n, int64_t channels, int64_t inner, bool relu,
                      cudaStream_t s) {
  if (bias == nullptr && !relu) return cudaSuccess;
  HF_LAUNCH(bias_relu_k, n, y, bias, n, channels, inner, relu);
}

cudaError_t relu_forward(const float* x, float* y, int64_t n, cudaStream_t s) { HF_LAUNCH(relu_k, n, x, y, n); }

cudaError_t relu_backward(const float* dy, const float* y, float* dx, int64_t n, cudaStream_t s) {
  HF_LAUNCH(relu_back_k, n, dy, y, dx, n);
}

cudaError_t add(const float* a, const float* b, float* out, int64_t n, bool relu, cudaStream_t s) {
  HF_LAUNCH(add_k, n, a, b, out, n, relu);
}

cudaError_t accumulate(float* y, const float* a, const float* b, int64_t n, bool add_to_y, cudaStream_t s) {
  HF_LAUNCH(accumulate_k, n, y, a, b, n, add_to_y);
}

cudaError_t batch_apply(const batch_entry* entries, int count, bool copy, bool add_to_y, cudaStream_t s) {
  for (int k = 0; k < count;) {
    batch_args args{};
    args.copy = copy;
    args.add_to_y = add_to_y;
    int64_t most = 0;
    for (; k < count && args.count < batch_max; ++k) {
      if (entries[k].n <= 0) continue;
      args.e[args.count++] = entries[k];
      most = std::max(most, entries[k].n);
    }
    if (args.count == 0) break;
    // Enough blocks per entry for the largest to stream; fewer than one
    // tensor's launch would take, as every row of the grid gets as many.
    const int per = std::min(blocks_for(most), 1024);
    batch_k<<<dim3(unsigned(per), unsigned(args.count)), block, 0, s>>>(args);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t multiply(const float* a, const float* b, float* out, int64_t n, cudaStream_t s) {
  HF_LAUNCH(mul_k, n, a, b, out, n);
}

cudaError_t add_rows(const float* src, int64_t src_ld, float* dst, int64_t dst_ld, int64_t rows, int64_t cols,
                     cudaStream_t s) {
  HF_LAUNCH(add_rows_k, rows * cols, src, src_ld, dst, dst_ld, rows, cols);
}

cudaError_t dropout_forward(const float* x, float* y, float* mask, int64_t n, uint64_t key, float p, float scale,
                            cudaStream_t s) {
  HF_LAUNCH(dropout_k, n, x, y, mask, n, key, p, scale);
}

cudaError_t softmax_xent(const float* logits, const int32_t* labels, int64_t n, int64_t c, float* grad,
                         float* row_loss, int32_t* row_correct, double* total_loss, long long* total_correct,
                         cudaStream_t s) {
  if (n > 0) {
    const int warps = block / 32;
    int64_t blocks = std::min<int64_t>((n + warps - 1) / warps, 65535 * 8);
    softmax_xent_k<<<int(blocks), block, 0, s>>>(logits, labels, n, c, grad, row_loss, row_correct);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  sum_rows_k<<<1, block, 0, s>>>(row_loss, row_correct, n, total_loss, total_correct);
  return cudaGetLastError();
}

cudaError_t embedding_bag_forward(const float* table, int64_t dim, const int64_t* indices, const int64_t* starts,
                                  int64_t bags, bool mean, float* out, int64_t out_ld, cudaStream_t s) {
  HF_LAUNCH(bag_fwd_k, bags * dim, table, dim, indices, starts, bags, mean, out, out_ld);
}

cudaError_t embedding_bag_backward(const float* dout, int64_t dout_ld, int64_t dim, const int64_t* use_bag,
                                   const float* use_weight, const int64_t* row_start, int64_t rows, float* values,
                                   cudaStream_t s) {
  HF_LAUNCH(bag_bwd_k, rows * dim, dout, dout_ld, dim, use_bag, use_weight, row_start, rows, values);
}

cudaError_t dot_interaction_forward(const float* t, int64_t n, int64_t f, int64_t d, float* z, cudaStream_t s) {
  HF_LAUNCH(interact_fwd_k, n * (f * (f - 1) / 2), t, n, f, d, z);
}

cudaError_t dot_interaction_backward(const float* t, const float* dz, int64_t n, int64_t f, int64_t d, float* dt,
                                     cudaStream_t s) {
  HF_LAUNCH(interact_bwd_k, n * f * d, t, dz, n, f, d, dt);
}

cudaError_t batch_norm_frozen_backward(const float* x, const float* dy, const float* mean, const float* var,
                                       const float* gamma, float eps, int64_t n, int64_t c, int64_t hw, float* dx,
                                       float* dgamma, float* dbeta, cudaStream_t s) {
  if (c <= 0) return cudaSuccess;
  bn_frozen_reduce_k<<<unsigned(c), block, 0, s>>>(x, dy, mean, var, eps, n, c, hw, dgamma, dbeta);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  if (dx == nullptr) return cudaSuccess;
  HF_LAUNCH(bn_frozen_dx_k, n * c * hw, dy, var, gamma, eps, n * c * hw, c, hw, dx);
}

cudaError_t sgd_update(float* w, const float* g, float* buf, int64_t n, float lr, float momentum, float wd,
                       bool nesterov, cudaStream_t s) {
  HF_LAUNCH(sgd_k, n, w, g, buf, n, lr, momentum, wd, nesterov);
}

cudaError_t sgd_sparse_update(float* w, const float* g, float* buf, const int64_t* rows, int64_t count,
                              int64_t dim, float lr, float momentum, float wd, bool nesterov, cudaStream_t s) {
  HF_LAUNCH(sgd_sparse_k, count * dim, w, g, buf, rows, count, dim, lr, momentum, wd, nesterov);
}

cudaError_t adam_update(float* w, const float* g, float* m, float* v, int64_t n, float step_size, float b1,
                        float b2, float eps, float wd, float inv_sqrt_bc2, cudaStream_t s) {
  HF_LAUNCH(adam_k, n, w, g, m, v, n, step_size, b1, b2, eps, wd, inv_sqrt_bc2);
}

cudaError_t adam_sparse_update(float* w, const float* g, float* m, float* v, const int64_t* rows, int64_t count,
                               int64_t dim, float step_size, float b1, float b2, float eps, float wd,
                               float inv_sqrt_bc2, cudaStream_t s) {
  HF_LAUNCH(adam_sparse_k, count * dim, w, g, m, v, rows, count, dim, step_size, b1, b2, eps, wd, inv_sqrt_bc2);
}

cudaError_t affine(const float* x, float* y, int64_t n, float a, float b, cudaStream_t s) {
  HF_LAUNCH(affine_k, n, x, y, n, a, b);
}

}  // namespace hetflow::kernels::cuda::ops
