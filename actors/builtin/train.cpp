// The train job, strategy "single": one device of the head node trains the
// whole model (kernels::train_single). Later strategies (dp, ps, ralp,
// hetpipe, auto) add their own actors to the same job kind.
//
// The trainer is a detached actor (its own thread): a training run blocks for
// minutes and must not hold a CAF scheduler thread. It polls
// node_services::stopping() so SIGINT or a failure elsewhere ends it within
// one step.
#include <chrono>
#include <cstdio>

#include "actors/builtin/skeleton.hpp"
#include "actors/caf_types.hpp"
#include "actors/json.hpp"
#include "actors/log.hpp"
#include "actors/node_services.hpp"
#include "actors/registry.hpp"
#include "kernels/trainer.hpp"

namespace hetflow::actors::builtin {
namespace {

using clock_type = std::chrono::steady_clock;

std::string format_eta(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "?";
  int s = static_cast<int>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%d:%02d", s / 60, s % 60);
  return buf;
}

expected<kernels::train_config> config_of(const topology::cluster& c, const topology::actor_spec& spec) {
  const auto& p = c.job.params;
  kernels::train_config cfg;
  cfg.model = p.get_string("model", "lenet5");
  cfg.width = p.get_number("width", 1.0);
  std::string ds = p.get_string("dataset", "fashion-mnist");
  if (ds == "fashion-mnist") {
    cfg.data.kind = kernels::dataset_kind::fashion_mnist;
    cfg.data.path = p.get_string("data_dir", "/usr/share/datasets/fashion-mnist");
  } else {
    cfg.data.kind = kernels::dataset_kind::synthetic;
    auto shape = p.get_ints("input_shape");
    if (shape.size() != 3)
      return make_error(errc::invalid_argument,
                        "[job] input_shape must be [channels, height, width] for the synthetic dataset");
    cfg.data.sample = kernels::shape{shape[0], shape[1], shape[2]};
    cfg.data.train_size = p.get_int("train_size", 10000);
    cfg.data.test_size = p.get_int("test_size", 2000);
    cfg.data.classes = p.get_int("classes", 10);
  }
  cfg.epochs = static_cast<int>(p.get_int("epochs", 3));
  cfg.batch_size = p.get_int("batch_size", 64);
  std::string opt = p.get_string("optimizer", "sgd");
  cfg.optimizer.kind = opt == "adam" ? kernels::optimizer_kind::adam : kernels::optimizer_kind::sgd;
  cfg.optimizer.lr = p.get_number("lr", 0.05);
  cfg.optimizer.momentum = p.get_number("momentum", 0.9);
  cfg.optimizer.weight_decay = p.get_number("weight_decay", 0.0);
  std::string sched = p.get_string("lr_schedule", "constant");
  cfg.schedule.kind = sched == "step"     ? kernels::lr_schedule_kind::step
                      : sched == "cosine" ? kernels::lr_schedule_kind::cosine
                                          : kernels::lr_schedule_kind::constant;
  cfg.schedule.step_epochs = static_cast<int>(p.get_int("lr_step_epochs", 1));
  cfg.schedule.gamma = p.get_number("lr_gamma", 0.1);
  cfg.schedule.min_lr = p.get_number("lr_min", 0.0);
  cfg.seed = static_cast<uint64_t>(p.get_int("seed", 1));
  cfg.eval_each_epoch = p.get_bool("eval_each_epoch", true);
  cfg.max_steps_per_epoch = p.get_int("max_steps_per_epoch", 0);
  cfg.save_weights = p.get_string("save_weights", "");
  cfg.progress_every = 20;

  const auto* node = c.find_node(spec.node);
  const auto& dev = node->devices.empty() ? topology::device_spec{} : node->devices.front();
  // cuda: the CUDA module; train_single says why when it cannot run there.
  cfg.where = dev.kind == topology::device_kind::cuda ? kernels::device::cuda(dev.index) : kernels::device::cpu();
  cfg.threads = dev.threads;
  return cfg;
}

void write_epochs(json_writer& w, const kernels::train_report& r) {
  w.key("epochs").begin_array();
  for (auto& e : r.epochs) {
    w.begin_object().field("epoch", int64_t{e.epoch}).field("loss", e.loss);
    w.field("train_accuracy", e.train_accuracy);
    w.key("test_accuracy");
    if (e.test_accuracy < 0)
      w.null();
    else
      w.value(e.test_accuracy);
    w.field("samples_per_s", e.samples_per_s).field("train_seconds", e.train_seconds);
    w.field("lr", e.lr).field("samples", e.samples).end_object();
  }
  w.end_array();
}

caf::behavior trainer(caf::event_based_actor* self, actor_env env) {
  auto svc = env.services;
  std::string me = env.spec.name;
  auto cfg = config_of(env.cluster, env.spec);
  self->set_default_handler(caf::skip);
  return {
    [self, svc, me, cfg](start_atom) {
      if (!cfg) {
        svc->report_done(me, false, cfg.error().message(), {});
        self->quit();
        return;
      }
      kernels::train_config c = *cfg;
      c.stop = &svc->stopping();
      log_info("training " + c.model + " for " + std::to_string(c.epochs) + " epochs, batch " +
               std::to_string(c.batch_size) + ", on " + c.where.to_string());
      auto last_print = clock_type::now() - std::chrono::seconds(10);
      auto t0 = clock_type::now();
      int last_epoch = 0;
      kernels::train_report partial;
      auto on_progress = [&](const kernels::train_progress& p) {
        auto now = clock_type::now();
        bool new_epoch = p.epoch != last_epoch;
        last_epoch = p.epoch;
        if (!new_epoch && now - last_print < std::chrono::seconds(2)) return;
        last_print = now;
        double done = (p.epoch - 1) + static_cast<double>(p.step) / std::max<int64_t>(1, p.steps_per_epoch);
        double elapsed = std::chrono::duration<double>(now - t0).count();
        double eta = done > 0 ? elapsed / done * (c.epochs - done) : -1;
        char line[256];
        std::snprintf(line, sizeof line,
                      "epoch %d/%d step %lld/%lld | %.0f samples/s | loss %.4f | ETA %s", p.epoch,
                      c.epochs, static_cast<long long>(p.step),
                      static_cast<long long>(p.steps_per_epoch), p.samples_per_s, p.loss,
                      format_eta(eta).c_str());
        log_info(line);
      };
      c.on_epoch = [&](const kernels::epoch_report& e) {
        char line[256];
        std::snprintf(line, sizeof line,
                      "epoch %d/%d done: loss %.4f, train accuracy %.4f, test accuracy %s, "
                      "%.0f samples/s (%.1f s)",
                      e.epoch, c.epochs, e.loss, e.train_accuracy,
                      e.test_accuracy < 0 ? "-" : std::to_string(e.test_accuracy).substr(0, 6).c_str(),
                      e.samples_per_s, e.train_seconds);
        log_info(line);
      };
      auto r = kernels::train_single(c, on_progress);
      if (!r) {
        svc->report_done(me, false, r.error().to_string(), {});
        self->quit();
        return;
      }
      json_writer w;
      w.begin_object().field("model", r->model).field("device", r->where);
      w.field("threads", int64_t{r->threads}).field("parameters", r->parameters);
      w.field("total_seconds", r->total_seconds);
      write_epochs(w, *r);
      w.end_object();
      std::string summary = "trained " + r->model;
      if (!r->epochs.empty() && r->epochs.back().test_accuracy >= 0)
        summary += ", test accuracy " + std::to_string(r->epochs.back().test_accuracy).substr(0, 6);
      svc->report_done(me, true, summary, w.str());
      self->quit();
    },
  };
}

}  // namespace

void add_train(registry& reg) {
  using topology::key_spec;
  using topology::key_type;
  topology::type_spec job{"train", "train a model (strategy \"single\": one device, whole model)", {}};
  auto key = [&](std::string name, key_type t, topology::setting_value def, std::string help,
                 std::optional<double> lo = {}, std::optional<double> hi = {},
                 std::vector<std::string> one_of = {}) {
    job.keys.push_back(key_spec{std::move(name), t, false, std::move(def), std::move(help), lo, hi,
                                std::move(one_of)});
  };
  key("strategy", key_type::string, std::string("single"), "how the job is distributed", {}, {},
      {"single"});
  key("model", key_type::string, std::string("lenet5"), "model zoo name", {}, {},
      {"mlp", "lenet5", "vgg11", "vgg16", "vgg19", "resnet18", "resnet50", "resnet152", "dlrm"});
  key("width", key_type::number, 1.0, "width multiplier of image models", 0.01, 16.0);
  key("dataset", key_type::string, std::string("fashion-mnist"), "training data", {}, {},
      {"fashion-mnist", "synthetic"});
  key("data_dir", key_type::string, std::string("/usr/share/datasets/fashion-mnist"),
      "folder of the Fashion-MNIST IDX files");
  key("input_shape", key_type::size_list, std::vector<int64_t>{1, 28, 28},
      "synthetic dataset: [channels, height, width]");
  key("train_size", key_type::integer, int64_t{10000}, "synthetic dataset: training samples", 1.0);
  key("test_size", key_type::integer, int64_t{2000}, "synthetic dataset: test samples", 1.0);
  key("classes", key_type::integer, int64_t{10}, "synthetic dataset: classes", 2.0);
  key("epochs", key_type::integer, int64_t{3}, "passes over the training set", 1.0, 10000.0);
  key("batch_size", key_type::integer, int64_t{64}, "samples per step", 1.0, 1e6);
  key("optimizer", key_type::string, std::string("sgd"), "sgd (with momentum) or adam", {}, {},
      {"sgd", "adam"});
  key("lr", key_type::number, 0.05, "learning rate", 0.0, 100.0);
  key("momentum", key_type::number, 0.9, "SGD momentum", 0.0, 1.0);
  key("weight_decay", key_type::number, 0.0, "L2 weight decay", 0.0, 1.0);
  key("lr_schedule", key_type::string, std::string("constant"), "learning-rate schedule", {}, {},
      {"constant", "step", "cosine"});
  key("lr_step_epochs", key_type::integer, int64_t{1}, "step schedule: epochs per step", 1.0);
  key("lr_gamma", key_type::number, 0.1, "step schedule: factor per step", 0.0, 1.0);
  key("lr_min", key_type::number, 0.0, "cosine schedule: final learning rate", 0.0);
  key("seed", key_type::integer, int64_t{1}, "seed of weights, shuffling and synthetic data", 0.0);
  key("eval_each_epoch", key_type::boolean, true, "evaluate on the test set after every epoch");
  key("max_steps_per_epoch", key_type::integer, int64_t{0}, "cut epochs short (0: full epochs)", 0.0);
  key("save_weights", key_type::string, std::string(""), "write the trained weights to this file");
  (void)reg.add_job_kind(
      job,
      [](const topology::cluster& c) -> expected<std::vector<topology::actor_spec>> {
        if (!c.actors.empty()) return std::vector<topology::actor_spec>{};
        std::vector<topology::actor_spec> v(1);
        v[0].name = v[0].type = "trainer";
        v[0].node = c.nodes[0].name;
        return v;
      },
      [](const std::vector<actor_result>& results) -> std::string {
        // Lift the trainer's metrics ("model", "epochs", ...) to the report's top level.
        for (auto& r : results)
          if (r.name == "trainer" && r.metrics_json.size() > 2)
            return r.metrics_json.substr(1, r.metrics_json.size() - 2);
        return {};
      });
  topology::type_spec t{"trainer", "trains the job's model on its node's first device", {}};
  (void)reg.add_actor_type(t, [](caf::actor_system& sys, const actor_env& env) {
    return sys.spawn<caf::detached>(trainer, env);
  });
}

}  // namespace hetflow::actors::builtin
