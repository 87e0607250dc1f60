// train_single on synthetic data: learning, schedules, cancellation, errors.
#define BOOST_TEST_MODULE kernels_trainer
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "kernels/trainer.hpp"
#include "kernels/weights_io.hpp"

using namespace hetflow;
using namespace hetflow::kernels;

namespace {

train_config small_config() {
  train_config c;
  c.model = "mlp";
  c.width = 0.25;
  c.data.kind = dataset_kind::synthetic;
  c.data.sample = shape{1, 10, 10};
  c.data.train_size = 1024;
  c.data.test_size = 256;
  c.data.classes = 5;
  c.data.noise = 1.5f;
  c.epochs = 2;
  c.batch_size = 32;
  c.optimizer = {optimizer_kind::sgd, 0.02, 0.9};
  c.threads = 2;
  c.progress_every = 8;
  return c;
}

}  // namespace

BOOST_AUTO_TEST_CASE(learns_synthetic_images) {
  train_config c = small_config();
  int calls = 0;
  int64_t last_step = 0;
  double window_accuracy_sum[2] = {0, 0};  // per epoch; windows of 8 equal batches
  auto rep = train_single(c, [&](const train_progress& p) {
    ++calls;
    BOOST_CHECK_EQUAL(p.steps_per_epoch, 32);
    BOOST_CHECK(p.step > 0 && p.step <= 32);
    BOOST_CHECK(std::isfinite(p.loss));
    BOOST_CHECK(p.accuracy >= 0.0 && p.accuracy <= 1.0);
    window_accuracy_sum[p.epoch - 1] += p.accuracy;
    last_step = p.step;
  });
  BOOST_REQUIRE_MESSAGE(rep.has_value(), rep.error().to_string());
  BOOST_REQUIRE_EQUAL(rep->epochs.size(), 2u);
  BOOST_CHECK_EQUAL(calls, 8);  // every 8 steps, 32 steps, 2 epochs
  BOOST_CHECK_EQUAL(last_step, 32);
  const auto& e1 = rep->epochs[0];
  const auto& e2 = rep->epochs[1];
  BOOST_TEST_MESSAGE("loss " << e1.loss << " -> " << e2.loss << ", test accuracy " << e1.test_accuracy << " -> "
                             << e2.test_accuracy);
  BOOST_CHECK_LT(e2.loss, e1.loss);
  BOOST_CHECK_GT(e2.test_accuracy, 0.8);  // chance is 0.2
  BOOST_CHECK_EQUAL(e2.samples, 1024);
  // The progress windows' accuracies (4 windows of 8 batches of 32) average
  // to the epoch's training accuracy.
  BOOST_CHECK_CLOSE(window_accuracy_sum[0] / 4, e1.train_accuracy, 1e-9);
  BOOST_CHECK_CLOSE(window_accuracy_sum[1] / 4, e2.train_accuracy, 1e-9);
  BOOST_CHECK_GT(e2.samples_per_s, 0.0);
  BOOST_CHECK_EQUAL(rep->threads, 2);
  BOOST_CHECK_GT(rep->parameters, 0);
}

BOOST_AUTO_TEST_CASE(adam_lenet_partial_batches_and_weights) {
  train_config c = small_config();
  c.model = "lenet5";
  c.width = 1.0;
  c.data.sample = shape{1, 16, 16};
  c.data.train_size = 300;  // 300 = 9 * 32 + 12: a partial last batch
  c.data.noise = 0.5f;
  c.epochs = 1;
  c.optimizer = {optimizer_kind::adam, 0.003};
  c.eval_batch_size = 100;
  c.save_weights = (std::filesystem::temp_directory_path() / ("hetflow_trainer_" + std::to_string(::getpid()))).string();
  auto rep = train_single(c);
  BOOST_REQUIRE_MESSAGE(rep.has_value(), rep.error().to_string());
  BOOST_CHECK_EQUAL(rep->epochs[0].samples, 300);
  BOOST_CHECK_GT(rep->epochs[0].test_accuracy, 0.5);  // chance is 0.2
  BOOST_CHECK(std::filesystem::exists(c.save_weights));
  std::filesystem::remove(c.save_weights);
}

BOOST_AUTO_TEST_CASE(drop_last_and_step_limits) {
  train_config c = small_config();
  c.data.train_size = 100;
  c.epochs = 1;
  c.drop_last = true;
  auto rep = train_single(c);
  BOOST_REQUIRE(rep.has_value());
  BOOST_CHECK_EQUAL(rep->epochs[0].samples, 96);
  c.max_steps_per_epoch = 2;
  c.drop_last = false;
  rep = train_single(c);
  BOOST_REQUIRE(rep.has_value());
  BOOST_CHECK_EQUAL(rep->epochs[0].samples, 64);
}

BOOST_AUTO_TEST_CASE(schedules) {
  lr_schedule constant;
  BOOST_CHECK_EQUAL(lr_at(constant, 0.1, 3, 5, 10, 5), 0.1);
  lr_schedule step{lr_schedule_kind::step, 2, 0.5};
  BOOST_CHECK_CLOSE(lr_at(step, 0.1, 1, 9, 10, 5), 0.1, 1e-9);
  BOOST_CHECK_CLOSE(lr_at(step, 0.1, 2, 0, 10, 5), 0.05, 1e-9);
  BOOST_CHECK_CLOSE(lr_at(step, 0.1, 4, 0, 10, 5), 0.025, 1e-9);
  lr_schedule cosine{lr_schedule_kind::cosine, 1, 0.1, 0.001};
  BOOST_CHECK_CLOSE(lr_at(cosine, 0.1, 0, 0, 10, 2), 0.1, 1e-9);
  BOOST_CHECK_CLOSE(lr_at(cosine, 0.1, 1, 0, 10, 2), 0.0505, 1e-6);  // halfway
  BOOST_CHECK_LT(lr_at(cosine, 0.1, 1, 9, 10, 2), 0.003);
}

BOOST_AUTO_TEST_CASE(stop_flag_cancels) {
  train_config c = small_config();
  std::atomic<bool> stop{false};
  c.stop = &stop;
  auto rep = train_single(c, [&](const train_progress& p) {
    if (p.step >= 8) stop = true;
  });
  BOOST_REQUIRE(!rep.has_value());
  BOOST_CHECK(rep.error().code() == errc::cancelled);
}

// precision: cpu devices compute f32; bf16 and f16 are refused with a
// message, f32 and tf32 (the default's name) train as before and the report
// says "f32".
BOOST_AUTO_TEST_CASE(precision_on_cpu) {
  for (math_mode m : {math_mode::bf16, math_mode::f16}) {
    train_config c = small_config();
    c.precision = m;
    auto r = train_single(c);
    BOOST_REQUIRE(!r.has_value());
    BOOST_CHECK(r.error().code() == errc::invalid_argument);
    BOOST_CHECK_MESSAGE(r.error().to_string().find("needs a cuda device") != std::string::npos, r.error().to_string());
  }
  train_config c = small_config();
  c.epochs = 1;
  auto plain = train_single(c);
  c.precision = math_mode::tf32;
  auto tf32 = train_single(c);
  BOOST_REQUIRE(plain.has_value() && tf32.has_value());
  BOOST_CHECK_EQUAL(tf32->precision, "f32");
  BOOST_CHECK_EQUAL(tf32->weights_checksum, plain->weights_checksum);
  math_mode parsed{};
  BOOST_CHECK(parse_math_mode("bf16", parsed) && parsed == math_mode::bf16);
  BOOST_CHECK(!parse_math_mode("fp16", parsed));
}

// f16's loss scaling rules (the cuda trainer applies them; its GPU test saw
// no overflow, so they are checked here).
BOOST_AUTO_TEST_CASE(loss_scaler_rules) {
  loss_scaler s{8.0, 3};
  BOOST_CHECK(s.update(true) && s.update(true));
  BOOST_CHECK_EQUAL(s.scale, 8.0);
  BOOST_CHECK(s.update(true));  // third clean step in a row: doubles
  BOOST_CHECK_EQUAL(s.scale, 16.0);
  BOOST_CHECK(s.update(true) && s.update(true));
  BOOST_CHECK(!s.update(false));  // overflow: skipped, halved, count restarts
  BOOST_CHECK_EQUAL(s.scale, 8.0);
  BOOST_CHECK_EQUAL(s.overflow_steps, 1);
  BOOST_CHECK(s.update(true) && s.update(true));
  BOOST_CHECK_EQUAL(s.scale, 8.0);
  for (int i = 0; i < 10; ++i) s.update(false);
  BOOST_CHECK_EQUAL(s.scale, 1.0);  // never below 1
  BOOST_CHECK_EQUAL(s.overflow_steps, 11);
  loss_scaler top{16777216.0, 1};
  top.update(true);
  BOOST_CHECK_EQUAL(top.scale, 16777216.0);  // never above 2^24
}

BOOST_AUTO_TEST_CASE(bad_configs_are_errors) {
  train_config c = small_config();
  c.model = "nope";
  BOOST_CHECK(train_single(c).error().code() == errc::not_found);
  c = small_config();
  c.batch_size = 0;
  BOOST_CHECK(train_single(c).error().code() == errc::invalid_argument);
  c = small_config();
  c.data.kind = dataset_kind::fashion_mnist;
  c.data.path = "/nonexistent/fashion";
  auto r = train_single(c);
  BOOST_CHECK(r.error().code() == errc::not_found);
  BOOST_CHECK(r.error().message().find("/nonexistent/fashion") != std::string::npos);
  c = small_config();
  c.model = "dlrm";  // click-log model on images: it trains on dataset_kind::criteo only
  auto dlrm = train_single(c);
  BOOST_REQUIRE(!dlrm.has_value());
  BOOST_CHECK(dlrm.error().code() == errc::invalid_argument);
  BOOST_CHECK(dlrm.error().message().find("criteo") != std::string::npos);
  c = small_config();
  c.where = device::cuda(0);
  BOOST_CHECK(train_single(c).error().code() == errc::unsupported);
  c = small_config();
  c.optimizer.lr = 1e6;  // diverges
  auto div = train_single(c);
  BOOST_REQUIRE(!div.has_value());
  BOOST_CHECK(div.error().message().find("learning rate") != std::string::npos);
}

namespace {

// epoch_checkpoints in memory (the actors keep them as files).
class memory_checkpoints final : public epoch_checkpoints {
public:
  status save(int epochs_done, int64_t optimizer_steps, const std::vector<checkpoint_tensor>& tensors,
              int64_t optimizer_state) override {
    if (fail_from > 0 && epochs_done >= fail_from)
      return make_error(errc::io_error, "cannot write memory:" + std::to_string(epochs_done) + " (disk full?)");
    epoch_checkpoint ck;
    ck.epochs_done = epochs_done;
    ck.optimizer_steps = optimizer_steps;
    ck.optimizer_state = optimizer_state;
    for (const auto& t : tensors) {
      ck.names.push_back(t.name);
      ck.tensors.push_back(tensor::from(t.value->view()));
    }
    kept[epochs_done] = std::move(ck);
    return {};
  }
  std::vector<int> labels() const override {
    std::vector<int> v;
    for (const auto& [l, ck] : kept) v.push_back(l);
    return v;
  }
  expected<epoch_checkpoint> load(int epochs_done) const override {
    auto it = kept.find(epochs_done);
    if (it == kept.end()) return make_error(errc::not_found, "no checkpoint " + std::to_string(epochs_done));
    epoch_checkpoint ck;
    ck.epochs_done = it->second.epochs_done;
    ck.optimizer_steps = it->second.optimizer_steps;
    ck.optimizer_state = it->second.optimizer_state;
    ck.names = it->second.names;
    for (const auto& t : it->second.tensors) ck.tensors.push_back(tensor::from(t.view()));
    return ck;
  }
  std::string describe(int epochs_done) const override { return "memory:" + std::to_string(epochs_done); }
  std::map<int, epoch_checkpoint> kept;
  int fail_from = 0;  // > 0: saves of this epoch and later fail (a full disk)
};

}  // namespace

BOOST_AUTO_TEST_CASE(epoch_checkpoints_resume_to_the_same_weights) {
  // Adam: its state and step count (bias correction) must come back too.
  train_config c = small_config();
  c.epochs = 3;
  c.optimizer = {optimizer_kind::adam, 0.002, 0.0};
  auto store = std::make_shared<memory_checkpoints>();
  c.checkpoints = store;
  auto full = train_single(c);
  BOOST_REQUIRE(full.has_value());
  BOOST_CHECK_EQUAL(store->kept.size(), 3u);
  BOOST_CHECK_EQUAL(store->kept.at(2).optimizer_steps, 2 * 1024 / 32);
  BOOST_CHECK_GT(store->kept.at(2).optimizer_state, 0);

  // Lose the last checkpoint: resume after epoch 2, train epoch 3 only.
  store->kept.erase(3);
  c.resume = true;
  auto resumed = train_single(c);
  BOOST_REQUIRE(resumed.has_value());
  BOOST_CHECK_EQUAL(resumed->resumed_epochs, 2);
  BOOST_REQUIRE_EQUAL(resumed->epochs.size(), 1u);
  BOOST_CHECK_EQUAL(resumed->epochs[0].epoch, 3);
  BOOST_CHECK_EQUAL(resumed->epochs[0].samples, 1024);
  BOOST_CHECK_EQUAL(resumed->weights_checksum, full->weights_checksum);

  // Checkpoints past the job's epochs are not resumed from; none at all:
  // from the start.
  c.epochs = 1;
  store->kept.erase(1);
  auto none = train_single(c);
  BOOST_REQUIRE(none.has_value());
  BOOST_CHECK_EQUAL(none->resumed_epochs, 0);
  BOOST_CHECK_EQUAL(none->epochs.size(), 1u);

  // Another model's checkpoint: an error naming it, not a crash.
  c.epochs = 3;
  c.width = 0.5;
  auto other = train_single(c);
  BOOST_REQUIRE(!other.has_value());
  BOOST_CHECK(other.error().code() == errc::invalid_argument);
  BOOST_CHECK(other.error().message().find("memory:") != std::string::npos);
}

// `hetflow shell`'s checkpoint mid-epoch (train_config::step_checkpoints):
// a request in epoch 2 saves after that step; --resume continues there,
// with the epoch's books, and ends on the uninterrupted weights; a request
// id seen again is not saved twice; another model's step checkpoint is an
// error naming it.
BOOST_AUTO_TEST_CASE(a_mid_epoch_checkpoint_resumes_at_its_step) {
  train_config c = small_config();
  c.epochs = 3;
  c.optimizer = {optimizer_kind::adam, 0.002, 0.0};
  auto epochs = std::make_shared<memory_checkpoints>();
  auto steps = std::make_shared<memory_checkpoints>();
  c.checkpoints = epochs;
  c.step_checkpoints = steps;
  auto full = train_single(c);
  BOOST_REQUIRE(full.has_value());
  BOOST_CHECK(steps->kept.empty());  // nobody asked

  // Ask at the 40th step of the run (epoch 2, 32 steps an epoch), with the
  // same id again two steps later.
  int64_t polls = 0;
  c.checkpoint_now = [&polls]() -> int64_t {
    ++polls;
    return polls == 40 || polls == 42 ? 7 : 0;
  };
  epochs->kept.clear();
  auto asked = train_single(c);
  BOOST_REQUIRE(asked.has_value());
  BOOST_CHECK_EQUAL(asked->step_checkpoints, 1);
  BOOST_REQUIRE_EQUAL(steps->kept.size(), 1u);
  BOOST_CHECK_EQUAL(steps->kept.begin()->first, 32 + 8);  // 1 epoch done, next step 8
  BOOST_CHECK_EQUAL(asked->weights_checksum, full->weights_checksum);

  // Lose the epoch checkpoints 2 and 3: resume at step 8 of epoch 2.
  epochs->kept.erase(3);
  epochs->kept.erase(2);
  c.checkpoint_now = nullptr;
  c.resume = true;
  auto resumed = train_single(c);
  BOOST_REQUIRE(resumed.has_value());
  BOOST_CHECK_EQUAL(resumed->resumed_epochs, 1);
  BOOST_CHECK_EQUAL(resumed->resumed_step, 8);
  BOOST_REQUIRE_EQUAL(resumed->epochs.size(), 2u);
  BOOST_CHECK_EQUAL(resumed->epochs[0].samples, 1024);  // the whole epoch's books
  BOOST_CHECK_CLOSE(resumed->epochs[0].loss, full->epochs[1].loss, 1e-9);
  BOOST_CHECK_EQUAL(resumed->weights_checksum, full->weights_checksum);

  // Another model's: an error naming the checkpoint and the tensor.
  epochs->kept.clear();
  c.width = 0.5;
  auto other = train_single(c);
  BOOST_REQUIRE(!other.has_value());
  BOOST_CHECK(other.error().code() == errc::invalid_argument);
  BOOST_TEST_MESSAGE(other.error().message());
  BOOST_CHECK(other.error().message().find("memory:40: tensor 0 is") != std::string::npos);
}

// step_checkpoint_every: a checkpoint every N steps of each epoch (not at
// its last step: the epoch checkpoint), and --resume from the newest one
// ends on the uninterrupted weights.
BOOST_AUTO_TEST_CASE(periodic_mid_epoch_checkpoints_and_resume_from_the_newest) {
  train_config c = small_config();
  c.epochs = 2;
  c.optimizer = {optimizer_kind::adam, 0.002, 0.0};
  auto epochs = std::make_shared<memory_checkpoints>();
  auto steps = std::make_shared<memory_checkpoints>();
  c.checkpoints = epochs;
  c.step_checkpoints = steps;
  c.step_checkpoint_every = 8;  // 32 steps an epoch: after steps 8, 16, 24 (32: the epoch's own)
  auto full = train_single(c);
  BOOST_REQUIRE(full.has_value());
  BOOST_CHECK_EQUAL(full->step_checkpoints, 6);
  std::vector<int64_t> labels;
  for (const auto& [label, _] : steps->kept) labels.push_back(label);
  BOOST_CHECK((labels == std::vector<int64_t>{8, 16, 24, 40, 48, 56}));
  // Epoch 2's checkpoint lost (the run died after step 24 of epoch 2):
  // resume from step 24 of epoch 2.
  epochs->kept.erase(2);
  c.resume = true;
  auto resumed = train_single(c);
  BOOST_REQUIRE(resumed.has_value());
  BOOST_CHECK_EQUAL(resumed->resumed_epochs, 1);
  BOOST_CHECK_EQUAL(resumed->resumed_step, 24);
  BOOST_CHECK_EQUAL(resumed->weights_checksum, full->weights_checksum);
  BOOST_REQUIRE_EQUAL(resumed->epochs.size(), 1u);
  BOOST_CHECK_CLOSE(resumed->epochs[0].loss, full->epochs[1].loss, 1e-9);
}

BOOST_AUTO_TEST_CASE(a_checkpoint_that_cannot_be_written_ends_the_run_and_keeps_the_last_good_one) {
  train_config c = small_config();
  c.epochs = 3;
  auto store = std::make_shared<memory_checkpoints>();
  store->fail_from = 2;
  c.checkpoints = store;
  auto r = train_single(c);
  BOOST_REQUIRE(!r.has_value());
  BOOST_CHECK(r.error().code() == errc::io_error);
  BOOST_CHECK(r.error().message().find("memory:2") != std::string::npos);
  BOOST_REQUIRE_EQUAL(store->kept.size(), 1u);  // epoch 1's survives
  // ... and --resume continues from it once the disk has room again.
  store->fail_from = 0;
  c.resume = true;
  auto resumed = train_single(c);
  BOOST_REQUIRE(resumed.has_value());
  BOOST_CHECK_EQUAL(resumed->resumed_epochs, 1);
  BOOST_CHECK_EQUAL(resumed->epochs.size(), 2u);
}
