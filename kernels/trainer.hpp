// train_single: a whole single-device training run in plain C++ (no actors):
// load or synthesise a dataset, normalise with the training set's per-channel
// mean and std (image data; criteo click records are used as stored), build a
// zoo model, train with SGD/Adam and an LR schedule,
// evaluate on the test set each epoch. The actor runtime wraps this as
// job.kind = "train"; bench/kernels and the acceptance demo call it directly.
//
// train_from_source: the same training loop, fed by any batch_source. The
// in-memory source (make_memory_source) is what train_single uses; the actor
// runtime's stream source (actors/builtin/stream_trainer.cpp) pulls batches
// that pre-processing shard actors send over the data plane. Every source
// follows one epoch_plan and one epoch_order, so the batches (which rows, in
// which order) are the same whichever source delivers them.
//
// `where` may be a cuda device (the dlopen'ed CUDA module): batches are
// copied there each step, and loss and optimizer run there too.
//
// Thread affinity: runs entirely on the calling thread (plus the device's
// oneDNN/oneTBB workers); the progress callback is called on that thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <future>
#include <string>
#include <vector>

#include <memory>
#include <span>

#include "kernels/dataset.hpp"
#include "kernels/device.hpp"
#include "kernels/device_context.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/random.hpp"
#include "kernels/shape.hpp"
#include "kernels/tensor.hpp"
#include "kernels/zoo.hpp"
#include "schemas/error.hpp"

namespace hetflow::kernels {

// criteo: a preprocess job's output (kernels/criteo_dataset.hpp), for dlrm.
// criteo_text: raw Criteo text hashed on the fly (kernels/criteo_text.hpp),
// the rows and values a preprocess job in hash mode would write; for dlrm.
enum class dataset_kind : uint8_t { fashion_mnist, synthetic, criteo, criteo_text };

class model;

// Data parallelism: the training loop's view of the other replicas (the
// actor runtime implements it with a ring all-reduce). Every replica runs
// the same loop on the same global batches; replica r trains on its rows of
// each batch (see train_config::group).
// Thread affinity: called on the training thread only.
class replica_group {
public:
  virtual ~replica_group() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Starts summing each tensor element-wise over every replica, in place,
  // and returns at once; every replica gets bit-identical sums. The tensors
  // must stay untouched until the future is ready. Every replica starts the
  // same sums (sizes, order). An error (a replica died or stalled, the job
  // stops) ends the training run with it.
  virtual std::future<status> start_sum(std::span<const std::span<float>> tensors) = 0;
  status sum(std::span<const std::span<float>> tensors) { return start_sum(tensors).get(); }
  // Failover: whether the group can re-form without replicas that were lost
  // (their nodes went down), so that the others go on.
  virtual bool can_regroup() const { return false; }
  // After a sum failed: re-forms the group without the lost replicas. true
  // when it did (rank() and size() are the new ones; kept() the ranks, in
  // the group before, of the replicas that are left, in order); false when
  // none was lost (the failure stands). The training loop then goes back to
  // the earliest of the replicas' latest snapshots (train_report::rollbacks).
  virtual expected<bool> regroup() { return false; }
  virtual std::vector<int> kept() const { return {}; }
};

// Epoch checkpoints of a training run (cpu models): what the loop saves
// after each epoch and restores with train_config::resume. The actors keep
// them as PS-format checkpoint files (actors/ps/ps_checkpoint.hpp); tests
// may keep them in memory.
struct checkpoint_tensor {
  std::string name;
  const tensor* value = nullptr;
};
struct epoch_checkpoint {
  int epochs_done = 0;
  int64_t optimizer_steps = 0;
  int64_t optimizer_state = 0;     // the last optimizer_state tensors are the optimizer's
  std::vector<std::string> names;  // parameters, model state (batch norm), optimizer state
  std::vector<tensor> tensors;
};
class epoch_checkpoints {
public:
  virtual ~epoch_checkpoints() = default;
  // Stores the state after `epochs_done` epochs, durably (a crash leaves the
  // previous checkpoints intact).
  virtual status save(int epochs_done, int64_t optimizer_steps, const std::vector<checkpoint_tensor>& tensors,
                      int64_t optimizer_state) = 0;
  // Epochs done of the checkpoints kept here that read back whole, ascending.
  virtual std::vector<int> labels() const = 0;
  virtual expected<epoch_checkpoint> load(int epochs_done) const = 0;
  // What to call checkpoint `epochs_done` in messages (a path).
  virtual std::string describe(int epochs_done) const = 0;
};

struct dataset_config {
  dataset_kind kind = dataset_kind::fashion_mnist;
  std::string path = "/usr/share/datasets/fashion-mnist";  // fashion_mnist
  shape sample{1, 28, 28};       // synthetic: one image (C, H, W)
  int64_t train_size = 10000;    // synthetic
  int64_t test_size = 2000;      // synthetic
  int64_t classes = 10;          // synthetic
  float noise = 1.0f;            // synthetic: noise stddev around class prototypes
  // criteo (path = the preprocess output_dir): the last test_fraction of the
  // rows read, in input order, is the test set, the rest the training set.
  double test_fraction = 0.1;
  int64_t max_rows = 0;          // criteo: read only the first max_rows records (0: all)
  // criteo: rows of each embedding table; one value: every table; empty:
  // from the data (criteo_table_rows: vocabularies, else a scan).
  std::vector<int64_t> table_rows;
  // criteo_text: the text files in order (absolute), the hash range (every
  // table has that many rows) and preprocess's max_field_bytes.
  // test_fraction and max_rows as for criteo.
  std::vector<std::string> inputs;
  uint64_t hash_range = 0;
  std::size_t max_field_bytes = 64;
};

// dlrm's sizes (zoo.hpp's dlrm_spec): the bottom MLP is
// dense -> bottom_mlp... -> embedding_dim; the top MLP is
// (embedding_dim + pairs) -> top_mlp... -> classes.
struct dlrm_sizes {
  int64_t embedding_dim = 16;
  std::vector<int64_t> bottom_mlp{512, 256, 64};
  std::vector<int64_t> top_mlp{512, 256};
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
  double test_logloss = -1.0;    // 2 classes only (click data), else -1; -1 when not evaluated
  double test_auc = -1.0;        // 2 classes only; -1 when not evaluated or the test set has one class
  double samples_per_s = 0.0;    // training samples / epoch training wall time
  double train_seconds = 0.0;    // training wall time (no data loading, no eval)
  double lr = 0.0;               // learning rate at the epoch's last step
  int64_t samples = 0;
};

// Dynamic loss scaling's rules (PyTorch GradScaler's): after a step whose
// unscaled gradients are all finite, count it and double the scale after
// growth_interval such steps in a row (at most 2^24); after one with an inf
// or NaN, skip the step, halve the scale (at least 1) and start counting
// again. update() says whether to apply the step.
struct loss_scaler {
  double scale = 65536.0;
  int64_t growth_interval = 2000;
  int64_t clean_steps = 0;
  int64_t overflow_steps = 0;
  bool update(bool finite) noexcept {
    if (!finite) {
      ++overflow_steps;
      scale = scale / 2 < 1.0 ? 1.0 : scale / 2;
      clean_steps = 0;
      return false;
    }
    if (++clean_steps == growth_interval) {
      scale = scale * 2 > 16777216.0 ? 16777216.0 : scale * 2;
      clean_steps = 0;
    }
    return true;
  }
};

struct train_config {
  std::string model = "lenet5";  // a zoo model; dlrm trains on (and only on) dataset_kind::criteo
  double width = 1.0;            // zoo width multiplier
  int64_t head_width = 0;        // zoo vgg: hidden width of the FC head (0: the zoo's default)
  std::vector<inserted_layer> insert_layers;  // plugins' layers (zoo.hpp), [job] insert_layers
  dataset_config data;
  dlrm_sizes dlrm;               // model dlrm only
  int epochs = 3;
  int64_t batch_size = 64;
  optimizer_config optimizer{optimizer_kind::sgd, 0.05, 0.9};
  lr_schedule schedule;
  uint64_t seed = 1;             // weights, shuffling, dropout, synthetic data
  device where = device::cpu();
  // cuda only: how convolutions and matmuls compute (device_context.hpp);
  // unset: the context's default (tf32; f32 with HETFLOW_CUDA_TF32=0). cpu
  // devices refuse bf16 and f16.
  std::optional<math_mode> precision;
  // f16: dynamic loss scaling (PyTorch GradScaler's rules): the loss
  // gradient is multiplied by the scale before backward and the parameter
  // gradients divided by it after; a step whose gradients overflow is
  // skipped and halves the scale, loss_scale_growth_interval clean steps in
  // a row double it.
  double loss_scale_init = 65536.0;
  int64_t loss_scale_growth_interval = 2000;
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
  // Data parallelism: non-null makes this run one replica of group->size(). Each global batch (the single-device batch: same plan,
  // same order) is split among the replicas, each computes its rows'
  // gradients scaled by rows / batch rows, the group sums them, and every
  // replica applies the same optimizer step, so weights stay bit-identical
  // and match single-device training within float rounding. Loss, accuracy
  // and the test accuracy are over the whole batch / test set; batch norm
  // running statistics are averaged after each epoch.
  replica_group* group = nullptr;
  // A replica on a cuda device sums, steps, snapshots and checkpoints on a
  // host copy of its model (its weights go to the device after each step),
  // so that cpu and cuda replicas take the same optimizer step bit for bit.
  // True: a cpu replica does the same (tests run that path without a GPU).
  bool host_mirror = false;
  // With a group: split batches in proportion to each replica's measured
  // speed (a short probe before training, then each epoch's compute time);
  // false: equal shares.
  bool measured_split = true;
  // With a group: how `rows` rows are split given per-replica speeds (the
  // planner's topology::split_rows; kernels do not link topology). Must give
  // every replica the same answer for the same arguments.
  std::function<std::vector<int64_t>(int64_t rows, std::span<const double> speeds)> split;
  // With a group and measured_split, when set: how `rows` rows are split
  // given each replica's measured step cost, fixed_s[i] seconds a step plus
  // per_row_s[i] a row (the planner's topology::split_rows_timed), so that a
  // device with a large per-step cost gets fewer rows than its per-row speed
  // says, or none. Unset: `split` by per-row speed. Same contract as `split`.
  std::function<std::vector<int64_t>(int64_t rows, std::span<const double> fixed_s, std::span<const double> per_row_s)>
      split_timed;
  // Tests and benchmarks: each step in which this replica has rows (and each
  // pass of the speed probe) takes this many seconds more, as a device with
  // a fixed per-step cost would (HETFLOW_BENCH_STEP_COST in the actors).
  double emulate_step_seconds = 0.0;
  // With a group: gradients are summed in buckets of about this many bytes,
  // each started as soon as backward has produced it (last unit first), so
  // the sums overlap the rest of backward.
  int64_t bucket_bytes = int64_t{16} << 20;
  // With a group and measured_split: also re-measure the speeds and re-split
  // every this many steps inside an epoch (0: only between epochs).
  int64_t resplit_every = 100;
  // Failover (group->can_regroup()): besides each epoch's start, the loop
  // keeps a snapshot (weights, optimizer and batch-norm state, the epoch's
  // books) every this many steps; losing a replica costs the steps since
  // the latest one. 0: epoch starts only.
  int64_t failover_snapshot_every = 100;
  // Non-null: save a checkpoint after every epoch (every replica its own).
  std::shared_ptr<epoch_checkpoints> checkpoints;
  // Mid-epoch checkpoints (`hetflow shell`'s checkpoint; input "memory"):
  // when both are set, checkpoint_now is asked once a step; it returns the
  // id of a new request (1 .. 2^24 - 1; 0: none). A request (with a group:
  // any replica's, through the step's sum, so that all save after the same
  // step, and each id once: a replica that sees it a step later ignores it)
  // saves the state after that step - weights, batch-norm statistics,
  // optimizer state and the epoch's books so far - under label epochs_done
  // * steps_per_epoch + next_step. With resume, the newest such checkpoint
  // (with a group: the newest every replica has) that is after the newest
  // epoch checkpoint is where training continues, at its step.
  std::shared_ptr<epoch_checkpoints> step_checkpoints;
  std::function<int64_t()> checkpoint_now;
  // With step_checkpoints: also save one after every this many steps of an
  // epoch (steps every, 2 * every, ... below the epoch's last, which the
  // epoch checkpoint covers), the same as a request at that step; every
  // replica of a group reaches the same steps. 0: on request only.
  int64_t step_checkpoint_every = 0;
  // With checkpoints: start after the newest checkpoint (with a group: the
  // newest one every replica has; they agree through the group), with its
  // weights, batch norm statistics and optimizer state; the epochs before it
  // are not trained again (the report lists the epochs trained in this run).
  // None: train from the start.
  bool resume = false;
};


// One point of a training run's fine-grained history, taken at a progress
// tick (every progress_every steps and at each epoch's last step).
struct history_point {
  double seconds = 0.0;          // since the training loop started (evaluation time included)
  int epoch = 0;                 // 1-based
  int64_t step = 0;              // 1-based within the epoch
  double loss = 0.0;             // mean training loss over the steps since the previous point
  double samples_per_s = 0.0;    // over the steps since the previous point (step time only, no evaluation)
  // The window the point covers: merging two points (train_history) keeps
  // loss and samples_per_s exact means over both windows.
  int64_t window_steps = 0;
  int64_t window_samples = 0;
  double window_seconds = 0.0;
};

// A bounded history of a training run: at most `capacity` points, whatever
// the run's length. Ticks are offered in order; every stride-th is kept. When
// the history is full, each pair of adjacent points is merged into one (the
// later point's time and step, both windows' means) and the stride doubles,
// so a run of any length keeps fewer than `capacity` points (at least
// capacity/2 once it was full), spread evenly over it. `capacity` is rounded
// down to an even number, at least 2. O(1) amortised per tick; which ticks
// are kept depends on the tick count only, never on timing.
class train_history {
public:
  explicit train_history(std::size_t capacity = 2048);
  // A tick at `seconds` with the steps since the previous tick: their loss
  // sum, rows and step time. Accumulates into the next kept point.
  void tick(double seconds, int epoch, int64_t step, double loss_sum, int64_t steps, int64_t samples,
            double step_seconds);
  // After the last tick: keeps the ticks not yet kept as one last point, so
  // the history ends at the run's last step.
  void finish();
  const std::vector<history_point>& points() const noexcept { return points_; }
  std::vector<history_point> take() && { return std::move(points_); }
  int64_t stride() const noexcept { return stride_; }

private:
  void keep_pending();
  void halve();

  std::size_t capacity_;
  std::vector<history_point> points_;
  int64_t stride_ = 1;
  int64_t pending_ticks_ = 0;
  history_point pending_;        // accumulating: window_* and the loss sum (in loss)
};

struct train_report {
  int resumed_epochs = 0;        // epochs restored from a checkpoint (resume)
  int64_t resumed_step = 0;      // resume from a mid-epoch checkpoint: the step of epoch resumed_epochs + 1
  int64_t step_checkpoints = 0;  // mid-epoch checkpoints saved (checkpoint_now)
  std::string resumed_from;      // resume: the checkpoint restored (describe()'s words), "" for none
  int64_t resplits = 0;          // dp: re-splits inside epochs (resplit_every)
  int rollbacks = 0;             // dp failover: times the replicas went back to a snapshot
  std::vector<std::pair<int, int64_t>> rolled_back_to;  // each one's (epoch, step), 1-based epoch, 0-based step
  int replicas_at_end = 0;       // dp: the group's size at the end
  std::string model;
  std::string where;             // "cpu", "cuda:0"
  int threads = 0;
  int64_t parameters = 0;
  std::vector<epoch_report> epochs;
  double total_seconds = 0.0;    // everything, loading included
  uint64_t weights_checksum = 0; // FNV-1a 64 over the final parameters' bytes
  // With a replica_group: per epoch, how a full batch was split (rows per
  // replica) and the measurements the split came from (busy time: step
  // time less the waits for sums): speeds = rows a second at the rows of
  // the last measurement (dp_split "speed" splits by these), fixed and row
  // seconds = the fitted step cost, fixed + rows * row (split_timed).
  std::vector<std::vector<int64_t>> splits;
  std::vector<std::vector<double>> speeds;
  std::vector<std::vector<double>> fixed_seconds;
  std::vector<std::vector<double>> row_seconds;
  double allreduce_seconds = 0.0;  // time in group->sum (waits included)
  std::string precision;           // cuda: the math mode trained with; cpu: "f32"
  int64_t overflow_steps = 0;      // f16: steps skipped for non-finite gradients
  double loss_scale = 1.0;         // f16: the scale at the end (else 1)
  // Loss and throughput over time (train_history, at most 2048 points); the
  // last point is each run's last step.
  std::vector<history_point> history;
};

struct train_progress {
  int epoch = 0;                 // 1-based
  int64_t step = 0;              // 1-based within the epoch
  int64_t steps_per_epoch = 0;
  double samples_per_s = 0.0;    // since the epoch started
  double loss = 0.0;             // mean over the steps since the last callback
  double accuracy = 0.0;         // training accuracy over the steps since the last callback
};

using progress_callback = std::function<void(const train_progress&)>;

expected<train_report> train_single(const train_config& config, const progress_callback& progress = {});

// The zoo options (input shape, classes, width, dlrm table rows and layer
// sizes) of c's model for c's data, without loading the data: every node
// (trainer, parameter-server shards) builds the same model from the config.
// criteo reads the vocabulary files, or in hash mode (no vocabularies, no
// data.table_rows) scans every record once (criteo_table_rows). Errors for
// a config train_single refuses (dlrm without criteo data and vice versa).
expected<zoo_options> model_options_for(const train_config& c);

// Test-set metrics of a model. accuracy: argmax == label. For 2 classes
// (click data) also logloss: mean binary cross-entropy of
// p(click) = softmax(logits)[1] (equal to the 2-class softmax cross-entropy),
// and the ROC AUC of p(click) (ties by average rank; -1 when the test set
// holds one class only). Every field is -1 when not computed (test empty, or
// logloss/auc for other class counts).
struct eval_metrics {
  double accuracy = -1, logloss = -1, auc = -1;
};
// Forward in eval mode over `test` in batches of `batch` rows, on m's device.
expected<eval_metrics> evaluate_model(model& m, const image_dataset& test, int64_t batch);

// FNV-1a 64 over the parameters' bytes in model order (a device model's are
// copied to the host first): the `weights_checksum` of every training report,
// so runs of different strategies compare bit for bit.
expected<uint64_t> weights_checksum(model& m);

// --- the pieces train_single is made of, for other batch sources -------------

// Which rows make which batch of an epoch: batch `step` is positions
// [step * batch_size, step * batch_size + batch_rows(step)) of the epoch's
// order; the epoch uses its first used_rows() positions.
struct epoch_plan {
  int64_t rows = 0;        // training set size
  int64_t batch_size = 0;
  int64_t steps = 0;       // batches per epoch (> 0)
  int64_t used_rows() const noexcept { return std::min(rows, steps * batch_size); }
  int64_t batch_begin(int64_t step) const noexcept { return step * batch_size; }
  int64_t batch_rows(int64_t step) const noexcept {
    return std::min(batch_size, used_rows() - step * batch_size);
  }
};
// errc::invalid_argument when the rows make no batch.
expected<epoch_plan> make_epoch_plan(int64_t rows, int64_t batch_size, bool drop_last,
                                     int64_t max_steps_per_epoch);

// The shuffled row order of each epoch, from the seed alone: epoch e's order
// is e + 1 Fisher-Yates passes over 0..rows-1 (the sequence train_single has
// always used). A shard replays it to know its rows; O(rows) per epoch.
class epoch_order {
public:
  epoch_order(int64_t rows, uint64_t seed);
  // Moves to the next epoch's order (the first call gives epoch 0).
  void next_epoch();
  int epoch() const noexcept { return epoch_; }  // -1 before the first next_epoch()
  std::span<const int64_t> order() const noexcept { return order_; }

private:
  std::vector<int64_t> order_;
  rng shuffle_;
  int epoch_ = -1;
};

// Exactly-once books of one epoch's sample ids: every id must be in
// [0, rows), none may come twice, and at the end exactly `expected` ids must
// have come. The checksum (sum of splitmix64(id + 1), mod 2^64) does not
// depend on order, so a sender and a receiver can compare theirs.
class sample_ledger {
public:
  explicit sample_ledger(int64_t rows);
  void begin_epoch(int epoch, int64_t expected);
  // errc::internal naming the id (and `who`) on an out-of-range or repeated id.
  status add(std::span<const int64_t> ids, const std::string& who);
  // errc::internal when fewer or more ids than expected came this epoch.
  status end_epoch() const;
  int64_t count() const noexcept { return count_; }
  uint64_t checksum() const noexcept { return checksum_; }
  static uint64_t checksum_of(std::span<const int64_t> ids) noexcept;

private:
  std::vector<uint8_t> seen_;
  int epoch_ = -1;
  int64_t expected_ = 0, count_ = 0;
  uint64_t checksum_ = 0;
};

// One training batch, on the host: valid until the source's next call.
struct train_batch {
  tensor_view images;               // (b, sample...) f32, already normalised (images)
  std::span<const int32_t> labels;  // b labels
};

// Where the training loop gets its batches. Thread affinity: every call comes
// from the training thread, in this order per epoch: begin_epoch(e), then
// next(e, 0) ... next(e, plan().steps - 1), then end_epoch(e).
class batch_source {
public:
  virtual ~batch_source() = default;
  virtual const epoch_plan& plan() const = 0;
  virtual shape sample_shape() const = 0;  // (C, H, W) for images, (39) for criteo
  virtual int64_t classes() const = 0;
  virtual status begin_epoch(int epoch) = 0;
  virtual expected<train_batch> next(int epoch, int64_t step) = 0;
  // Rows [first, first + count) of batch `step` only (a data-parallel
  // replica's share). The default fetches the whole batch and views the
  // rows; sources that can, fetch only those. count may be 0.
  virtual expected<train_batch> next_rows(int epoch, int64_t step, int64_t first, int64_t count) {
    HF_ASSIGN_OR_RETURN(train_batch b, next(epoch, step));
    return train_batch{b.images.slice_outer(first, first + count),
                       b.labels.subspan(std::size_t(first), std::size_t(count))};
  }
  // After the epoch's last batch: the source checks its books.
  virtual status end_epoch(int epoch) = 0;
  // A resumed run (train_config::resume) starts after the epochs its
  // checkpoint holds; it calls this for each of them first, in order.
  // Sources that hold nothing per epoch do nothing; a source that is sent
  // every epoch's batches (the stream shards replay from the start) takes
  // and drops that epoch's, checking its books.
  virtual status skip_epoch(int epoch) {
    (void)epoch;
    return {};
  }
};

// The training set in memory (already normalised), shuffled by epoch_order.
// `train` must outlive the source.
expected<std::unique_ptr<batch_source>> make_memory_source(const image_dataset& train, const train_config& c);

// The data of a run: the training set, the test set, and the training set's
// per-channel statistics. `normalize`: apply them to both sets (in memory).
// `with_test` false: the test set is left empty (pre-processing shards).
// criteo: images are (N, 39) (criteo_dataset.hpp), never normalised (stats
// stay empty), the test set is the last data.test_fraction of the rows read,
// and ids must fit data.table_rows / the vocabularies.
struct training_data {
  image_dataset train, test;
  normalization stats;
};
expected<training_data> load_training_data(const train_config& c, bool normalize, bool with_test = true);

// The first `rows` training samples of c's dataset (repeated when it has
// fewer), normalised by their own per-channel statistics: inputs with the
// data's structure, for timing a model (max pooling, for one, runs at a
// speed that depends on the values: LeNet-5's first pool took 0.81 ms on
// random normal inputs against 0.45 ms on Fashion-MNIST, 2026-12-06, 2-core
// VM). Image datasets only; errc::unsupported for criteo kinds.
expected<tensor> sample_training_batch(const train_config& c, int64_t rows);

// Builds c.model for the source's sample shape and classes and trains it on
// c.where, evaluating on `test` (normalised like the training batches).
// c.data is not read. train_single = load_training_data + make_memory_source +
// train_from_source.
expected<train_report> train_from_source(const train_config& c, batch_source& source, const image_dataset& test,
                                         const progress_callback& progress = {});

}  // namespace hetflow::kernels
