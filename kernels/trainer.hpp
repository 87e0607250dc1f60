// train_single: a whole single-device training run in plain C++ (no actors):
// load or synthesise a dataset, normalise with the training set's per-channel
// mean and std, build a zoo model, train with SGD/Adam and an LR schedule,
// evaluate on the test set each epoch. The actor runtime wraps this as
// job.kind = "train"; bench/kernels and the acceptance demo call it directly.
//
// `where` may be a cuda device (the dlopen'ed CUDA module): batches are
// copied there each step, and loss and optimizer run there too.
//
// Thread affinity: runs entirely on the calling thread (plus the device's
// oneDNN/oneTBB workers); the progress callback is called on that thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/device.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/shape.hpp"
#include "schemas/error.hpp"

namespace hetflow::kernels {

enum class dataset_kind : uint8_t { fashion_mnist, synthetic };

struct dataset_config {
  dataset_kind kind = dataset_kind::fashion_mnist;
  std::string path = "/usr/share/datasets/fashion-mnist";  // fashion_mnist
  shape sample{1, 28, 28};       // synthetic: one image (C, H, W)
  int64_t train_size = 10000;    // synthetic
  int64_t test_size = 2000;      // synthetic
  int64_t classes = 10;          // synthetic
  float noise = 1.0f;            // synthetic: noise stddev around class prototypes
};

enum class lr_schedule_kind : uint8_t { constant, step, cosine };

struct lr_schedule {
  lr_schedule_kind kind = lr_schedule_kind::constant;
  int step_epochs = 1;    // step: multiply by gamma every step_epochs epochs
  double gamma = 0.1;     // step
  double min_lr = 0.0;    // cosine: final value (annealed per step over the run)
};

// The learning rate for step `step` (0-based) of epoch `epoch` (0-based).
double lr_at(const lr_schedule& s, double base_lr, int epoch, int64_t step, int64_t steps_per_epoch, int epochs);

struct epoch_report {
  int epoch = 0;                 // 1-based
  double loss = 0.0;             // mean training loss over the epoch
  double train_accuracy = 0.0;   // over the epoch's training batches
  double test_accuracy = -1.0;   // -1 when not evaluated this epoch
  double samples_per_s = 0.0;    // training samples / epoch training wall time
  double train_seconds = 0.0;    // training wall time (no data loading, no eval)
  double lr = 0.0;               // learning rate at the epoch's last step
  int64_t samples = 0;
};

struct train_config {
  std::string model = "lenet5";  // a zoo image model (not dlrm: it needs click logs)
  double width = 1.0;            // zoo width multiplier
  dataset_config data;
  int epochs = 3;
  int64_t batch_size = 64;
  optimizer_config optimizer{optimizer_kind::sgd, 0.05, 0.9};
  lr_schedule schedule;
  uint64_t seed = 1;             // weights, shuffling, dropout, synthetic data
  device where = device::cpu();
  int threads = 0;               // <= 0: all hardware threads
  bool eval_each_epoch = true;   // else only after the last epoch
  int64_t eval_batch_size = 0;   // 0: batch_size (bounds activation memory)
  bool drop_last = false;        // drop each epoch's last partial batch
  int64_t max_steps_per_epoch = 0;  // > 0: cut epochs short (tests, quick benchmarks)
  int64_t progress_every = 50;   // steps between progress callbacks
  const std::atomic<bool>* stop = nullptr;  // set to true to stop: errc::cancelled
  std::string save_weights;      // non-empty: write the trained weights here
  // Called on the training thread after each epoch (and its evaluation).
  std::function<void(const epoch_report&)> on_epoch;
};


struct train_report {
  std::string model;
  std::string where;             // "cpu", "cuda:0"
  int threads = 0;
  int64_t parameters = 0;
  std::vector<epoch_report> epochs;
  double total_seconds = 0.0;    // everything, loading included
};

struct train_progress {
  int epoch = 0;                 // 1-based
  int64_t step = 0;              // 1-based within the epoch
  int64_t steps_per_epoch = 0;
  double samples_per_s = 0.0;    // since the epoch started
  double loss = 0.0;             // mean over the steps since the last callback
};

using progress_callback = std::function<void(const train_progress&)>;

expected<train_report> train_single(const train_config& config, const progress_callback& progress = {});

}  // namespace hetflow::kernels
