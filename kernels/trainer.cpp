#include "kernels/trainer.hpp"

#include <algorithm>
#include <array>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <numeric>
#include <set>
#include <thread>

#include "kernels/criteo_dataset.hpp"
#include "kernels/criteo_text.hpp"
#include "kernels/cuda/cuda_api.hpp"
#include "kernels/dataset.hpp"
#include "kernels/loss.hpp"
#include "kernels/metrics.hpp"
#include "kernels/model.hpp"
#include "kernels/step_cost.hpp"
#include "kernels/random.hpp"
#include "kernels/trace.hpp"
#include "kernels/waits.hpp"
#include "kernels/weights_io.hpp"
#include "kernels/zoo.hpp"

namespace hetflow::kernels {

double lr_at(const lr_schedule& s, double base_lr, int epoch, int64_t step, int64_t steps_per_epoch, int epochs) {
  switch (s.kind) {
    case lr_schedule_kind::constant: return base_lr;
    case lr_schedule_kind::step:
      return base_lr * std::pow(s.gamma, double(epoch / std::max(1, s.step_epochs)));
    case lr_schedule_kind::cosine: {
      double total = double(std::max<int64_t>(1, steps_per_epoch * epochs));
      double t = double(epoch * steps_per_epoch + step) / total;
      return s.min_lr + (base_lr - s.min_lr) * 0.5 * (1.0 + std::cos(3.14159265358979323846 * std::min(1.0, t)));
    }
  }
  return base_lr;
}

namespace {

using clock_type = std::chrono::steady_clock;

// Benchmarks only: HETFLOW_BENCH_SLOWDOWN=F (a number > 1) in a process's
// environment makes its training compute take F times as long: after each
// forward, and each backward unit, it sleeps (F - 1) times what that took.
// It emulates an older, slower device beside a newer one on one machine
// (bench/dp: the measured split): unlike a CPU hog, the process still
// answers its ring at once. Read once; off (1) when unset or not > 1.
// The number in environment variable `name` when it lies in (lo, hi), else
// `otherwise` (unset, empty, not a number, out of range).
double env_number(const char* name, double lo, double hi, double otherwise) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == '\0') return otherwise;
  char* end = nullptr;
  const double v = std::strtod(e, &end);
  return end != e && *end == '\0' && v > lo && v < hi ? v : otherwise;
}

double bench_slowdown_factor() {
  static const double f = env_number("HETFLOW_BENCH_SLOWDOWN", 1.0, 1000.0, 1.0);
  return f;
}

void bench_slowdown(std::chrono::steady_clock::time_point since) {
  const double f = bench_slowdown_factor();
  if (f <= 1.0) return;
  const auto took = std::chrono::steady_clock::now() - since;
  std::this_thread::sleep_for(std::chrono::duration_cast<std::chrono::nanoseconds>(took * (f - 1.0)));
}


// HETFLOW_DRILL_DP_START_DELAY (seconds, tests): a data-parallel replica
// waits this long before each start-up sum (the speed probe's, --resume's
// agreement), so a test can lose a replica's node at start-up.
void drill_start_delay() {
  if (const double d = env_number("HETFLOW_DRILL_DP_START_DELAY", 0.0, 600.0, 0.0); d > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(d));
}

// train_config::emulate_step_seconds (tests, benchmarks).
void emulate_step_cost(const train_config& c) {
  if (c.emulate_step_seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(c.emulate_step_seconds));
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

status check_config(const train_config& c) {
  if (c.epochs <= 0) return make_error(errc::invalid_argument, "train: epochs must be > 0");
  if (c.batch_size <= 0) return make_error(errc::invalid_argument, "train: batch_size must be > 0");
  if (c.eval_batch_size < 0) return make_error(errc::invalid_argument, "train: eval_batch_size must be >= 0");
  // dlrm's input is (dense, ids) click records; image models would read ids
  // as pixel values.
  const bool clicks = c.data.kind == dataset_kind::criteo || c.data.kind == dataset_kind::criteo_text;
  if (c.model == "dlrm" && !clicks)
    return make_error(errc::invalid_argument, "train: model dlrm trains on click logs: it needs the criteo dataset "
                                              "(a preprocess job's output) or criteo_text (raw Criteo text)");
  if (c.model != "dlrm" && clicks)
    return make_error(errc::invalid_argument, "train: the criteo dataset (click logs) trains model dlrm only, not " +
                                                  c.model);
  if (c.data.kind == dataset_kind::criteo_text) {
    if (c.data.inputs.empty()) return make_error(errc::invalid_argument, "train: criteo_text needs input files");
    if (c.data.hash_range < 1 || c.data.hash_range > uint64_t(criteo_max_id) + 1)
      return make_error(errc::invalid_argument, "train: criteo_text hash range must be in [1, 2^24] (ids travel as "
                                                "float32), got " + std::to_string(c.data.hash_range));
    if (!c.data.table_rows.empty())
      return make_error(errc::invalid_argument, "train: criteo_text tables have hash range rows; table_rows "
                                                "cannot be set");
  }
  if (clicks) {
    if (!(c.data.test_fraction > 0.0 && c.data.test_fraction < 1.0))
      return make_error(errc::invalid_argument, "train: criteo test_fraction must be in (0, 1), got " +
                                                    std::to_string(c.data.test_fraction));
    if (c.data.max_rows < 0) return make_error(errc::invalid_argument, "train: criteo max_rows must be >= 0");
    if (c.data.table_rows.size() != 0 && c.data.table_rows.size() != 1 &&
        c.data.table_rows.size() != std::size_t(criteo_tables))
      return make_error(errc::invalid_argument, "train: table_rows needs 1 value (every table) or 26 (one per table), "
                                                "got " + std::to_string(c.data.table_rows.size()));
    for (int64_t r : c.data.table_rows)
      if (r < 1 || r > criteo_max_id + 1)
        return make_error(errc::invalid_argument, "train: table_rows must be in [1, 2^24] (ids travel as float32), "
                                                  "got " + std::to_string(r));
  }
  if (c.model == "dlrm") {
    if (c.dlrm.embedding_dim <= 0) return make_error(errc::invalid_argument, "train: embedding_dim must be > 0");
    for (int64_t w : c.dlrm.bottom_mlp)
      if (w <= 0) return make_error(errc::invalid_argument, "train: bottom_mlp widths must be > 0");
    for (int64_t w : c.dlrm.top_mlp)
      if (w <= 0) return make_error(errc::invalid_argument, "train: top_mlp widths must be > 0");
  }
  if (c.data.kind == dataset_kind::synthetic) {
    if (c.data.sample.rank() != 3 || c.data.sample.numel() <= 0)
      return make_error(errc::invalid_argument, "train: synthetic sample shape must be (C, H, W), got " +
                                                    c.data.sample.to_string());
    if (c.data.train_size <= 0 || c.data.test_size <= 0 || c.data.classes < 2)
      return make_error(errc::invalid_argument, "train: synthetic sizes must be > 0 and classes >= 2");
  }
  return {};
}

// What differs between a host (cpu) model and a device (cuda) one: where a
// batch must be for forward, and who computes the loss and the updates. For
// cpu these are the plain calls and no copies; for cuda, batches are copied
// to the device and loss and optimizer run there.
class device_steps {
public:
  explicit device_steps(model& m)
      : m_(m), cuda_(m.where().kind == device_kind::cuda ? &static_cast<cuda::context&>(m.context()) : nullptr) {}

  // A buffer on the model's device (host for cpu).
  expected<tensor> buffer(const shape& s) {
    if (cuda_ == nullptr) return tensor::empty(s);
    try {
      return tensor::empty_on(cuda_->memory(), s);
    } catch (const std::bad_alloc&) {
      return make_error(errc::out_of_memory, "train: " + m_.where().to_string() + " has no room for " + s.to_string());
    }
  }
  // `host` where the model can read it: itself (cpu), or copied into staging_.
  expected<tensor_view> input(tensor_view host) {
    if (cuda_ == nullptr) return host;
    try {
      if (staging_.memory() == nullptr) staging_ = tensor::empty_on(cuda_->memory(), host.shape());
      else staging_.resize(host.shape());
    } catch (const std::bad_alloc&) {
      return make_error(errc::out_of_memory, "train: " + m_.where().to_string() + " has no room for the batch");
    }
    HF_RETURN_IF_ERROR(cuda_->copy(host, staging_.mutable_view()));
    return staging_.view();
  }
  expected<loss_result> loss(tensor_view logits, std::span<const int32_t> labels, mutable_tensor_view grad = {}) {
    if (cuda_ == nullptr) return softmax_cross_entropy(logits, labels, grad);
    return cuda_->softmax_cross_entropy(logits, labels, grad);
  }
  expected<std::unique_ptr<optimizer>> optimizer_for(const optimizer_config& c) {
    if (cuda_ == nullptr) return make_optimizer(c);
    return cuda_->make_optimizer(c);
  }
  std::string precision() const { return cuda_ == nullptr ? "f32" : to_string(cuda_->math()); }
  // Loss scaling (cuda f16 only): the loss gradient times `s` before
  // backward; the parameter gradients times 1 / s after, true when all are
  // finite.
  bool scales_loss() const { return cuda_ != nullptr && cuda_->math() == math_mode::f16; }
  // `g` times `s` in place (loss scaling; a replica's share of the batch).
  status scale(mutable_tensor_view g, float s) {
    if (cuda_ != nullptr) return cuda_->scale(g, s);
    for (float& v : g.f32_span()) v *= s;
    return {};
  }
  expected<bool> unscale(std::span<parameter* const> params, float s) {
    return cuda_->scale_gradients(params, 1.0f / s);
  }

private:
  model& m_;
  cuda::context* cuda_;
  tensor staging_;
};

// Data parallelism on a device model (cuda): the group sums host memory, and
// every replica, whatever its device, must take the same optimizer step in
// the same arithmetic to stay bit-identical (a cuda replica beside a cpu
// one). So the replica keeps a host twin of its model: each unit's gradients
// are copied to the twin as backward produces them, the sums, the optimizer,
// snapshots and checkpoints work on the twin, and its weights go to the
// device after every step. Batch norm statistics go to the host before a
// snapshot, a checkpoint or the epoch's average and back after. The twin's
// initial weights are the ones a cpu replica draws (copied to the device at
// the start). The twin's large gradient and weight buffers are page-locked
// (cuda::context::pin_host), so the copies run at the link's speed.
// train_config::host_mirror forces it on a cpu model too (tests).
// Thread affinity: the training thread.
class host_mirror {
  // Page-locked host ranges; released before the twin's memory is freed
  // (declared after host_, so destroyed first).
  struct pins {
    cuda::context* ctx = nullptr;
    std::vector<void*> held;
    pins() = default;
    pins(pins&& o) noexcept : ctx(o.ctx), held(std::exchange(o.held, {})) {}
    pins& operator=(pins&&) = delete;
    ~pins() {
      if (held.empty()) return;
      (void)ctx->synchronize();  // no copy may still read the memory (an error return mid-step)
      for (void* p : held) ctx->unpin_host(p);
    }
  };

public:
  static expected<host_mirror> make(const train_config& c, model& m) {
    host_mirror h;
    if (c.group == nullptr || (m.where().kind == device_kind::cpu && !c.host_mirror)) return h;
    HF_ASSIGN_OR_RETURN(model twin, build_model(m.spec(), device::cpu(), build_options{c.threads, c.seed}));
    h.dev_ = &m;
    h.host_.emplace(std::move(twin));
    h.dev_units_.resize(m.size());
    h.host_units_.resize(m.size());
    for (std::size_t i = 0; i < m.size(); ++i) {
      m.at(i).parameters(h.dev_units_[i]);
      h.host_->at(i).parameters(h.host_units_[i]);
      if (h.dev_units_[i].size() != h.host_units_[i].size())
        return make_error(errc::internal, "train: the host copy of " + m.where().to_string() + "'s model differs");
    }
    if (m.where().kind == device_kind::cuda) {
      // Buffers of 256 KiB and more: most of the bytes, in few calls.
      h.pins_.ctx = &static_cast<cuda::context&>(m.context());
      for (parameter* p : h.host_->parameters())
        for (tensor* t : {&p->value, &p->grad})
          if (void* raw = t->mutable_view().raw();
              t->byte_size() >= (std::size_t{256} << 10) && h.pins_.ctx->pin_host(raw, t->byte_size()))
            h.pins_.held.push_back(raw);
    }
    HF_RETURN_IF_ERROR(h.all_to_device());
    return h;
  }

  bool active() const noexcept { return host_.has_value(); }
  // The model the optimizer, the sums, snapshots and checkpoints see.
  model& optimized(model& m) noexcept { return host_ ? *host_ : m; }
  // Runs fn with the host model's threading in force (the optimizer step),
  // once no copy of the host weights to the device is still running (from
  // page-locked memory they run asynchronously; a step without rows has no
  // device work in between that would have waited for them).
  status on_host(const std::function<void()>& fn) {
    if (!host_) {
      fn();
      return {};
    }
    if (!pins_.held.empty()) HF_RETURN_IF_ERROR(dev_->context().synchronize());
    host_->context().run(fn);
    return {};
  }

  // Unit i's gradients, final on the device, into the host twin.
  status grads_to_host(std::size_t i) {
    if (!host_) return {};
    for (std::size_t k = 0; k < dev_units_[i].size(); ++k)
      HF_RETURN_IF_ERROR(dev_->context().copy(dev_units_[i][k]->grad.view(), host_units_[i][k]->grad.mutable_view()));
    return {};
  }
  status values_to_device() {
    if (!host_) return {};
    auto d = dev_->parameters(), h = host_->parameters();
    for (std::size_t k = 0; k < d.size(); ++k) {
      HF_RETURN_IF_ERROR(dev_->context().copy(h[k]->value.view(), d[k]->value.mutable_view()));
      ++d[k]->version;
    }
    return {};
  }
  status state_to_host() { return copy_state(true); }
  status state_to_device() { return copy_state(false); }
  // Weights and state (the start, a restored snapshot or checkpoint).
  status all_to_device() {
    HF_RETURN_IF_ERROR(values_to_device());
    return state_to_device();
  }

private:
  status copy_state(bool to_host) {
    if (!host_) return {};
    auto d = dev_->state(), h = host_->state();
    for (std::size_t k = 0; k < d.size(); ++k)
      HF_RETURN_IF_ERROR(to_host ? dev_->context().copy(d[k]->value.view(), h[k]->value.mutable_view())
                                 : dev_->context().copy(h[k]->value.view(), d[k]->value.mutable_view()));
    return {};
  }

  model* dev_ = nullptr;
  std::optional<model> host_;
  pins pins_;
  std::vector<std::vector<parameter*>> dev_units_, host_units_;
};

// What the metrics of rows [first, last) of a test set need: correct
// predictions, the sum of the per-row losses and, for 2 classes, each row's
// score logit[1] - logit[0] (monotone in p(click), so its AUC is p(click)'s;
// no saturation of p near 1 in float).
struct test_scores {
  int64_t correct = 0;
  double loss_sum = 0.0;
  std::vector<float> score;  // 2 classes: last - first entries
};

// Scores `m` over rows [first, last) of `data` in eval mode, batch by batch
// (views, no copies on cpu; a device model's logits are copied to the host
// for the scores).
expected<test_scores> score_rows(model& m, device_steps& dev, const image_dataset& data, int64_t first,
                                 int64_t last, int64_t batch) {
  test_scores out;
  const bool binary = data.classes == 2;
  if (binary) out.score.reserve(std::size_t(std::max<int64_t>(0, last - first)));
  tensor host;
  for (int64_t b = first; b < last; b += batch) {
    int64_t e = std::min(last, b + batch);
    HF_ASSIGN_OR_RETURN(tensor_view x, dev.input(data.images.view().slice_outer(b, e)));
    HF_ASSIGN_OR_RETURN(tensor_view logits, m.forward(x, mode::eval));
    HF_ASSIGN_OR_RETURN(loss_result r,
                        dev.loss(logits, std::span<const int32_t>(data.labels).subspan(std::size_t(b),
                                                                                      std::size_t(e - b))));
    out.correct += r.correct;
    out.loss_sum += r.loss * double(e - b);
    if (binary) {
      tensor_view l = logits;
      if (m.where().kind != device_kind::cpu) {
        host.resize(logits.shape());
        HF_RETURN_IF_ERROR(m.context().copy(logits, host.mutable_view()));
        l = host.view();
      }
      const float* p = l.f32();
      for (int64_t i = 0; i < e - b; ++i) out.score.push_back(p[2 * i + 1] - p[2 * i]);
    }
  }
  return out;
}

// The metrics of a whole test set from its scores (all rows, in order).
eval_metrics metrics_of(const image_dataset& test, int64_t correct, double loss_sum, std::span<const float> score) {
  eval_metrics r;
  if (test.size() == 0) return r;
  r.accuracy = double(correct) / double(test.size());
  if (test.classes == 2) {
    r.logloss = loss_sum / double(test.size());
    r.auc = roc_auc(score, test.labels);
  }
  return r;
}

// FNV-1a 64 over the parameters' bytes in order (host copies for a device
// model): equal checksums on two replicas mean bit-identical weights.

// save_weights reads host tensors: a device model's parameters and state
// are copied into a host twin of the model first.
status save_trained_weights(model& m, const std::string& path, uint64_t seed) {
  if (m.where().kind == device_kind::cpu) return save_weights(m, path);
  HF_ASSIGN_OR_RETURN(model host, build_model(m.spec(), device::cpu(), build_options{1, seed}));
  auto dp = m.parameters(), hp = host.parameters();
  auto ds = m.state(), hs = host.state();
  if (dp.size() != hp.size() || ds.size() != hs.size())
    return make_error(errc::internal, "save_weights: cpu and " + m.where().to_string() + " models differ");
  for (std::size_t i = 0; i < dp.size(); ++i)
    HF_RETURN_IF_ERROR(m.context().copy(dp[i]->value.view(), hp[i]->value.mutable_view()));
  for (std::size_t i = 0; i < ds.size(); ++i)
    HF_RETURN_IF_ERROR(m.context().copy(ds[i]->value.view(), hs[i]->value.mutable_view()));
  return save_weights(host, path);
}

// The in-memory batch source: copies each batch's rows out of the
// (normalised) training set in the epoch's shuffled order.
class memory_source final : public batch_source {
public:
  memory_source(const image_dataset& train, const epoch_plan& plan, uint64_t seed)
      : train_(train), plan_(plan), seed_(seed), order_(train.size(), seed), sample_(train.sample_shape()),
        batch_x_(tensor::empty(batch_shape(plan.batch_size))),
        batch_y_(std::size_t(plan.batch_size)) {}

  const epoch_plan& plan() const override { return plan_; }
  shape sample_shape() const override { return sample_; }
  int64_t classes() const override { return train_.classes; }
  status begin_epoch(int epoch) override {
    // An epoch again (dp failover goes back to the start of one): the
    // orders are drawn again from the start.
    if (order_.epoch() > epoch) order_ = epoch_order(train_.size(), seed_);
    while (order_.epoch() < epoch) order_.next_epoch();
    return {};
  }
  expected<train_batch> next(int epoch, int64_t step) override {
    return next_rows(epoch, step, 0, plan_.batch_rows(step));
  }
  expected<train_batch> next_rows(int, int64_t step, int64_t first, int64_t count) override {
    const int64_t b0 = plan_.batch_begin(step) + first;
    const int64_t per = sample_.numel();
    batch_x_.resize(batch_shape(count));
    const float* src = train_.images.f32();
    float* dst = batch_x_.f32();
    auto order = order_.order();
    for (int64_t j = 0; j < count; ++j) {
      int64_t idx = order[std::size_t(b0 + j)];
      std::memcpy(dst + j * per, src + idx * per, sizeof(float) * std::size_t(per));
      batch_y_[std::size_t(j)] = train_.labels[std::size_t(idx)];
    }
    return train_batch{batch_x_.view(), std::span<const int32_t>(batch_y_.data(), std::size_t(count))};
  }
  status end_epoch(int) override { return {}; }

private:
  // (n, sample...): images (n, C, H, W), criteo rows (n, 39).
  shape batch_shape(int64_t n) const {
    shape s{n};
    for (int64_t d : sample_.dims()) s.push_back(d);
    return s;
  }

  const image_dataset& train_;
  epoch_plan plan_;
  uint64_t seed_;
  epoch_order order_;
  shape sample_;
  tensor batch_x_;
  std::vector<int32_t> batch_y_;
};

// Data parallelism inside the training loop (train_config::group): the split
// of each global batch, the gradient sum, and the speeds behind the split.
class replica_sync {
public:
  replica_sync(const train_config& c, model& m) : c_(c), g_(c.group), params_(m.parameters()), state_(m.state()) {
    if (g_ != nullptr) {
      speeds_.assign(std::size_t(g_->size()), 1.0);
      fixed_.assign(std::size_t(g_->size()), 0.0);
      per_row_.assign(std::size_t(g_->size()), 0.0);
      unit_params_.resize(m.size());
      for (std::size_t i = 0; i < m.size(); ++i) m.at(i).parameters(unit_params_[i]);
    }
  }
  // Sums still running write into the model's gradients: an error return
  // from the training loop must not free them under the ring.
  ~replica_sync() {
    for (auto& f : pending_)
      if (f.valid()) f.wait();
  }
  replica_sync(const replica_sync&) = delete;
  replica_sync& operator=(const replica_sync&) = delete;

  bool active() const noexcept { return g_ != nullptr; }

  status check(const model& m) const {
    if (g_ == nullptr) return {};
    if (m.where().kind != device_kind::cpu)  // a device replica sums through its host_mirror
      return make_error(errc::internal, "train: the replica group sums " + m.where().to_string() + " memory");
    if (!c_.split) return make_error(errc::invalid_argument, "train: a replica group needs a split function");
    for (parameter* p : params_)
      if (p->sparse)
        return make_error(errc::unsupported, "train: data parallelism cannot train sparse parameter " + p->name +
                                                 ": its gradient holds only the batch's rows, which the replica "
                                                 "group does not sum yet; use a single device or parameter servers");
    return {};
  }

  // This replica's rows [first, first + count) of a global batch of `rows`.
  std::pair<int64_t, int64_t> slice(int64_t rows) {
    if (g_ == nullptr) return {0, rows};
    auto split = split_of(rows, 0);
    int64_t first = 0;
    for (int r = 0; r < g_->rank(); ++r) first += split[std::size_t(r)];
    return {first, split[std::size_t(g_->rank())]};
  }
  std::vector<int64_t> full_split(int64_t rows) const {
    return g_ == nullptr ? std::vector<int64_t>{rows} : split_of(rows, 0);
  }

  // Gradient buckets of one step, last unit first (backward's order). Unit
  // i's gradients are final once its backward ran, already scaled to the
  // global mean (the step scales the loss gradient by count / rows);
  // unit_done(i) zeroes them for a replica without rows and starts a sum
  // whenever the bucket holds bucket_bytes.
  // finish_step adds the step's statistics to the last bucket and waits for
  // every sum (all of them, also after an error: the ring may still be
  // writing into the others).
  status unit_done(std::size_t i, int64_t count) {
    for (parameter* p : unit_params_[i]) {
      auto g = p->grad.f32_span();
      if (count == 0) std::fill(g.begin(), g.end(), 0.0f);
      bucket_.push_back(g);
      bucket_bytes_ += int64_t(g.size_bytes());
    }
    if (bucket_bytes_ >= c_.bucket_bytes) flush();
    return {};
  }
  status finish_step(std::array<float, 4>& stats) {
    auto t0 = clock_type::now();
    // Waiting for the step's gradient sums (most overlap backward).
    trace::scope t_sum("allreduce");
    waits::scope w(waits::current_actor(), "the ring", "the gradient sums of its step");
    bucket_.emplace_back(stats.data(), stats.size());
    flush();
    status first;
    for (auto& f : pending_) {
      status s = f.get();
      if (first.ok() && !s.ok()) first = s;
    }
    pending_.clear();
    sum_seconds_ += seconds_since(t0);
    return first;
  }
  std::size_t units() const noexcept { return unit_params_.size(); }

  // This replica's step cost from a window of `steps` steps with `rows` rows
  // in all that kept it busy `seconds` (step time less the waits for sums),
  // fitted as fixed + per-row (step_cost_fit); every replica's goes into one
  // vector so all compute the same next split.
  status update_costs(int64_t steps, int64_t rows, double seconds) {
    if (g_ == nullptr || !c_.measured_split) return {};
    // No rows measured (a window where this replica had none): its last
    // estimate stands (with split_timed it then stays without rows until
    // the others' costs change: it is not measured again).
    if (steps > 0 && rows > 0 && seconds > 0) fit_.observe(double(rows) / double(steps), seconds / double(steps));
    return exchange_costs();
  }
  // The speed probe's measurement: seconds a pass with `rows` rows.
  void observe_probe(double rows, double seconds) { fit_.observe(rows, seconds, /*probe=*/true); }
  status exchange_costs() {
    const std::size_t n = std::size_t(g_->size()), me = std::size_t(g_->rank());
    std::vector<float> v(3 * n, 0.0f);
    if (fit_.measured()) {
      v[3 * me] = float(fit_.fixed);
      v[3 * me + 1] = float(fit_.per_row);
      v[3 * me + 2] = float(fit_.last_rows / fit_.last_seconds);
    } else {  // nothing measured yet: what the others know of this replica
      v[3 * me] = float(fixed_[me]);
      v[3 * me + 1] = float(per_row_[me]);
      v[3 * me + 2] = float(speeds_[me]);
    }
    std::span<float> s(v);
    HF_RETURN_IF_ERROR(timed_sum(std::span<const std::span<float>>(&s, 1)));
    for (std::size_t i = 0; i < n; ++i) {
      fixed_[i] = double(v[3 * i]);
      per_row_[i] = double(v[3 * i + 1]);
      speeds_[i] = double(v[3 * i + 2]);
    }
    ++costs_version_;
    return {};
  }

  // Batch norm running statistics: the replicas' mean, each weighted by
  // the rows it trained on this epoch: a replica that got a few rows of
  // each batch (a slow device beside a fast one) has noisier statistics
  // and counts less. The weights' sum travels with the sum (after a lost
  // replica the survivors' rows do not add up to the epoch's).
  status average_state(int64_t rows) {
    if (g_ == nullptr || state_.empty()) return {};
    std::array<float, 1> weight{float(rows)};
    std::vector<std::span<float>> all;
    for (state_tensor* t : state_) {
      all.push_back(t->value.f32_span());
      for (float& v : all.back()) v *= weight[0];
    }
    all.emplace_back(weight);
    HF_RETURN_IF_ERROR(timed_sum(all));
    if (!(weight[0] > 0)) return make_error(errc::internal, "train: no replica trained a row this epoch");
    const float inv = 1.0f / weight[0];
    all.pop_back();
    for (auto t : all)
      for (float& v : t) v *= inv;
    return {};
  }

  // Test metrics over the whole test set, each replica scoring a share in
  // proportion to its speed (so all finish together; equal without
  // measurements). For 2 classes the AUC needs every row's score: each
  // replica writes its rows' scores into a zeroed vector of the whole test
  // set and the group's sum gathers them (exact: one non-zero per entry).
  expected<eval_metrics> evaluate(model& m, device_steps& dev, const image_dataset& test, int64_t batch) {
    if (test.size() == 0) return eval_metrics{};
    int64_t first = 0, last = test.size();
    if (g_ != nullptr) {
      auto split = split_of(test.size(), batch);
      for (int r = 0; r < g_->rank(); ++r) first += split[std::size_t(r)];
      last = first + split[std::size_t(g_->rank())];
    }
    HF_ASSIGN_OR_RETURN(test_scores s, score_rows(m, dev, test, first, last, batch));
    if (g_ != nullptr) {
      std::array<float, 2> c{float(s.correct), float(s.loss_sum)};
      std::vector<float> all;
      std::vector<std::span<float>> sums{std::span<float>(c)};
      if (test.classes == 2) {
        all.assign(std::size_t(test.size()), 0.0f);
        std::copy(s.score.begin(), s.score.end(), all.begin() + first);
        sums.emplace_back(all);
      }
      HF_RETURN_IF_ERROR(timed_sum(sums));
      s.correct = int64_t(c[0]);
      s.loss_sum = double(c[1]);
      s.score = std::move(all);
    }
    return metrics_of(test, s.correct, s.loss_sum, s.score);
  }

  const std::vector<double>& speeds() const noexcept { return speeds_; }
  const std::vector<double>& fixed_seconds() const noexcept { return fixed_; }
  const std::vector<double>& row_seconds() const noexcept { return per_row_; }
  double sum_seconds() const noexcept { return sum_seconds_; }

  // Failover (replica_group::can_regroup).
  bool can_recover() const { return g_ != nullptr && g_->can_regroup(); }
  // After `failure`, when the group re-formed without the lost replicas
  // (else `failure` itself): agrees with the replicas left on the snapshot
  // to go back to - the earliest (epoch, step) of their latest snapshots,
  // which all still have (no replica finishes a sum another has not
  // started) - and keeps the speeds of those left.
  expected<std::pair<int, int64_t>> recover(status failure, int epoch, int64_t step) {
    for (auto& f : pending_)
      if (f.valid()) f.wait();
    pending_.clear();
    bucket_.clear();
    bucket_bytes_ = 0;
    for (;;) {
      HF_ASSIGN_OR_RETURN(bool changed, regroup());
      if (!changed) return failure;
      // Every replica's (epoch, step), one-hot: each learns all of them.
      const std::size_t n = std::size_t(g_->size()), r = std::size_t(g_->rank());
      std::vector<float> at(2 * n, 0.0f);
      at[2 * r] = float(epoch);
      at[2 * r + 1] = float(step);
      std::span<float> all(at);
      status s = timed_sum(std::span<const std::span<float>>(&all, 1));
      if (!s.ok()) {
        failure = s;  // lost another one meanwhile: again
        continue;
      }
      std::pair<int, int64_t> back{int(at[0]), int64_t(at[1])};
      for (std::size_t i = 1; i < n; ++i) back = std::min(back, std::pair<int, int64_t>{int(at[2 * i]), int64_t(at[2 * i + 1])});
      return back;
    }
  }

  // The group without the replicas lost since the last regroup (false: it
  // did not change); the speeds of those left stay theirs.
  expected<bool> regroup() {
    HF_ASSIGN_OR_RETURN(bool changed, g_->regroup());
    if (!changed) return false;
    std::vector<double> kept, kept_fixed, kept_row;
    for (int k : g_->kept()) {
      const bool known = k >= 0 && k < int(speeds_.size());
      kept.push_back(known ? speeds_[std::size_t(k)] : 1.0);
      kept_fixed.push_back(known ? fixed_[std::size_t(k)] : 0.0);
      kept_row.push_back(known ? per_row_[std::size_t(k)] : 0.0);
    }
    speeds_ = std::move(kept);
    fixed_ = std::move(kept_fixed);
    per_row_ = std::move(kept_row);
    kept_splits_.clear();  // other replicas
    ++costs_version_;
    return true;
  }

  // Start-up (before any snapshot exists): `step` - the speed probe's
  // sum - again in the smaller group after a replica was lost.
  status regroup_and_retry(const std::function<status()>& step) {
    status s = step();
    while (!s.ok() && can_recover() && s.code() != errc::cancelled) {
      HF_ASSIGN_OR_RETURN(bool changed, regroup());
      if (!changed) return s;
      s = step();
    }
    return s;
  }

private:
  // The split of `rows` rows: by measured step cost (split_timed) when the
  // split is measured, else by speed (`split`). `batch` > 0: the rows go in
  // batches of that size (evaluation), each with the fixed cost.
  //
  // Training batches keep their split while the new costs predict it within
  // 3% of the best split's slowest step: a new split means new batch shapes
  // (on a GPU, a new algorithm search for every convolution), and timing
  // noise would otherwise move a few rows at every measurement. Every
  // replica holds the same kept splits and costs and asks in the same order,
  // so all decide alike.
  std::vector<int64_t> split_of(int64_t rows, int64_t batch) const {
    if (!c_.measured_split || !c_.split_timed) return c_.split(rows, speeds_);
    std::vector<double> per_row(per_row_);
    if (batch > 0) {
      for (std::size_t i = 0; i < per_row.size(); ++i) per_row[i] += fixed_[i] / double(batch);
      return c_.split_timed(rows, fixed_, per_row);
    }
    auto& kept = kept_splits_[rows];
    if (kept.costs_version == costs_version_ && kept.split.size() == per_row.size()) return kept.split;
    auto best = c_.split_timed(rows, fixed_, per_row);
    auto slowest = [&](const std::vector<int64_t>& split) {
      double t = 0;
      for (std::size_t i = 0; i < split.size(); ++i)
        if (split[i] > 0) t = std::max(t, fixed_[i] + double(split[i]) * per_row[i]);
      return t;
    };
    if (kept.split.size() != best.size() || slowest(kept.split) > 1.03 * slowest(best)) kept.split = std::move(best);
    kept.costs_version = costs_version_;
    return kept.split;
  }
  struct kept_split {
    std::vector<int64_t> split;
    int64_t costs_version = -1;
  };

  void flush() {
    if (bucket_.empty()) return;
    pending_.push_back(g_->start_sum(bucket_));
    bucket_.clear();
    bucket_bytes_ = 0;
  }

  status timed_sum(std::span<const std::span<float>> t) {
    auto t0 = clock_type::now();
    trace::scope t_sum("allreduce");
    waits::scope w(waits::current_actor(), "the ring", "an all-reduce");
    status s = g_->sum(t);
    sum_seconds_ += seconds_since(t0);
    return s;
  }

  const train_config& c_;
  replica_group* g_;
  std::vector<parameter*> params_;
  std::vector<state_tensor*> state_;
  std::vector<std::vector<parameter*>> unit_params_;
  std::vector<std::span<float>> bucket_;
  int64_t bucket_bytes_ = 0;
  std::vector<std::future<status>> pending_;
  std::vector<double> speeds_;   // rows a second at the last measurement's rows (busy time)
  std::vector<double> fixed_;    // seconds a step whatever its rows
  std::vector<double> per_row_;  // seconds of each further row (0: not measured; split_rows_timed
                                 // counts it as the slowest measured)
  step_cost_fit fit_;           // this replica's
  int64_t costs_version_ = 0;   // counts the updates of the costs above
  mutable std::map<int64_t, kept_split> kept_splits_;  // by batch rows (split_of)
  double sum_seconds_ = 0.0;
};

// The tensors of an epoch checkpoint: parameters, model state (batch norm
// statistics), then the optimizer's state (none before its first step).
std::vector<checkpoint_tensor> checkpoint_tensors(model& m, optimizer& opt, int64_t& optimizer_state) {
  std::vector<checkpoint_tensor> v;
  for (parameter* p : m.parameters()) v.push_back({p->name, &p->value});
  for (state_tensor* s : m.state()) v.push_back({s->name, &s->value});
  auto st = opt.steps() > 0 ? opt.state() : std::vector<state_tensor*>{};
  optimizer_state = int64_t(st.size());
  for (state_tensor* s : st) v.push_back({s->name, &s->value});
  return v;
}

// Puts saved state back (checkpoint_tensors' order: parameters, model
// state, then `values.size() - nm` optimizer state tensors) into m and into
// `opt`, a fresh optimizer (restore_optimizer primes it).
status apply_saved_state(const train_config& c, model& m, optimizer& opt, std::span<parameter* const> params,
                         std::span<const tensor> values, std::span<const std::string> names,
                         int64_t optimizer_steps, const std::string& where) {
  std::vector<parameter*> ps = m.parameters();
  std::vector<state_tensor*> states = m.state();
  const std::size_t nm = ps.size() + states.size();
  HF_RETURN_IF_ERROR(restore_optimizer(opt, c.optimizer.kind, params, optimizer_steps, values.subspan(nm),
                                       names.subspan(nm), where));
  for (std::size_t i = 0; i < nm; ++i) {
    tensor& t = i < ps.size() ? ps[i]->value : states[i - ps.size()]->value;
    std::copy(values[i].f32(), values[i].f32() + values[i].numel(), t.f32());
  }
  for (parameter* p : ps) ++p->version;
  return {};
}

status save_epoch_checkpoint(const train_config& c, model& m, optimizer& opt, int epochs_done) {
  trace::scope t("checkpoint", trace::current_track(), "epoch", epochs_done);
  int64_t optimizer_state = 0;
  auto v = checkpoint_tensors(m, opt, optimizer_state);
  return c.checkpoints->save(epochs_done, opt.steps(), v, optimizer_state);
}

// A checkpoint's tensors (checkpoint_tensors' order) into m and opt, after
// checking that they are this model's (count, names, shapes); `where` names
// the checkpoint in errors.
status restore_checkpoint_state(const train_config& c, model& m, optimizer& opt, std::span<parameter* const> params,
                                const epoch_checkpoint& ck, const std::string& where) {
  std::vector<parameter*> ps = m.parameters();
  std::vector<state_tensor*> states = m.state();
  const std::size_t nm = ps.size() + states.size();
  if (ck.tensors.size() != ck.names.size() || ck.optimizer_state < 0 ||
      ck.tensors.size() != nm + std::size_t(ck.optimizer_state))
    return make_error(errc::invalid_argument, where + ": holds " + std::to_string(ck.tensors.size()) +
                                                  " tensors; " + c.model + " has " + std::to_string(nm) +
                                                  " (+ the optimizer's): not a checkpoint of this model");
  auto target = [&](std::size_t i) -> tensor& { return i < ps.size() ? ps[i]->value : states[i - ps.size()]->value; };
  auto name_of = [&](std::size_t i) -> const std::string& {
    return i < ps.size() ? ps[i]->name : states[i - ps.size()]->name;
  };
  for (std::size_t i = 0; i < nm; ++i)
    if (ck.names[i] != name_of(i) || !(ck.tensors[i].shape() == target(i).shape()))
      return make_error(errc::invalid_argument, where + ": tensor " + std::to_string(i) + " is " + ck.names[i] + " " +
                                                    ck.tensors[i].shape().to_string() + ", the model has " +
                                                    name_of(i) + " " + target(i).shape().to_string() +
                                                    " (the model or its options changed since the checkpoint)");
  return apply_saved_state(c, m, opt, params, ck.tensors, ck.names, ck.optimizer_steps, where);
}

// A mid-epoch checkpoint (train_config::step_checkpoints): a "position"
// tensor first - epochs done, the next step, the epoch's loss sum, correct
// predictions, this replica's rows and the epoch's samples so far, each as
// two floats (hi, lo: integers exact to 2^48, the loss sum to ~1e-14) -
// then what an epoch checkpoint holds. Label: epochs done * steps + next step.
status save_step_checkpoint(const train_config& c, model& m, optimizer& opt, int epoch, int64_t steps,
                            int64_t next_step, double loss_sum, int64_t correct, int64_t local_rows, int64_t samples) {
  trace::scope t("checkpoint", trace::current_track(), "step", next_step);
  int64_t optimizer_state = 0;
  auto v = checkpoint_tensors(m, opt, optimizer_state);
  tensor position = tensor::zeros({12});
  float* p = position.f32();
  const double values[6] = {double(epoch), double(next_step), loss_sum, double(correct), double(local_rows),
                            double(samples)};
  for (int i = 0; i < 6; ++i) {
    p[2 * i] = float(values[i]);
    p[2 * i + 1] = float(values[i] - double(p[2 * i]));
  }
  v.insert(v.begin(), checkpoint_tensor{"position", &position});
  const int64_t label = int64_t(epoch) * steps + next_step;
  if (label > INT32_MAX) return make_error(errc::unsupported, "train: step checkpoint label past 2^31 - 1");
  return c.step_checkpoints->save(int(label), opt.steps(), v, optimizer_state);
}

// Where a mid-epoch checkpoint continues (restore_step_checkpoint).
struct step_position {
  int epoch = 0;  // epochs done
  int64_t next_step = 0;
  double loss_sum = 0.0;
  int64_t correct = 0, local_rows = 0, samples = 0;
};

// --resume (train_config::step_checkpoints): the newest mid-epoch checkpoint
// (with a group: the newest every replica has) if it is after `after` (the
// label an epoch checkpoint of `epochs_done` epochs would have), restored into m and opt; none:
// next_step 0.
expected<step_position> restore_step_checkpoint(const train_config& c, model& m, optimizer& opt,
                                                std::span<parameter* const> params, int64_t after,
                                                std::string& resumed_from) {
  std::vector<int> have = c.step_checkpoints->labels();
  int64_t label = have.empty() ? 0 : have.back();
  if (c.group && c.group->size() > 1) {
    // Every replica's newest (two floats each: exact to 2^31), then whether
    // each has the oldest of them.
    const std::size_t n = std::size_t(c.group->size()), r = std::size_t(c.group->rank());
    std::vector<float> newest(2 * n, 0.0f);
    newest[2 * r] = float(label >> 16);
    newest[2 * r + 1] = float(label & 0xffff);
    std::span<float> all(newest);
    HF_RETURN_IF_ERROR(c.group->sum(std::span<const std::span<float>>(&all, 1)));
    label = INT64_MAX;
    for (std::size_t i = 0; i < n; ++i) label = std::min(label, (int64_t(newest[2 * i]) << 16) + int64_t(newest[2 * i + 1]));
    std::array<float, 1> has{label > 0 && std::find(have.begin(), have.end(), int(label)) != have.end() ? 1.0f : 0.0f};
    std::span<float> h(has);
    HF_RETURN_IF_ERROR(c.group->sum(std::span<const std::span<float>>(&h, 1)));
    if (has[0] != float(n)) label = 0;
  }
  if (label <= after) return step_position{};
  const std::string where = c.step_checkpoints->describe(int(label));
  resumed_from = where;
  HF_ASSIGN_OR_RETURN(epoch_checkpoint ck, c.step_checkpoints->load(int(label)));
  if (ck.names.empty() || ck.names[0] != "position" || ck.tensors[0].numel() != 12)
    return make_error(errc::invalid_argument, where + ": not a mid-epoch checkpoint (no position)");
  const float* p = ck.tensors[0].f32();
  auto value = [&](int i) { return double(p[2 * i]) + double(p[2 * i + 1]); };
  step_position pos{int(value(0)), int64_t(value(1)), value(2), int64_t(std::llround(value(3))),
                    int64_t(std::llround(value(4))), int64_t(std::llround(value(5)))};
  ck.names.erase(ck.names.begin());
  ck.tensors.erase(ck.tensors.begin());
  HF_RETURN_IF_ERROR(restore_checkpoint_state(c, m, opt, params, ck, where));
  return pos;
}

// --resume: the epochs done of the newest checkpoint (with a group: the
// newest every replica has) restored into m and opt; 0 when there is none.
expected<int> restore_epoch_checkpoint(const train_config& c, model& m, optimizer& opt,
                                       std::span<parameter* const> params, replica_sync& dp) {
  std::vector<int> have;
  for (int l : c.checkpoints->labels())
    if (l >= 1 && l <= c.epochs) have.push_back(l);
  int label = have.empty() ? 0 : have.back();
  if (c.group && c.group->size() > 1) {
    // flags[l] summed over the replicas: l is common when it reaches size()
    // (after a replica lost meanwhile, the size of the group left).
    std::vector<float> flags;
    HF_RETURN_IF_ERROR(dp.regroup_and_retry([&] {
      flags.assign(std::size_t(c.epochs) + 1, 0.0f);
      for (int l : have) flags[std::size_t(l)] = 1.0f;
      std::span<float> all(flags);
      return c.group->sum(std::span<const std::span<float>>(&all, 1));
    }));
    label = 0;
    for (int l = c.epochs; l >= 1 && label == 0; --l)
      if (flags[std::size_t(l)] == float(c.group->size())) label = l;
  }
  if (label == 0) return 0;
  const std::string where = c.checkpoints->describe(label);
  HF_ASSIGN_OR_RETURN(epoch_checkpoint ck, c.checkpoints->load(label));
  HF_RETURN_IF_ERROR(restore_checkpoint_state(c, m, opt, params, ck, where));
  return label;
}

expected<train_report> run(const train_config& c, const progress_callback& progress, model& m,
                           batch_source& source, const image_dataset& test, clock_type::time_point t_start) {
  device_steps dev(m);
  // A device replica's sums, optimizer, snapshots and checkpoints work on
  // its host twin `hm` (host_mirror); otherwise hm is m.
  HF_ASSIGN_OR_RETURN(host_mirror mirror, host_mirror::make(c, m));
  model& hm = mirror.optimized(m);
  auto new_optimizer = [&]() -> expected<std::unique_ptr<optimizer>> {
    return mirror.active() ? make_optimizer(c.optimizer) : dev.optimizer_for(c.optimizer);
  };
  HF_ASSIGN_OR_RETURN(auto opt, new_optimizer());
  std::vector<parameter*> params = hm.parameters();
  replica_sync dp(c, hm);
  HF_RETURN_IF_ERROR(dp.check(hm));

  train_report rep;
  rep.model = c.model;
  rep.where = m.where().to_string();
  rep.precision = dev.precision();
  // f16: dynamic loss scaling (train_config::loss_scale_init); not for
  // data-parallel replicas (their sums and steps are host f32).
  const bool scaling = dev.scales_loss() && !dp.active();
  loss_scaler scaler{scaling ? c.loss_scale_init : 1.0, c.loss_scale_growth_interval};
  rep.threads = m.context().threads();
  rep.parameters = m.parameter_count();

  const int64_t steps = source.plan().steps;
  const int64_t batch_size = source.plan().batch_size;
  HF_ASSIGN_OR_RETURN(tensor grad, dev.buffer({batch_size, m.spec().classes}));

  if (dp.active() && c.measured_split) {
    // Speed probe: forward and backward of batches of zeros at two sizes,
    // this replica's equal share of a batch and a quarter of it (each size
    // one untimed pass, then two timed), which fit its step cost (fixed +
    // per row; one size when the share is under 4 rows), then the first
    // split. On a twin of the model, so that batch norm statistics and
    // dropout state of the trained one stay as single-device training has
    // them. A device twin has its own context (stream): its own input, loss
    // and gradient buffers, and each pass waits for the device before it is
    // timed.
    HF_ASSIGN_OR_RETURN(model twin, build_model(m.spec(), m.where(), build_options{m.context().threads(), c.seed}));
    if (twin.where().kind == device_kind::cuda)  // the math the replica trains with
      static_cast<cuda::context&>(twin.context()).set_math(static_cast<cuda::context&>(m.context()).math());
    device_steps tdev(twin);
    const int64_t count = std::max<int64_t>(1, batch_size / c.group->size());
    std::vector<int64_t> sizes{count};
    if (count >= 4) sizes.insert(sizes.begin(), count / 4);
    status probed;
    twin.context().run([&] {
      for (int64_t n : sizes) {
        shape xs{n};
        const shape sample = source.sample_shape();  // (a temporary's dims() would dangle in the loop)
        for (int64_t d : sample.dims()) xs.push_back(d);
        tensor x = tensor::zeros(xs);
        std::vector<int32_t> y(std::size_t(n), 0);
        tensor g;
        double secs = 0;
        auto pass = [&]() -> status {
          HF_ASSIGN_OR_RETURN(tensor_view xin, tdev.input(x.view()));
          auto t0 = clock_type::now();
          HF_ASSIGN_OR_RETURN(tensor_view logits, twin.forward(xin, mode::train));
          bench_slowdown(t0);  // the probe sees the emulated device too
          emulate_step_cost(c);
          const auto tb = clock_type::now();
          if (g.empty()) {
            HF_ASSIGN_OR_RETURN(g, tdev.buffer(logits.shape()));
          }
          HF_RETURN_IF_ERROR(tdev.loss(logits, y, g.mutable_view()).error());
          HF_RETURN_IF_ERROR(twin.backward(g.view()).error());
          HF_RETURN_IF_ERROR(twin.context().synchronize());
          bench_slowdown(tb);
          secs += seconds_since(t0);
          return {};
        };
        for (int i = 0; i < 3 && probed.ok(); ++i) {
          if (i == 1) secs = 0;  // the first pass is not timed
          probed = pass();
        }
        if (!probed.ok()) return;
        dp.observe_probe(double(n), secs / 2);
      }
    });
    HF_RETURN_IF_ERROR(probed);
    // A replica lost before training starts: the others sum the speeds
    // again among themselves (a drill delays the sum, for the tests).
    drill_start_delay();
    HF_RETURN_IF_ERROR(dp.regroup_and_retry([&] { return dp.exchange_costs(); }));
  }

  if (c.checkpoints && hm.where().kind != device_kind::cpu)
    return make_error(errc::unsupported, "train: checkpoints (checkpoint_dir) of a " + m.where().to_string() +
                                             " model need strategy dp for now (its replicas keep a host copy)");
  int first_epoch = 0;
  step_position resumed_at;  // a mid-epoch checkpoint's (next_step 0: none)
  if (c.checkpoints && c.resume) {
    drill_start_delay();
    HF_ASSIGN_OR_RETURN(first_epoch, restore_epoch_checkpoint(c, hm, *opt, params, dp));
    if (c.step_checkpoints) {
      // A newer mid-epoch checkpoint replaces what the epoch checkpoint put
      // in, into a fresh optimizer (one restored twice would carry the
      // epoch checkpoint's state too).
      HF_ASSIGN_OR_RETURN(auto fresh, new_optimizer());
      HF_ASSIGN_OR_RETURN(resumed_at, restore_step_checkpoint(c, hm, *fresh, params,
                                                             int64_t(first_epoch) * source.plan().steps,
                                                             rep.resumed_from));
      if (resumed_at.next_step > 0) {
        first_epoch = resumed_at.epoch;
        opt = std::move(fresh);
      }
    }
    HF_RETURN_IF_ERROR(mirror.all_to_device());
    rep.resumed_epochs = first_epoch;
    rep.resumed_step = resumed_at.next_step;
    if (resumed_at.next_step == 0 && first_epoch > 0) rep.resumed_from = c.checkpoints->describe(first_epoch);
    for (int e = 0; e < first_epoch; ++e) HF_RETURN_IF_ERROR(source.skip_epoch(e));
  }

  train_history history;
  const auto t_loop = clock_type::now();
  // What an epoch accumulates up to a step; a failover snapshot keeps it.
  struct epoch_acc {
    epoch_report er;
    clock_type::time_point started{};  // the epoch's start (a rollback's redo counts in its time)
    int64_t next_step = 0;  // the first step not done
    int64_t samples_before = 0;  // resumed mid-epoch: the epoch's samples before this run (not in its time)
    double loss_sum = 0.0;
    int64_t correct = 0, local_rows = 0;
    // Since the last re-split (dp, measured split, resplit_every; the
    // epoch's start): busy time, rows and steps, the window's first step
    // not counted (a new split's first step pays for its new shapes).
    double resplit_busy = 0.0;
    int64_t resplit_rows = 0, resplit_steps = 0, window_step = 0;
    // The window since the last tick (this epoch's steps only): what the
    // progress callback and the history are told at the next one.
    double window_loss = 0.0;
    int64_t window_steps = 0, window_correct = 0, window_samples = 0;
  };
  // Failover (dp.can_recover()): the state at the two latest snapshot points
  // - each epoch's start and every snapshot_every steps in it. A replica is
  // at most one step ahead of another when one is lost (no replica finishes
  // a sum another has not started), so the earliest latest snapshot of the
  // replicas is one every replica still has.
  struct epoch_snapshot {
    int epoch = -1;
    epoch_acc acc;
    std::vector<tensor> values;  // parameters, model state, optimizer state (checkpoint_tensors' order)
    std::vector<std::string> names;
    int64_t optimizer_steps = 0;
  };
  std::array<epoch_snapshot, 2> snapshots;  // [latest], [the one before]
  std::size_t latest = 0;
  auto snapshot = [&](int epoch, const epoch_acc& acc) -> status {
    epoch_snapshot& last = snapshots[latest];
    if (last.epoch == epoch && last.acc.next_step == acc.next_step) return {};
    HF_RETURN_IF_ERROR(mirror.state_to_host());
    latest ^= 1;
    epoch_snapshot& sn = snapshots[latest];
    int64_t ns = 0;
    auto v = checkpoint_tensors(hm, *opt, ns);
    sn.epoch = epoch;
    sn.acc = acc;
    sn.values.clear();
    sn.names.clear();
    for (auto& t : v) {
      sn.values.push_back(t.value->clone());
      sn.names.push_back(t.name);
    }
    sn.optimizer_steps = opt->steps();
    return {};
  };
  auto restore = [&](int epoch, int64_t step) -> expected<epoch_acc> {
    const epoch_snapshot* found = nullptr;
    for (const auto& sn : snapshots)
      if (sn.epoch == epoch && sn.acc.next_step == step) found = &sn;
    if (found == nullptr)
      return make_error(errc::internal, "train: no snapshot of epoch " + std::to_string(epoch + 1) + " step " +
                                            std::to_string(step) + " to go back to");
    const epoch_snapshot& sn = *found;
    // A fresh optimizer with the snapshot's state (none before its first step).
    HF_ASSIGN_OR_RETURN(opt, new_optimizer());
    HF_RETURN_IF_ERROR(
        apply_saved_state(c, hm, *opt, params, sn.values, sn.names, sn.optimizer_steps, "the failover snapshot"));
    HF_RETURN_IF_ERROR(mirror.all_to_device());
    // The other snapshot may be ahead of this one: the next is taken afresh.
    for (auto& other : snapshots)
      if (&other != found) other.epoch = -1;
    latest = std::size_t(found - snapshots.data());
    return sn.acc;
  };
  const bool failover = dp.can_recover();
  // The report's record of one epoch's split and the costs behind it.
  auto note_split = [&] {
    rep.splits.push_back(dp.full_split(batch_size));
    rep.speeds.push_back(dp.speeds());
    rep.fixed_seconds.push_back(dp.fixed_seconds());
    rep.row_seconds.push_back(dp.row_seconds());
  };
  int64_t checkpoint_pending = 0;  // a request id asked for (train_config::checkpoint_now), not saved yet
  std::set<int64_t> checkpoints_handled;  // request ids saved for
  const int64_t snapshot_every = failover ? c.failover_snapshot_every : 0;
  // Runs `epoch` from a.next_step (0: its start) to its end.
  auto run_epoch = [&](int epoch, epoch_acc& a) -> status {
    HF_RETURN_IF_ERROR(source.begin_epoch(epoch));
    epoch_report& er = a.er;
    if (a.next_step == 0) {
      a = epoch_acc{};
      a.started = clock_type::now();
      er.epoch = epoch + 1;
      if (dp.active()) note_split();
    }
    if (failover) HF_RETURN_IF_ERROR(snapshot(epoch, a));
    double& loss_sum = a.loss_sum;
    int64_t& correct = a.correct;
    int64_t& local_rows = a.local_rows;
    double& resplit_busy = a.resplit_busy;
    int64_t& resplit_rows = a.resplit_rows;
    int64_t& resplit_steps = a.resplit_steps;
    double& window_loss = a.window_loss;
    int64_t& window_steps = a.window_steps;
    int64_t& window_correct = a.window_correct;
    int64_t& window_samples = a.window_samples;
    const auto t0 = a.started;
    auto window_from = clock_type::now();
    for (int64_t s = a.next_step; s < steps; ++s) {
      a.next_step = s;
      if (snapshot_every > 0 && s > 0 && s % snapshot_every == 0) HF_RETURN_IF_ERROR(snapshot(epoch, a));
      if (c.stop && c.stop->load(std::memory_order_relaxed))
        return make_error(errc::cancelled, "train: stopped at epoch " + std::to_string(epoch + 1) + " step " +
                                               std::to_string(s));
      // Trace (kernels/trace.hpp): one "train step" per step holding its
      // phases, on the calling actor's track; arg = step within the epoch.
      trace::scope t_step("train step", trace::current_track(), "step", s + 1);
      const auto t_busy = clock_type::now();
      const double sums_before = dp.sum_seconds();
      // `hetflow shell`'s checkpoint: asked once a step; saved after this
      // step, or after the next one when this is the epoch's last (the epoch
      // checkpoint covers it). Each request id once.
      if (c.checkpoint_now)
        if (const int64_t id = c.checkpoint_now(); id > 0 && !checkpoints_handled.count(id)) checkpoint_pending = id;
      const bool mid_epoch = c.step_checkpoints && s + 1 < steps;  // the last step: the epoch's checkpoint
      int64_t checkpoint_id = mid_epoch ? checkpoint_pending : 0;
      // Periodic (step_checkpoint_every): the same step on every replica.
      const bool periodic = mid_epoch && c.step_checkpoint_every > 0 && (s + 1) % c.step_checkpoint_every == 0;
      // A replica fetches only its rows of the global batch.
      const int64_t bn = source.plan().batch_rows(s);
      auto [first, count] = dp.slice(bn);
      trace::scope t_batch("batch", trace::current_track(), "step", s + 1);
      HF_ASSIGN_OR_RETURN(train_batch batch,
                          dp.active() ? source.next_rows(epoch, s, first, count) : source.next(epoch, s));
      t_batch.end();
      if (int64_t(batch.labels.size()) != count)
        return make_error(errc::internal, "train: the batch source gave " + std::to_string(batch.labels.size()) +
                                              " rows for step " + std::to_string(s + 1) + ", the plan says " +
                                              std::to_string(count));
      loss_result lr_res{};
      auto tc = clock_type::now();
      if (count > 0) {
        trace::scope t_fwd("forward", trace::current_track(), "step", s + 1);
        HF_ASSIGN_OR_RETURN(tensor_view x, dev.input(batch.images));
        HF_ASSIGN_OR_RETURN(tensor_view logits, m.forward(x, mode::train));
        grad.resize(logits.shape());
        HF_ASSIGN_OR_RETURN(lr_res, dev.loss(logits, batch.labels, grad.mutable_view()));
        if (scaling) HF_RETURN_IF_ERROR(dev.scale(grad.mutable_view(), float(scaler.scale)));
        // A replica's gradients count toward the global batch's mean: its
        // count of bn rows. Backward is linear in the loss gradient, so
        // scaling that (count x classes values) scales every parameter
        // gradient, without a pass over them (2 MB a step for the MLP).
        if (dp.active() && count != bn)
          HF_RETURN_IF_ERROR(dev.scale(grad.mutable_view(), float(double(count) / double(bn))));
        bench_slowdown(tc);
        emulate_step_cost(c);
        t_fwd.end();
        // Data parallel: the gradient sums start during backward (buckets).
        trace::scope t_bwd("backward", trace::current_track(), "step", s + 1);
        if (!dp.active()) {
          const auto tb = clock_type::now();
          HF_RETURN_IF_ERROR(m.backward(grad.view()).error());
          bench_slowdown(tb);
        } else {
          // Unit by unit, each unit's gradient bucket going to the ring as
          // soon as it is complete.
          tensor_view g = grad.view();
          for (std::size_t i = m.size(); i-- > 0;) {
            const auto tb = clock_type::now();
            HF_ASSIGN_OR_RETURN(g, m.backward(g, i > 0, i, i + 1));
            bench_slowdown(tb);
            HF_RETURN_IF_ERROR(mirror.grads_to_host(i));
            HF_RETURN_IF_ERROR(dp.unit_done(i, count));
          }
        }
      } else {
        for (std::size_t i = dp.units(); i-- > 0;) HF_RETURN_IF_ERROR(dp.unit_done(i, 0));
      }
      local_rows += count;
      if (dp.active()) {
        // The request ids the replicas have (ids < 2^24: exact in floats).
        std::array<float, 4> stats{float(lr_res.loss * double(count)), float(lr_res.correct), float(checkpoint_id),
                                   checkpoint_id > 0 ? 1.0f : 0.0f};
        HF_RETURN_IF_ERROR(dp.finish_step(stats));
        lr_res.loss = double(stats[0]) / double(bn);
        lr_res.correct = int64_t(stats[1]);
        // Any replica had one: all save after this step, under one id
        // (the replicas' mean: theirs when they agree).
        checkpoint_id = stats[3] > 0 ? int64_t(std::llround(double(stats[2]) / double(stats[3]))) : 0;
      }
      er.lr = lr_at(c.schedule, c.optimizer.lr, epoch, s, steps, c.epochs);
      bool apply = true;
      if (scaling && count > 0) {
        HF_ASSIGN_OR_RETURN(bool finite, dev.unscale(params, float(scaler.scale)));
        apply = scaler.update(finite);
      }
      if (apply) {
        trace::scope t_opt("optimizer", trace::current_track(), "step", s + 1);
        status stepped;
        HF_RETURN_IF_ERROR(mirror.on_host([&] { stepped = opt->step(params, er.lr); }));
        HF_RETURN_IF_ERROR(stepped);
        HF_RETURN_IF_ERROR(mirror.values_to_device());
      }
      double not_busy = 0.0;  // the checkpoint's time is not the step's (the split)
      if (checkpoint_id > 0 || periodic) {  // the epoch's books with this step's, as added below
        const auto t_save = clock_type::now();
        HF_RETURN_IF_ERROR(mirror.state_to_host());
        HF_RETURN_IF_ERROR(save_step_checkpoint(c, hm, *opt, epoch, steps, s + 1, loss_sum + lr_res.loss,
                                                correct + lr_res.correct, local_rows, er.samples + bn));
        ++rep.step_checkpoints;
        if (checkpoint_id > 0) {
          checkpoints_handled.insert(checkpoint_id);
          if (checkpoint_pending == checkpoint_id) checkpoint_pending = 0;
        }
        not_busy = seconds_since(t_save);
      }
      waits::progress();
      // Busy: the step's time but for the waits for sums (the ring and the
      // other replicas): what the split balances.
      if (a.window_step++ > 0) {
        resplit_busy += seconds_since(t_busy) - (dp.sum_seconds() - sums_before) - not_busy;
        resplit_rows += count;
        ++resplit_steps;
      }
      if (dp.active() && c.measured_split && c.resplit_every > 0 && (s + 1) % c.resplit_every == 0 && s + 1 < steps) {
        // Speeds drift (another job on a node, thermal limits): re-split
        // from this window's busy time. Every replica reaches this step,
        // sums the same costs and computes the same split.
        const auto split_before = dp.full_split(batch_size);
        HF_RETURN_IF_ERROR(dp.update_costs(resplit_steps, resplit_rows, resplit_busy));
        resplit_rows = resplit_steps = 0;
        resplit_busy = 0.0;
        // A new split's first step pays for its new batch shapes: not counted.
        a.window_step = dp.full_split(batch_size) == split_before ? 1 : 0;
        ++rep.resplits;
      }
      if (!std::isfinite(lr_res.loss))
        return make_error(errc::internal, "train: loss became " + std::to_string(lr_res.loss) + " at epoch " +
                                              std::to_string(epoch + 1) + " step " + std::to_string(s + 1) +
                                              "; lower the learning rate");
      loss_sum += lr_res.loss;
      window_loss += lr_res.loss;
      ++window_steps;
      correct += lr_res.correct;
      er.samples += bn;
      window_correct += lr_res.correct;
      window_samples += bn;
      if (s + 1 == steps || (c.progress_every > 0 && (s + 1) % c.progress_every == 0)) {
        auto now = clock_type::now();
        history.tick(std::chrono::duration<double>(now - t_loop).count(), epoch + 1, s + 1, window_loss,
                     window_steps, window_samples, std::chrono::duration<double>(now - window_from).count());
        if (progress) {
          double el = seconds_since(t0);
          progress(train_progress{epoch + 1, s + 1, steps, el > 0 ? double(er.samples) / el : 0.0,
                                  window_loss / double(window_steps),
                                  window_samples > 0 ? double(window_correct) / double(window_samples) : 0.0});
        }
        window_loss = 0.0;
        window_steps = window_correct = window_samples = 0;
        window_from = now;
      }
    }
    a.next_step = steps;
    er.train_seconds = seconds_since(t0);
    HF_RETURN_IF_ERROR(source.end_epoch(epoch));
    er.samples_per_s = er.train_seconds > 0 ? double(er.samples - a.samples_before) / er.train_seconds : 0.0;
    er.loss = loss_sum / double(steps);
    er.train_accuracy = double(correct) / double(er.samples);
    HF_RETURN_IF_ERROR(mirror.state_to_host());
    HF_RETURN_IF_ERROR(dp.average_state(local_rows));
    HF_RETURN_IF_ERROR(mirror.state_to_device());
    HF_RETURN_IF_ERROR(dp.update_costs(resplit_steps, resplit_rows, resplit_busy));
    if (c.eval_each_epoch || epoch + 1 == c.epochs) {
      trace::scope t_eval("evaluate", trace::current_track(), "epoch", epoch + 1);
      HF_ASSIGN_OR_RETURN(eval_metrics em,
                          dp.evaluate(m, dev, test, c.eval_batch_size > 0 ? c.eval_batch_size : c.batch_size));
      er.test_accuracy = em.accuracy;
      er.test_logloss = em.logloss;
      er.test_auc = em.auc;
    }
    if (c.checkpoints) HF_RETURN_IF_ERROR(save_epoch_checkpoint(c, hm, *opt, epoch + 1));
    rep.epochs.push_back(er);
    if (c.on_epoch) c.on_epoch(rep.epochs.back());
    return {};
  };
  epoch_acc acc;
  if (resumed_at.next_step > 0) {  // a mid-epoch checkpoint: its epoch from its step, with its books
    acc.started = clock_type::now();
    acc.er.epoch = first_epoch + 1;
    acc.next_step = resumed_at.next_step;
    acc.loss_sum = resumed_at.loss_sum;
    acc.correct = resumed_at.correct;
    acc.local_rows = resumed_at.local_rows;
    acc.er.samples = acc.samples_before = resumed_at.samples;
    if (dp.active()) note_split();
  }
  for (int epoch = first_epoch; epoch < c.epochs;) {
    status s = run_epoch(epoch, acc);
    if (s.ok()) {
      ++epoch;
      acc = epoch_acc{};
      continue;
    }
    if (!failover || s.code() == errc::cancelled) return s;
    // A replica was lost (else recover returns the failure): every replica
    // left goes back to the same snapshot (the earliest of their latest)
    // and trains on from there, each global batch split among them; what
    // was done after that snapshot is undone, so no row counts twice.
    const epoch_snapshot& mine = snapshots[latest];
    HF_ASSIGN_OR_RETURN(auto back, dp.recover(s, mine.epoch, mine.acc.next_step));
    HF_ASSIGN_OR_RETURN(acc, restore(back.first, back.second));
    // The costs again among those left: a replica lost during an exchange
    // may have left some with the new values and some with the old.
    HF_RETURN_IF_ERROR(dp.regroup_and_retry([&] { return dp.exchange_costs(); }));
    epoch = back.first;
    while (!rep.epochs.empty() && rep.epochs.back().epoch > epoch) rep.epochs.pop_back();
    const std::size_t kept_epochs = std::size_t(epoch - first_epoch) + (acc.next_step > 0 ? 1 : 0);
    auto keep_splits = [&](std::size_t n) {  // note_split's vectors grow together
      rep.splits.resize(n);
      rep.speeds.resize(n);
      rep.fixed_seconds.resize(n);
      rep.row_seconds.resize(n);
    };
    keep_splits(std::min(rep.splits.size(), kept_epochs));
    if (acc.next_step > 0 && !rep.splits.empty()) {  // the rest of this epoch splits among those left
      keep_splits(rep.splits.size() - 1);
      note_split();
    }
    ++rep.rollbacks;
    rep.rolled_back_to.emplace_back(epoch + 1, acc.next_step);
  }
  if (dp.active()) rep.replicas_at_end = c.group->size();
  HF_ASSIGN_OR_RETURN(rep.weights_checksum, weights_checksum(m));
  rep.allreduce_seconds = dp.sum_seconds();
  rep.loss_scale = scaler.scale;
  rep.overflow_steps = scaler.overflow_steps;
  history.finish();
  rep.history = std::move(history).take();
  // Replicas hold the same weights: rank 0 writes them.
  if (!c.save_weights.empty() && (!dp.active() || c.group->rank() == 0))
    HF_RETURN_IF_ERROR(save_trained_weights(m, c.save_weights, c.seed));
  rep.total_seconds = seconds_since(t_start);
  return rep;
}

expected<train_report> train_with(const train_config& c, batch_source& source, const image_dataset& test,
                                  const progress_callback& progress, clock_type::time_point t_start) {
  HF_ASSIGN_OR_RETURN(zoo_options zo, model_options_for(c));
  // The model is built from the config (as parameter-server shards build
  // it); the source must deliver what that model reads.
  if (!(zo.input == source.sample_shape()) || zo.classes != source.classes())
    return make_error(errc::invalid_argument, "train: the data's samples are " + source.sample_shape().to_string() +
                                                  " in " + std::to_string(source.classes()) + " classes, but " +
                                                  c.model + " for this dataset config reads " + zo.input.to_string() +
                                                  " in " + std::to_string(zo.classes) + " classes");
  HF_ASSIGN_OR_RETURN(model_spec spec, make_model_spec(c.model, zo));
  HF_ASSIGN_OR_RETURN(model m, build_model(spec, c.where, build_options{c.threads, c.seed}));
  if (c.precision) {
    if (m.where().kind == device_kind::cuda) {
      static_cast<cuda::context&>(m.context()).set_math(*c.precision);
    } else if (*c.precision == math_mode::bf16 || *c.precision == math_mode::f16) {
      return make_error(errc::invalid_argument, std::string("train: precision \"") + to_string(*c.precision) +
                                                    "\" needs a cuda device; " + m.where().to_string() +
                                                    " computes f32");
    }
  }
  expected<train_report> result = make_error(errc::internal, "train: did not run");
  // The device context may run the loop on another thread: the caller's
  // trace track goes with it (a caller without one gets a "trainer" track).
  trace::track_id tk = trace::current_track();
  if (tk == 0) tk = trace::track("trainer");
  const std::string actor = waits::current_actor();
  m.context().run([&] {
    trace::track_scope on_track(tk);
    waits::actor_scope as(actor);
    result = run(c, progress, m, source, test, t_start);
  });
  return result;
}

}  // namespace

train_history::train_history(std::size_t capacity) : capacity_(std::max<std::size_t>(2, capacity & ~std::size_t{1})) {
  points_.reserve(capacity_);
}

void train_history::tick(double seconds, int epoch, int64_t step, double loss_sum, int64_t steps, int64_t samples,
                         double step_seconds) {
  pending_.seconds = seconds;
  pending_.epoch = epoch;
  pending_.step = step;
  pending_.loss += loss_sum;  // a sum until the point is kept
  pending_.window_steps += steps;
  pending_.window_samples += samples;
  pending_.window_seconds += step_seconds;
  if (++pending_ticks_ < stride_) return;
  keep_pending();
}

void train_history::finish() {
  if (pending_ticks_ > 0) keep_pending();
}

void train_history::keep_pending() {
  history_point p = pending_;
  p.loss = p.window_steps > 0 ? p.loss / double(p.window_steps) : 0.0;
  p.samples_per_s = p.window_seconds > 0 ? double(p.window_samples) / p.window_seconds : 0.0;
  points_.push_back(p);
  pending_ = history_point{};
  pending_ticks_ = 0;
  if (points_.size() >= capacity_) halve();
}

// Pairs (0, 1), (2, 3), ... become one point each: the later one's time and
// step, the means over both windows. capacity_ is even, so no point is left
// unpaired.
void train_history::halve() {
  std::size_t out = 0;
  for (std::size_t i = 0; i + 1 < points_.size(); i += 2) {
    const history_point& a = points_[i];
    history_point m = points_[i + 1];
    const int64_t n = a.window_steps + m.window_steps;
    m.loss = n > 0 ? (a.loss * double(a.window_steps) + m.loss * double(m.window_steps)) / double(n) : 0.0;
    m.window_steps = n;
    m.window_samples += a.window_samples;
    m.window_seconds += a.window_seconds;
    m.samples_per_s = m.window_seconds > 0 ? double(m.window_samples) / m.window_seconds : 0.0;
    points_[out++] = m;
  }
  if (points_.size() % 2 == 1) points_[out++] = points_.back();
  points_.resize(out);
  stride_ *= 2;
}

expected<epoch_plan> make_epoch_plan(int64_t rows, int64_t batch_size, bool drop_last,
                                     int64_t max_steps_per_epoch) {
  if (batch_size <= 0) return make_error(errc::invalid_argument, "train: batch_size must be > 0");
  epoch_plan p;
  p.rows = rows;
  p.batch_size = batch_size;
  const int64_t full = rows / batch_size;
  p.steps = (drop_last || rows % batch_size == 0) ? full : full + 1;
  if (max_steps_per_epoch > 0) p.steps = std::min(p.steps, max_steps_per_epoch);
  if (p.steps <= 0)
    return make_error(errc::invalid_argument, "train: " + std::to_string(rows) +
                                                  " training samples make no batch of " + std::to_string(batch_size));
  return p;
}

epoch_order::epoch_order(int64_t rows, uint64_t seed)
    : order_(std::size_t(std::max<int64_t>(rows, 0))), shuffle_(splitmix64(seed ^ 0x5f0ff1e5ull)) {
  std::iota(order_.begin(), order_.end(), int64_t{0});
}

void epoch_order::next_epoch() {
  for (int64_t i = int64_t(order_.size()) - 1; i > 0; --i)
    std::swap(order_[std::size_t(i)], order_[std::size_t(shuffle_.below(uint64_t(i + 1)))]);
  ++epoch_;
}

sample_ledger::sample_ledger(int64_t rows) : seen_(std::size_t(std::max<int64_t>(rows, 0)), 0) {}

void sample_ledger::begin_epoch(int epoch, int64_t expected) {
  std::fill(seen_.begin(), seen_.end(), uint8_t{0});
  epoch_ = epoch;
  expected_ = expected;
  count_ = 0;
  checksum_ = 0;
}

status sample_ledger::add(std::span<const int64_t> ids, const std::string& who) {
  for (int64_t id : ids) {
    if (id < 0 || id >= int64_t(seen_.size()))
      return make_error(errc::internal, "exactly-once check: " + who + " sent sample id " + std::to_string(id) +
                                            " in epoch " + std::to_string(epoch_ + 1) + ", but the training set has " +
                                            std::to_string(seen_.size()) + " rows");
    if (seen_[std::size_t(id)])
      return make_error(errc::internal, "exactly-once check: sample " + std::to_string(id) + " came twice in epoch " +
                                            std::to_string(epoch_ + 1) + " (the second time from " + who + ")");
    seen_[std::size_t(id)] = 1;
  }
  count_ += int64_t(ids.size());
  checksum_ += checksum_of(ids);
  return {};
}

status sample_ledger::end_epoch() const {
  if (count_ != expected_)
    return make_error(errc::internal, "exactly-once check: epoch " + std::to_string(epoch_ + 1) + " used " +
                                          std::to_string(count_) + " distinct samples, expected " +
                                          std::to_string(expected_));
  return {};
}

uint64_t sample_ledger::checksum_of(std::span<const int64_t> ids) noexcept {
  uint64_t sum = 0;
  for (int64_t id : ids) sum += splitmix64(uint64_t(id) + 1);
  return sum;
}

expected<std::unique_ptr<batch_source>> make_memory_source(const image_dataset& train, const train_config& c) {
  HF_ASSIGN_OR_RETURN(epoch_plan plan,
                      make_epoch_plan(train.size(), c.batch_size, c.drop_last, c.max_steps_per_epoch));
  return std::unique_ptr<batch_source>(new memory_source(train, plan, c.seed));
}

namespace {

// Rows per table of c's criteo data: data.table_rows (one value for every
// table, or one each), else criteo_table_rows.
expected<std::vector<int64_t>> criteo_tables_of(const train_config& c) {
  if (c.data.table_rows.size() == 1) return std::vector<int64_t>(std::size_t(criteo_tables), c.data.table_rows[0]);
  if (!c.data.table_rows.empty()) return c.data.table_rows;
  HF_ASSIGN_OR_RETURN(criteo_tables_info t, criteo_table_rows(c.data.path));
  return t.rows;
}

// The criteo rows split into training (first) and test (last test_fraction)
// sets. Ids beyond the tables (vocabularies of another run, a table_rows
// too small) are refused here, naming the column, rather than mid-training.
expected<training_data> load_criteo_data(const train_config& c, bool with_test) {
  HF_ASSIGN_OR_RETURN(criteo_rows rows, load_criteo(c.data.path, c.data.max_rows));
  // Hash mode without table_rows sizes the tables from these same records:
  // nothing to check, and no second scan.
  if (!c.data.table_rows.empty() || criteo_has_vocabularies(c.data.path)) {
    HF_ASSIGN_OR_RETURN(std::vector<int64_t> tables, criteo_tables_of(c));
    for (std::size_t t = 0; t < tables.size(); ++t)
      if (rows.max_id[t] >= tables[t])
        return make_error(errc::invalid_argument,
                          "criteo data: column C" + std::to_string(t + 1) + " of " + c.data.path + " has id " +
                              std::to_string(rows.max_id[t]) + " but its table has " + std::to_string(tables[t]) +
                              " rows (" +
                              (c.data.table_rows.empty()
                                   ? criteo_vocab_name(int(t)) + "'s lines + 1: the vocabularies are not from the "
                                                                 "run that wrote the part files)"
                                   : std::string("table_rows: raise it)")));
  }
  const int64_t n = rows.data.size();
  const int64_t n_test = std::llround(double(n) * c.data.test_fraction);
  const int64_t n_train = n - n_test;
  if (n_test < 1 || n_train < 1)
    return make_error(errc::invalid_argument, "criteo data: " + std::to_string(n) + " rows of " + c.data.path +
                                                  " at test_fraction " + std::to_string(c.data.test_fraction) +
                                                  " leave " + std::to_string(n_train) + " training and " +
                                                  std::to_string(n_test) + " test rows; both must be >= 1");
  training_data d;
  d.train.classes = d.test.classes = 2;
  if (with_test) {
    d.test.images = tensor::from(rows.data.images.view().slice_outer(n_train, n));
    d.test.labels.assign(rows.data.labels.begin() + n_train, rows.data.labels.end());
  }
  // Shrinking keeps the storage: no copy of the training rows.
  d.train.images = std::move(rows.data.images);
  d.train.images.resize(shape{n_train, criteo_columns});
  d.train.labels = std::move(rows.data.labels);
  d.train.labels.resize(std::size_t(n_train));
  return d;
}

// Raw text, parsed and hashed here: the rows of load_criteo_data on a hash
// mode preprocess output of the same files (ids < range = the table rows).
expected<training_data> load_criteo_text_data(const train_config& c, bool with_test) {
  HF_ASSIGN_OR_RETURN(criteo_text text, criteo_text::open(criteo_text_options_of(c.data)));
  HF_ASSIGN_OR_RETURN(criteo_split split, split_criteo_rows(text.rows(), c.data.test_fraction, "the criteo text"));
  training_data d;
  HF_ASSIGN_OR_RETURN(d.train, text.load_range(0, split.train));
  d.test.classes = 2;
  if (with_test) {
    HF_ASSIGN_OR_RETURN(d.test, text.load_range(split.train, text.rows()));
  }
  return d;
}

}  // namespace

expected<zoo_options> model_options_for(const train_config& c) {
  HF_RETURN_IF_ERROR(check_config(c));
  zoo_options zo;
  zo.width = c.width;
  zo.head_width = c.head_width;
  zo.insert_layers = c.insert_layers;
  switch (c.data.kind) {
    case dataset_kind::fashion_mnist:
      zo.input = shape{1, 28, 28};
      zo.classes = 10;
      break;
    case dataset_kind::synthetic:
      zo.input = c.data.sample;
      zo.classes = c.data.classes;
      break;
    case dataset_kind::criteo_text:
      zo.input = shape{criteo_columns};
      zo.classes = 2;
      zo.dlrm = dlrm_spec{criteo_dense_columns, std::vector<int64_t>(std::size_t(criteo_tables), int64_t(c.data.hash_range)),
                          c.dlrm.embedding_dim, c.dlrm.bottom_mlp};
      zo.dlrm_top_mlp = c.dlrm.top_mlp;
      break;
    case dataset_kind::criteo: {
      zo.input = shape{criteo_columns};
      zo.classes = 2;
      HF_ASSIGN_OR_RETURN(std::vector<int64_t> tables, criteo_tables_of(c));
      zo.dlrm = dlrm_spec{criteo_dense_columns, std::move(tables), c.dlrm.embedding_dim, c.dlrm.bottom_mlp};
      zo.dlrm_top_mlp = c.dlrm.top_mlp;
      break;
    }
  }
  return zo;
}

expected<eval_metrics> evaluate_model(model& m, const image_dataset& test, int64_t batch) {
  if (batch <= 0) return make_error(errc::invalid_argument, "evaluate: batch must be > 0");
  expected<eval_metrics> result = eval_metrics{};
  m.context().run([&] {
    device_steps dev(m);
    auto s = score_rows(m, dev, test, 0, test.size(), batch);
    if (!s)
      result = s.error();
    else
      result = metrics_of(test, s->correct, s->loss_sum, s->score);
  });
  return result;
}

expected<training_data> load_training_data(const train_config& c, bool normalize_sets, bool with_test) {
  HF_RETURN_IF_ERROR(check_config(c));
  // Click records are used as stored (dense already log(x + 1)); their ids
  // must not be shifted.
  if (c.data.kind == dataset_kind::criteo) return load_criteo_data(c, with_test);
  if (c.data.kind == dataset_kind::criteo_text) return load_criteo_text_data(c, with_test);
  training_data d;
  if (c.data.kind == dataset_kind::fashion_mnist) {
    HF_ASSIGN_OR_RETURN(d.train, load_fashion_mnist(c.data.path, true));
    if (with_test) {
      HF_ASSIGN_OR_RETURN(d.test, load_fashion_mnist(c.data.path, false));
    }
  } else {
    d.train = make_synthetic_images(c.data.sample, c.data.train_size, c.data.classes, c.seed, c.data.noise);
    // Same prototypes (seed), the samples after the training ones.
    if (with_test)
      d.test = make_synthetic_images(c.data.sample, c.data.test_size, c.data.classes, c.seed, c.data.noise,
                                     c.data.train_size);
  }
  d.stats = channel_stats(d.train);
  if (normalize_sets) {
    normalize(d.train, d.stats);
    if (with_test) normalize(d.test, d.stats);
  }
  return d;
}

expected<tensor> sample_training_batch(const train_config& c, int64_t rows) {
  if (rows <= 0) return make_error(errc::invalid_argument, "sample batch: rows must be > 0");
  image_dataset d;
  if (c.data.kind == dataset_kind::fashion_mnist) {
    HF_ASSIGN_OR_RETURN(d, load_fashion_mnist(c.data.path, true, rows));
  } else if (c.data.kind == dataset_kind::synthetic) {
    d = make_synthetic_images(c.data.sample, std::min(rows, std::max<int64_t>(1, c.data.train_size)), c.data.classes,
                              c.seed, c.data.noise);
  } else {
    return make_error(errc::unsupported, "sample batch: image datasets only");
  }
  if (d.size() == 0) return make_error(errc::invalid_argument, "sample batch: the training set is empty");
  normalize(d, channel_stats(d));
  if (d.size() == rows) return std::move(d.images);
  shape s{rows};
  const shape one = d.sample_shape();
  for (int64_t dim : one.dims()) s.push_back(dim);
  tensor x = tensor::empty(s);
  const std::size_t per = std::size_t(one.numel());
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(x.f32() + std::size_t(i) * per, d.images.f32() + std::size_t(i % d.size()) * per, per * sizeof(float));
  return x;
}

expected<train_report> train_from_source(const train_config& c, batch_source& source, const image_dataset& test,
                                         const progress_callback& progress) {
  auto t_start = clock_type::now();
  HF_RETURN_IF_ERROR(check_config(c));
  return train_with(c, source, test, progress, t_start);
}

expected<train_report> train_single(const train_config& c, const progress_callback& progress) {
  auto t_start = clock_type::now();
  HF_ASSIGN_OR_RETURN(training_data d, load_training_data(c, true));
  HF_ASSIGN_OR_RETURN(auto source, make_memory_source(d.train, c));
  return train_with(c, *source, d.test, progress, t_start);
}

expected<uint64_t> weights_checksum(model& m) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (parameter* p : m.parameters()) {
    tensor host;
    tensor_view v = p->value.view();
    if (m.where().kind != device_kind::cpu) {
      host = tensor::empty(p->value.shape());
      HF_RETURN_IF_ERROR(m.context().copy(v, host.mutable_view()));
      v = host.view();
    }
    const auto* b = static_cast<const unsigned char*>(static_cast<const void*>(v.f32()));
    for (std::size_t i = 0; i < v.byte_size(); ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  }
  return h;
}

}  // namespace hetflow::kernels
