// gen_paper_profiles: per-unit profiles of a zoo model (3x224x224 input, 1000
// classes) at a batch size on the four GPU kinds of the HetPipe paper
// (ATC'20), derived from each GPU's published peak FP32 throughput, memory
// bandwidth and memory size — not measured. Writes the profile JSON that
// topology/profile_db.hpp reads.
//
//   gen_paper_profiles MODEL BATCH > profile.json
//
// Per unit, per sample, walking the zoo's layer_specs with their shapes:
//   conv2d  FLOPs = 2 * Cin * k * k * Cout * Hout * Wout
//   linear  FLOPs = 2 * in * out
//   others (relu, pools, batch norm, dropout, flatten, residual add)
//           memory traffic = (input + output elements) * 4 B (batch norm x2)
// fwd_ms = batch * (FLOPs / (peak_tflops * 1e12 * 0.55)
//                   + bytes / (bandwidth_gbs * 1e9 * 0.7)) * 1e3
// bwd_ms = 2 * fwd_ms (input and weight gradients each cost a forward).
// 0.55 and 0.7 are assumed achievable fractions of peak for cuDNN FP32
// convolutions / GEMMs and streaming kernels; every kind gets the same
// fractions, so relative speeds follow the published peaks.
// params_bytes: weights + biases (batch norm: scale + shift), f32.
// update_ms: an SGD-momentum step, 20 B of memory traffic per parameter.
// activation_bytes: every sub-layer's output kept for backward, f32.
// output_bytes: the unit's output (a stage boundary transfer), f32.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/zoo.hpp"

using namespace hetflow::kernels;

namespace {

struct gpu {
  const char* kind;
  const char* name;
  double tflops;       // peak FP32, boost clock
  double gbs;          // memory bandwidth GB/s
  unsigned long long memory;  // bytes
};

// NVIDIA's published specifications.
const gpu gpus[] = {
    {"titan-v", "NVIDIA TITAN V", 14.90, 652.8, 12ull << 30},
    {"titan-rtx", "NVIDIA TITAN RTX", 16.31, 672.0, 24ull << 30},
    {"rtx-2060", "NVIDIA GeForce RTX 2060", 6.45, 336.0, 6ull << 30},
    {"quadro-p4000", "NVIDIA Quadro P4000", 5.30, 243.0, 8ull << 30},
};
constexpr double compute_eff = 0.55, memory_eff = 0.7;

struct cost {
  double flops = 0, bytes = 0;
  unsigned long long params = 0, act = 0;  // elements
};

long long numel(const std::vector<long long>& s) {
  long long n = 1;
  for (auto x : s) n *= x;
  return n;
}

// Applies `l` to shape `s` (per sample), adding its cost.
std::vector<long long> apply(const layer_spec& l, std::vector<long long> s, cost& c) {
  const long long in = numel(s);
  switch (l.kind) {
    case layer_kind::conv2d: {
      const long long cin = s[0], h = (s[1] + 2 * l.padding - l.kernel) / l.stride + 1,
                      w = (s[2] + 2 * l.padding - l.kernel) / l.stride + 1;
      c.flops += 2.0 * double(cin * l.kernel * l.kernel) * double(l.out * h * w);
      c.params += (unsigned long long)(cin * l.kernel * l.kernel * l.out + (l.bias ? l.out : 0));
      s = {l.out, h, w};
      break;
    }
    case layer_kind::linear:
      c.flops += 2.0 * double(in) * double(l.out);
      c.params += (unsigned long long)(in * l.out + (l.bias ? l.out : 0));
      s = {l.out};
      break;
    case layer_kind::max_pool:
    case layer_kind::avg_pool: {
      const long long h = (s[1] + 2 * l.padding - l.kernel) / l.stride + 1, w = (s[2] + 2 * l.padding - l.kernel) / l.stride + 1;
      s = {s[0], h, w};
      c.bytes += 4.0 * double(in + numel(s));
      break;
    }
    case layer_kind::global_avg_pool:
      s = {s[0], 1, 1};
      c.bytes += 4.0 * double(in + numel(s));
      break;
    case layer_kind::batch_norm:
      c.params += (unsigned long long)(2 * s[0]);
      c.bytes += 8.0 * double(in);
      break;
    case layer_kind::relu:
    case layer_kind::dropout:
      c.bytes += 8.0 * double(in);
      break;
    case layer_kind::flatten:
      s = {in};
      return s;  // a view: nothing kept
    case layer_kind::residual: {
      std::vector<long long> b = s, sc = s;
      for (const auto& x : l.body) b = apply(x, b, c);
      for (const auto& x : l.shortcut) sc = apply(x, sc, c);
      c.bytes += 12.0 * double(numel(b));  // add (+ relu)
      s = b;
      break;
    }
    case layer_kind::dlrm_interaction:
      std::fprintf(stderr, "dlrm is not an image model\n");
      std::exit(2);
    case layer_kind::custom:
      std::fprintf(stderr, "plugin layers have no paper profile\n");
      std::exit(2);
  }
  c.act += (unsigned long long)numel(s);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: gen_paper_profiles MODEL BATCH\n");
    return 2;
  }
  zoo_options o;
  o.input = shape{3, 224, 224};
  o.classes = 1000;
  auto spec = make_model_spec(argv[1], o);
  if (!spec) {
    std::fprintf(stderr, "%s\n", spec.error().message().c_str());
    return 2;
  }
  const long long batch = std::atoll(argv[2]);
  if (batch <= 0) return 2;
  std::vector<long long> s{3, 224, 224};
  std::printf("{\n \"model\": \"%s\",\n \"comment\": \"derived from published peak FP32 TFLOPS and memory bandwidth "
              "(bench/simulate/gen_paper_profiles.cpp): fwd = batch * (FLOPs / (0.55 * peak) + bytes / (0.7 * "
              "bandwidth)), bwd = 2 * fwd\",\n \"batch\": %lld,\n \"units\": [\n",
              spec->name.c_str(), batch);
  double total_flops = 0;
  unsigned long long total_params = 0;
  for (std::size_t i = 0; i < spec->layers.size(); ++i) {
    cost c;
    s = apply(spec->layers[i], s, c);
    total_flops += c.flops;
    total_params += c.params;
    std::printf("  {\"name\": \"%s\", \"params_bytes\": %llu, \"activation_bytes\": %llu, \"output_bytes\": %llu, "
                "\"devices\": {",
                spec->layers[i].name.c_str(), c.params * 4, c.act * 4 * (unsigned long long)batch,
                (unsigned long long)numel(s) * 4 * (unsigned long long)batch);
    for (std::size_t g = 0; g < std::size(gpus); ++g) {
      const double fwd = double(batch) *
                         (c.flops / (gpus[g].tflops * 1e12 * compute_eff) + c.bytes / (gpus[g].gbs * 1e9 * memory_eff)) *
                         1e3;
      std::printf("%s\"%s\": {\"fwd_ms\": %.5f, \"bwd_ms\": %.5f}", g ? ", " : "", gpus[g].kind, fwd, 2 * fwd);
    }
    std::printf("}}%s\n", i + 1 < spec->layers.size() ? "," : "");
  }
  std::printf(" ],\n \"devices\": {");
  // SGD with momentum streams weights, gradients and momentum in and weights
  // and momentum out: 5 x 4 B per parameter.
  for (std::size_t g = 0; g < std::size(gpus); ++g)
    std::printf("%s\"%s\": {\"memory_bytes\": %llu, \"update_ms\": %.4f}", g ? ", " : "", gpus[g].kind,
                gpus[g].memory, 20.0 * double(total_params) / (gpus[g].gbs * 1e9 * memory_eff) * 1e3);
  std::printf("},\n \"links\": {\"intra_node_gbps\": 100, \"inter_node_gbps\": 56, \"latency_us\": 5}\n}\n");
  std::fprintf(stderr, "%s: %.2f GFLOPs forward per sample\n", spec->name.c_str(), total_flops / 1e9);
  return 0;
}
