// Per-unit profiles: what the planner needs to place units on devices
// (forward and backward time on a device at a batch size, parameter bytes,
// activation bytes). Plain data; topology/ consumes it without kernels/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/layer_spec.hpp"
#include "kernels/model.hpp"
#include "schemas/error.hpp"

namespace hetflow::kernels {

struct unit_profile {
  std::string name;
  layer_kind kind = layer_kind::linear;
  double forward_s = 0.0;        // median seconds per forward at `batch`
  double backward_s = 0.0;       // median seconds per backward (parameter and input grads)
  uint64_t parameter_bytes = 0;  // trainable parameters (f32)
  uint64_t activation_bytes = 0; // held from forward to backward per microbatch
  uint64_t output_bytes = 0;     // what goes to the next unit (a stage boundary transfer)
};

struct model_profile {
  std::string model;
  std::string where;             // "cpu", "cuda:0"
  int threads = 0;
  int64_t batch = 0;
  int warmup_passes = 0;         // untimed passes through the whole model
  int timed_passes = 0;          // the passes the medians are taken over
  std::vector<unit_profile> units;
};

struct profile_options {
  int64_t batch = 64;
  // Passes through the whole model: at least `warmup` untimed, and more
  // until they took warmup_seconds; then at least `iterations` timed, and
  // more until those took min_seconds (past the counts, each phase stops at
  // max_iterations).
  // A fresh process's first passes are slow (its heap's pages touched for
  // the first time, oneDNN's primitives made): with 2 warm-up passes and 5
  // timed, LeNet-5 (2.7 ms a pass) profiled 3.2-3.7 ms inside a starting
  // node against 2.6-2.8 ms with 10 warm-up passes (2026-11-29, 2-core VM);
  // the time floors add nothing for models whose passes are slow anyway.
  int warmup = 2;
  int iterations = 5;
  uint64_t seed = 7;             // random inputs
  // Rows to time with, (batch, sample...) on the host (e.g.
  // sample_training_batch); null: random normal inputs (random_input).
  const tensor* input = nullptr;
  double warmup_seconds = 0.03;
  double min_seconds = 0.05;
  int max_iterations = 100;
};

// Times every unit of `m` on its device with options.input, else random
// inputs (valid ids for dlrm). Runs inside m.context().run. Changes no parameter values, but
// overwrites gradients and batch norm running statistics (profile a fresh
// model, or one whose state you do not need).
expected<model_profile> profile_model(model& m, const profile_options& options = {});

// `batch` rows of random input for m (normal values; a DLRM's sparse columns
// get valid row indices), on the host.
tensor random_input(const model& m, int64_t batch, uint64_t seed);

}  // namespace hetflow::kernels
