// The train job, strategy "single": one device of the head node trains the
// whole model. Strategy "dp": one replica per device of the job's nodes
// (dp_nodes), each a dp_replica actor next to a ring_member; every replica
// trains on its rows of each global batch and the ring sums the gradients
// (kernels::replica_group), so the replicas stay bit-identical. The batch
// split follows measured speeds (topology::split_rows, the planner's rule;
// `hetflow plan` prints it). Later strategies (ps, ralp, hetpipe, auto) add
// their own actors to the same job kind.
//
// Input: "memory" (default) loads the dataset on the trainer's node
// (kernels::train_single); "stream" adds pre-processing shard actors
// (stream_shard.cpp) that augment, normalise (or, for dataset criteo-text,
// parse and hash raw Criteo text) and send batches to the trainer
// with credit-based flow control, and the trainer pulls them through a
// kernels::batch_source (stream_trainer.cpp; protocol in stream_protocol.hpp).
// Both run the same training loop (kernels::train_from_source). Strategy
// "ps" streams too: shard k feeds ps worker k % W (stream_job.hpp,
// actors/ps/ps_worker.cpp).
//
// The trainer has its own thread: a training run blocks for minutes and must
// not hold a CAF scheduler thread. With input "memory" it is a detached
// actor; with "stream" a blocking actor, so that the batch source can read
// its mailbox. It polls node_services::stopping() so SIGINT or a failure
// elsewhere ends it within one step.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "actors/builtin/job_actor.hpp"
#include "actors/builtin/job_profiles.hpp"
#include "actors/builtin/skeleton.hpp"
#include "actors/builtin/stream_job.hpp"
#include "actors/caf_types.hpp"
#include "actors/control_board.hpp"
#include "actors/json.hpp"
#include "actors/metrics.hpp"
#include "actors/log.hpp"
#include "actors/node_services.hpp"
#include "actors/registry.hpp"
#include "actors/ring/ring_member.hpp"
#include "kernels/preprocess/count_stream.hpp"
#include "kernels/trace.hpp"
#include "kernels/waits.hpp"
#include "kernels/trainer.hpp"
#include "topology/data_parallel.hpp"
#include "actors/ps/ps_checkpoint.hpp"
#include "actors/ps/ps_job.hpp"
#include "actors/hetpipe/hp_job.hpp"
#include "actors/ralp/ralp_job.hpp"

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

}  // namespace

expected<kernels::train_config> train_config_of(const topology::cluster& c, const std::string& node_name,
                                                std::size_t device) {
  const auto& p = c.job.params;
  kernels::train_config cfg;
  cfg.model = p.get_string("model", "lenet5");
  cfg.width = p.get_number("width", 1.0);
  cfg.head_width = p.get_int("head_width", 0);
  HF_ASSIGN_OR_RETURN(cfg.insert_layers, insert_layers_of(p));
  std::string ds = p.get_string("dataset", "fashion-mnist");
  if (ds == "fashion-mnist") {
    cfg.data.kind = kernels::dataset_kind::fashion_mnist;
    cfg.data.path = p.get_string("data_dir", "/usr/share/datasets/fashion-mnist");
  } else if (ds == "criteo") {
    // A preprocess job's output_dir; relative to the topology file, as that
    // job's output_dir is, so a pair of job files can name the same folder.
    if (!p.contains("data_dir"))
      return make_error(errc::invalid_argument,
                        "[job] dataset = \"criteo\" needs data_dir: a preprocess job's output_dir");
    std::filesystem::path dir = p.get_string("data_dir", "");
    cfg.data.kind = kernels::dataset_kind::criteo;
    cfg.data.path = (dir.is_absolute() ? dir : c.file.parent_path() / dir).lexically_normal().string();
    cfg.data.test_fraction = p.get_number("test_fraction", 0.1);
    cfg.data.max_rows = p.get_int("max_rows", 0);
    cfg.data.table_rows = p.get_ints("table_rows");
  } else if (ds == "criteo-text") {
    // Raw Criteo text hashed on the fly (kernels/criteo_text.hpp); inputs
    // are paths made absolute by the validator (relative to the file).
    cfg.data.kind = kernels::dataset_kind::criteo_text;
    cfg.data.inputs = p.get_strings("inputs");
    cfg.data.hash_range = uint64_t(p.get_int("categorical.range", p.get_int("hash_range", int64_t{1} << 24)));
    cfg.data.max_field_bytes = std::size_t(p.get_int("max_field_bytes", 64));
    cfg.data.test_fraction = p.get_number("test_fraction", 0.1);
    cfg.data.max_rows = p.get_int("max_rows", 0);
    cfg.data.table_rows = p.get_ints("table_rows");
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
  cfg.dlrm.embedding_dim = p.get_int("embedding_dim", 16);
  if (p.contains("bottom_mlp")) cfg.dlrm.bottom_mlp = p.get_ints("bottom_mlp");
  if (p.contains("top_mlp")) cfg.dlrm.top_mlp = p.get_ints("top_mlp");
  cfg.epochs = static_cast<int>(p.get_int("epochs", 3));
  cfg.batch_size = p.get_int("batch_size", 64);
  cfg.optimizer = optimizer_config_of(c);
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
  if (p.contains("precision")) {
    kernels::math_mode m{};
    if (!kernels::parse_math_mode(p.get_string("precision", "tf32"), m))
      return make_error(errc::invalid_argument, "[job] precision must be f32, tf32, bf16 or f16");
    cfg.precision = m;
  }
  cfg.loss_scale_init = p.get_number("loss_scale", 65536.0);

  const auto* node = c.find_node(node_name);
  if (node == nullptr) return make_error(errc::not_found, "train: no node '" + node_name + "' in the topology");
  if (!node->devices.empty() && device >= node->devices.size())
    return make_error(errc::not_found, "train: node '" + node_name + "' has no device " + std::to_string(device));
  const auto& dev = node->devices.empty() ? topology::device_spec{} : node->devices[device];
  // cuda: the CUDA module; train_single says why when it cannot run there.
  cfg.where = dev.kind == topology::device_kind::cuda ? kernels::device::cuda(dev.index) : kernels::device::cpu();
  cfg.threads = dev.threads;
  return cfg;
}

namespace {

void write_epochs(json_writer& w, const kernels::train_report& r) {
  w.key("epochs").begin_array();
  for (auto& e : r.epochs) {
    w.begin_object().field("epoch", int64_t{e.epoch}).field("loss", e.loss);
    w.field("train_accuracy", e.train_accuracy);
    // Metrics not computed this epoch (or for this data) are -1: null.
    auto metric = [&](const char* name, double v) {
      w.key(name);
      if (v < 0)
        w.null();
      else
        w.value(v);
    };
    metric("test_accuracy", e.test_accuracy);
    metric("test_logloss", e.test_logloss);
    metric("test_auc", e.test_auc);
    w.field("samples_per_s", e.samples_per_s).field("train_seconds", e.train_seconds);
    w.field("lr", e.lr).field("samples", e.samples).end_object();
  }
  w.end_array();
  // The fine-grained history (kernels::train_history) for `hetflow plot`:
  // rows [seconds, epoch, step, loss, samples_per_s].
  w.key("history").begin_array();
  for (auto& h : r.history) {
    w.begin_array().value(h.seconds).value(int64_t{h.epoch}).value(h.step);
    w.value(h.loss).value(h.samples_per_s).end_array();
  }
  w.end_array();
}

using train_fn =
    std::function<expected<kernels::train_report>(const kernels::train_config&, const kernels::progress_callback&)>;

// Runs `train` with progress and per-epoch lines and reports the result (the
// report's metrics; `extra` appends members to them). On the trainer's thread.
void run_and_report(node_services& svc, const std::string& me, kernels::train_config c, const train_fn& train,
                    const std::function<void(json_writer&)>& extra = {}, bool verbose = true) {
  c.stop = &svc.stopping();
  // The training loop (kernels/trainer.cpp) records on this actor's track.
  kernels::trace::track_scope on_track(kernels::trace::track(me));
  kernels::waits::actor_scope as(me);
  if (verbose)
    log_info("training " + c.model + " for " + std::to_string(c.epochs) + " epochs, batch " +
           std::to_string(c.batch_size) + ", on " + c.where.to_string());
  auto last_print = clock_type::now() - std::chrono::seconds(10);
  auto t0 = clock_type::now();
  int last_epoch = 0, first_epoch = 0;
  auto on_progress = [&](const kernels::train_progress& p) {
    auto now = clock_type::now();
    bool new_epoch = p.epoch != last_epoch;
    last_epoch = p.epoch;
    {
      const metrics::labels l{{"actor", me}};
      metrics::set_gauge("hetflow_train_epoch", "Current epoch (1-based) of a training actor", l, p.epoch);
      metrics::set_gauge("hetflow_train_step", "Current step within the epoch", l, double(p.step));
      metrics::set_gauge("hetflow_train_steps_per_epoch", "Steps per epoch", l, double(p.steps_per_epoch));
      metrics::set_gauge("hetflow_train_samples_per_second", "Training throughput so far this epoch", l,
                         p.samples_per_s);
      metrics::set_gauge("hetflow_train_loss", "Mean training loss over the last progress window", l, p.loss);
      metrics::set_gauge("hetflow_train_accuracy", "Training accuracy over the last progress window", l,
                         p.accuracy);
    }
    if (!verbose || (!new_epoch && now - last_print < std::chrono::seconds(2))) return;
    last_print = now;
    // Epochs done overall and in this run (a resumed run starts later).
    if (first_epoch == 0) first_epoch = p.epoch;
    const double frac = static_cast<double>(p.step) / std::max<int64_t>(1, p.steps_per_epoch);
    double done = (p.epoch - 1) + frac, done_here = (p.epoch - first_epoch) + frac;
    double elapsed = std::chrono::duration<double>(now - t0).count();
    double eta = done_here > 0 ? elapsed / done_here * (c.epochs - done) : -1;
    char line[256];
    std::snprintf(line, sizeof line,
                  "epoch %d/%d step %lld/%lld | %.0f samples/s | loss %.4f | accuracy %.4f | ETA %s", p.epoch,
                  c.epochs, static_cast<long long>(p.step), static_cast<long long>(p.steps_per_epoch),
                  p.samples_per_s, p.loss, p.accuracy, format_eta(eta).c_str());
    log_info(line);
  };
  c.on_epoch = [&](const kernels::epoch_report& e) {
    {
      const metrics::labels l{{"actor", me}};
      metrics::set_gauge("hetflow_train_epochs_done", "Epochs a training actor finished", l, e.epoch);
      metrics::set_gauge("hetflow_train_epoch_loss", "Mean training loss of the last finished epoch", l, e.loss);
      if (e.test_accuracy >= 0)
        metrics::set_gauge("hetflow_train_test_accuracy", "Test accuracy after the last finished epoch", l,
                           e.test_accuracy);
    }
    if (!verbose) return;
    auto metric = [](double v) { return v < 0 ? std::string("-") : std::to_string(v).substr(0, 6); };
    // Click data (2 classes) adds logloss and AUC, the metrics that matter
    // there: accuracy mostly reflects the click rate.
    std::string binary;
    if (e.test_logloss >= 0 || e.test_auc >= 0)
      binary = ", test logloss " + metric(e.test_logloss) + ", test AUC " + metric(e.test_auc);
    char line[320];
    std::snprintf(line, sizeof line,
                  "epoch %d/%d done: loss %.4f, train accuracy %.4f, test accuracy %s%s, "
                  "%.0f samples/s (%.1f s)",
                  e.epoch, c.epochs, e.loss, e.train_accuracy, metric(e.test_accuracy).c_str(), binary.c_str(),
                  e.samples_per_s, e.train_seconds);
    log_info(line);
  };
  auto r = train(c, on_progress);
  if (!r) {
    svc.report_done(me, false, r.error().to_string(), {});
    return;
  }
  if (verbose && c.checkpoints && c.resume) {
    if (r->resumed_step > 0 && c.step_checkpoints)
      log_info("resumed at step " + std::to_string(r->resumed_step + 1) + " of epoch " +
               std::to_string(r->resumed_epochs + 1) + " from " + r->resumed_from +
               " (mid-epoch); trained the rest of that epoch" +
               (r->resumed_epochs + 2 <= c.epochs
                    ? " and epochs " + std::to_string(r->resumed_epochs + 2) + ".." + std::to_string(c.epochs)
                    : std::string()));
    else
      log_info(r->resumed_epochs > 0
                   ? "resumed after epoch " + std::to_string(r->resumed_epochs) + " from " +
                         c.checkpoints->describe(r->resumed_epochs) + "; trained epochs " +
                         std::to_string(r->resumed_epochs + 1) + ".." + std::to_string(c.epochs)
                   : std::string("--resume: no checkpoint (every replica's) to resume from; trained from the start"));
  }
  json_writer w;
  w.begin_object().field("model", r->model).field("device", r->where);
  if (c.checkpoints) w.field("resumed_epochs", int64_t{r->resumed_epochs}).field("resumed_step", r->resumed_step);
  if (c.step_checkpoints) w.field("step_checkpoints", r->step_checkpoints);
  w.field("threads", int64_t{r->threads}).field("parameters", r->parameters);
  w.field("precision", r->precision);
  if (r->precision == "f16") w.field("loss_scale", r->loss_scale).field("overflow_steps", r->overflow_steps);
  w.field("total_seconds", r->total_seconds);
  char checksum[20];
  std::snprintf(checksum, sizeof checksum, "%016llx", static_cast<unsigned long long>(r->weights_checksum));
  w.field("weights_checksum", std::string(checksum));
  write_epochs(w, *r);
  if (extra) extra(w);
  w.end_object();
  std::string summary = "trained " + r->model;
  if (!r->epochs.empty() && r->epochs.back().test_accuracy >= 0)
    summary += ", test accuracy " + std::to_string(r->epochs.back().test_accuracy).substr(0, 6);
  if (!r->epochs.empty() && r->epochs.back().test_auc >= 0)
    summary += ", test AUC " + std::to_string(r->epochs.back().test_auc).substr(0, 6);
  svc.report_done(me, true, summary, w.str());
}

// checkpoint_dir (strategies single and dp): epoch checkpoints of this
// actor (`<me>.ckpt-<epochs>` in the folder) and, with --resume (the job
// parameter "resume"), the newest one restored before training.
kernels::train_config with_checkpoints(kernels::train_config c, const topology::settings& p, const std::string& me,
                                       int rank, int replicas, bool streamed = false) {
  const std::string dir = p.get_string("checkpoint_dir", "");
  // `hetflow shell`'s checkpoint (control_board.hpp): asked once a step by
  // the training loop; answered here. Mid-epoch checkpoints go to
  // <dir>/<actor>.step.ckpt-<epochs done * steps + next step>.
  std::string refuse;
  if (dir.empty())
    refuse = me + ": the job has no checkpoint_dir";
  else if (streamed)
    refuse = me + ": input = \"stream\" checkpoints after every epoch only (the shards cannot replay half an epoch)";
  // The request's label is its id (the shell picks one per command).
  c.checkpoint_now = [me, refuse, seen = std::make_shared<int64_t>(0)]() -> int64_t {
    const auto taken = control::take_new_checkpoint_request(*seen);
    if (!taken) return 0;
    const auto& req = *taken;
    if (!refuse.empty()) {
      log_warn("shell: checkpoint refused: " + refuse);
      control::answer_checkpoint(me, req.generation, false, refuse);
      return 0;
    }
    if (req.label < 1 || req.label >= (int64_t{1} << 24)) {
      control::answer_checkpoint(me, req.generation, false, me + ": request id " + std::to_string(req.label) +
                                                                 " out of range (an older shell?)");
      return 0;
    }
    log_warn("shell: " + me + " takes a checkpoint after its current step (request " + std::to_string(req.label) + ")");
    control::answer_checkpoint(me, req.generation, true, me + ": checkpoint after its current step");
    return req.label;
  };
  if (dir.empty()) return c;
  auto store = ps::make_directory_store(dir);
  c.checkpoints = ps::make_epoch_checkpoints(store, me, rank, replicas);
  if (!streamed) {
    c.step_checkpoints = ps::make_epoch_checkpoints(store, me + ".step", rank, replicas);
    c.step_checkpoint_every = p.get_int("checkpoint_every", 0);  // steps of an epoch
  }
  c.resume = p.get_bool("resume", false);
  return c;
}

// input = "memory": the whole run in train_single.
caf::behavior trainer(caf::event_based_actor* self, actor_env env) {
  auto svc = env.services;
  std::string me = env.spec.name;
  auto cfg = train_config_of(env.cluster, env.spec.node);
  const topology::settings env_params = env.cluster.job.params;
  self->set_default_handler(caf::skip);
  return {
    [self, svc, me, cfg, env_params](start_atom) {
      if (!cfg)
        svc->report_done(me, false, cfg.error().message(), {});
      else
        run_and_report(*svc, me, with_checkpoints(*cfg, env_params, me, 0, 1),
                       [](const kernels::train_config& c, const kernels::progress_callback& p) {
                         return kernels::train_single(c, p);
                       });
      self->quit();
    },
  };
}

// input = "stream": batches from the stream shards. The test set (and the
// training set's statistics, for normalising it) are loaded here; the shards
// load the training set on their own nodes.
void stream_trainer(caf::blocking_actor* self, actor_env env) {
  auto svc = env.services;
  const std::string me = env.spec.name;
  // Messages before start_atom (early batches) stay in the mailbox.
  if (!await_start(self, *svc)) return;
  auto fail = [&](const std::string& why) { svc->report_done(me, false, why, {}); };
  auto cfg = train_config_of(env.cluster, env.spec.node);
  if (!cfg) return fail(cfg.error().message());
  auto opts = stream_options_of(env.cluster);
  if (!opts) return fail(opts.error().message());
  stream_stats stats;
  run_and_report(
      *svc, me, with_checkpoints(*cfg, env.cluster.job.params, me, 0, 1, /*streamed=*/true),
      [&](const kernels::train_config& c, const kernels::progress_callback& p) -> expected<kernels::train_report> {
        HF_ASSIGN_OR_RETURN(stream_trainer_data data, load_stream_trainer_data(c));
        stats.input_json = data.input_json;
        stats.input_key = data.input_key;
        HF_ASSIGN_OR_RETURN(kernels::epoch_plan plan, kernels::make_epoch_plan(data.train_rows, c.batch_size,
                                                                               c.drop_last, c.max_steps_per_epoch));
        log_info("streaming from " + std::to_string(opts->shards()) + " shard(s), prefetch " +
                 std::to_string(opts->prefetch) + " batches each" +
                 (opts->augment.enabled() ? ", augmented (crop padding " +
                                                std::to_string(opts->augment.crop_padding) +
                                                (opts->augment.flip ? ", flip)" : ")")
                                          : ""));
        auto source = make_stream_source(self, svc, me, *opts, plan, data.sample, data.classes, c.seed, &stats);
        return kernels::train_from_source(c, *source, data.test, p);
      },
      [&](json_writer& w) {
        std::vector<int> shards(std::size_t(opts->shards()));
        for (int k = 0; k < opts->shards(); ++k) shards[std::size_t(k)] = k;
        write_stream_report(w, *opts, shards, stats, cfg->epochs);
      });
}

std::string replica_name(std::size_t r) { return "replica" + std::to_string(r); }
std::string dp_member_name(std::size_t r) { return "ring" + std::to_string(r); }

// strategy = "dp": the replica group of one dp_replica, summing through its
// node's ring member. The member completes every request, also when the job
// stops, so waiting on the future cannot hang. With failover ([job]
// dp_failover) the member drops replicas lost with their nodes; regroup()
// then takes the ring's new generation and members (replica i's member is
// ring<i>), and this replica's rank among those left.
class ring_group final : public kernels::replica_group {
public:
  ring_group(caf::actor member, int rank, int size, bool failover, std::string me)
      : member_(std::move(member)), me_(std::move(me)), index_(rank), rank_(rank), size_(size), failover_(failover) {
    for (int i = 0; i < size; ++i) replicas_.push_back(i);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::future<status> start_sum(std::span<const std::span<float>> tensors) override {
    std::vector<ring::ring_tensor> v;
    v.reserve(tensors.size());
    for (auto t : tensors) v.push_back(ring::ring_tensor{ring::ring_dtype::f32, std::as_writable_bytes(t)});
    return ring::all_reduce(member_, std::move(v), ring::reduce_op::sum,
                            failover_ ? generation_ : ring::any_generation);
  }
  bool can_regroup() const override { return failover_; }
  expected<bool> regroup() override {
    if (!failover_) return false;
    HF_ASSIGN_OR_RETURN(ring::ring_view view, ring::current_view(member_).get());
    if (view.generation == generation_) return false;
    std::vector<int> now, kept;
    std::string gone;
    for (std::size_t k = 0; k < replicas_.size(); ++k) {
      const std::string m = dp_member_name(std::size_t(replicas_[k]));
      if (std::find(view.members.begin(), view.members.end(), m) != view.members.end()) {
        now.push_back(replicas_[k]);
        kept.push_back(int(k));
      } else {
        gone += (gone.empty() ? "" : ", ") + replica_name(std::size_t(replicas_[k]));
      }
    }
    auto me = std::find(now.begin(), now.end(), index_);
    if (me == now.end())
      return make_error(errc::internal, "the ring re-formed without this replica's own member");
    generation_ = view.generation;
    replicas_ = std::move(now);
    kept_ = std::move(kept);
    rank_ = int(me - replicas_.begin());
    size_ = int(replicas_.size());
    log_warn(me_ + ": lost " + (gone.empty() ? std::string("no replica") : gone) + "; going on as replica " +
             std::to_string(rank_) + " of " + std::to_string(size_) + " (ring generation " +
             std::to_string(generation_) + ")");
    return true;
  }
  std::vector<int> kept() const override { return kept_; }

private:
  caf::actor member_;
  std::string me_;
  int index_, rank_, size_;
  bool failover_;
  uint32_t generation_ = 0;
  std::vector<int> replicas_;  // the replicas in the group, by index
  std::vector<int> kept_;
};

// One data-parallel replica: trains on its node's device `device` with the
// ring member `member`; rank 0 logs progress and writes the weights.
// HETFLOW_BENCH_STEP_COST=S (seconds, benchmarks and tests only): this
// node's replicas take S seconds more for each step with rows, as a device
// with a fixed per-step cost would (train_config::emulate_step_seconds).
double bench_step_cost() {
  const char* v = std::getenv("HETFLOW_BENCH_STEP_COST");
  if (v == nullptr || *v == '\0') return 0.0;
  char* end = nullptr;
  const double d = std::strtod(v, &end);
  return end != v && *end == '\0' && std::isfinite(d) && d > 0 && d <= 60 ? d : 0.0;
}

caf::behavior dp_replica(caf::event_based_actor* self, actor_env env) {
  auto svc = env.services;
  const std::string me = env.spec.name;
  const auto& args = env.spec.args;
  const int rank = int(args.get_int("rank", 0));
  const int replicas = int(args.get_int("replicas", 1));
  const std::string member_name = args.get_string("member");
  auto cfg = train_config_of(env.cluster, env.spec.node, std::size_t(args.get_int("device", 0)));
  const std::string split_rule = env.cluster.job.params.get_string("dp_split", "measured");
  const bool measured = split_rule != "equal";
  const bool timed = split_rule == "measured";  // "speed": per-row speed alone, no fixed term
  const int64_t bucket_bytes = env.cluster.job.params.get_int("bucket_bytes", int64_t{16} << 20);
  const int64_t resplit_every = env.cluster.job.params.get_int("dp_resplit_every", 100);
  const topology::settings env_params = env.cluster.job.params;
  // expand_dp: dp_failover and some replica's node may be lost.
  const bool failover = args.get_bool("failover", false);
  self->set_default_handler(caf::skip);
  return {
    [self, svc, me, rank, replicas, member_name, cfg, measured, timed, bucket_bytes, resplit_every, env_params,
     failover](start_atom) {
      caf::actor member = svc->find_actor(member_name);
      if (!cfg) {
        svc->report_done(me, false, cfg.error().message(), {});
      } else if (!member) {
        svc->report_done(me, false, "ring member '" + member_name + "' is not running", {});
      } else {
        ring_group group(member, rank, replicas, failover, me);
        kernels::train_config c = with_checkpoints(*cfg, env_params, me, rank, replicas);
        c.group = &group;
        c.measured_split = measured;
        c.split = [](int64_t rows, std::span<const double> speeds) { return topology::split_rows(rows, speeds); };
        if (timed)
          c.split_timed = [](int64_t rows, std::span<const double> fixed_s, std::span<const double> per_row_s) {
            return topology::split_rows_timed(rows, fixed_s, per_row_s);
          };
        c.emulate_step_seconds = bench_step_cost();
        c.bucket_bytes = bucket_bytes;
        c.resplit_every = resplit_every;
        c.failover_snapshot_every = env_params.get_int("dp_snapshot_every", 100);
        if (rank != 0) c.save_weights.clear();
        kernels::train_report last;
        if (rank == 0)
          log_info("data parallel: " + std::to_string(replicas) + " replicas, batch " +
                   std::to_string(c.batch_size) + " split " +
                   (timed ? "by measured step cost" : measured ? "by measured speed" : "equally"));
        run_and_report(
            *svc, me, c,
            [&](const kernels::train_config& tc, const kernels::progress_callback& p) {
              auto r = kernels::train_single(tc, p);
              if (r) last = *r;
              return r;
            },
            [&](json_writer& w) {
              w.field("strategy", "dp").field("rank", int64_t{rank}).field("replicas", int64_t{replicas});
              w.field("allreduce_seconds", last.allreduce_seconds).field("resplits", last.resplits);
              w.field("rollbacks", int64_t{last.rollbacks}).field("replicas_at_end", int64_t{last.replicas_at_end});
              w.key("rolled_back_to").begin_array();
              for (auto [e, st] : last.rolled_back_to)
                w.begin_object().field("epoch", int64_t{e}).field("step", st).end_object();
              w.end_array();
              w.key("splits").begin_array();
              for (std::size_t e = 0; e < last.splits.size(); ++e) {
                w.begin_object().field("epoch", int64_t(e + 1)).key("rows").begin_array();
                for (int64_t v : last.splits[e]) w.value(v);
                w.end_array().key("speeds").begin_array();
                for (double v : last.speeds[e]) w.value(v);
                w.end_array().key("fixed_ms").begin_array();
                if (e < last.fixed_seconds.size())
                  for (double v : last.fixed_seconds[e]) w.value(v * 1e3);
                w.end_array().key("row_ms").begin_array();
                if (e < last.row_seconds.size())
                  for (double v : last.row_seconds[e]) w.value(v * 1e3);
                w.end_array().end_object();
              }
              w.end_array();
            },
            /*verbose=*/rank == 0);
        ring::close(member);
      }
      self->quit();
    },
  };
}

// The model/dataset pairing and the criteo keys, checked at validate time
// (train_single checks the same again; this names the [job] keys).
status check_dataset_keys(const topology::cluster& c) {
  const auto& p = c.job.params;
  const std::string model = p.get_string("model", "lenet5"), ds = p.get_string("dataset", "fashion-mnist");
  const bool clicks = ds == "criteo" || ds == "criteo-text";
  if (model == "dlrm" && !clicks)
    return make_error(errc::invalid_argument, "[job] model = \"dlrm\" trains on click logs: it needs "
                                              "dataset = \"criteo\" with data_dir = a preprocess job's output_dir, "
                                              "or dataset = \"criteo-text\" with inputs");
  if (clicks && model != "dlrm")
    return make_error(errc::invalid_argument, "[job] dataset = \"" + ds + "\" (click logs) trains model = \"dlrm\" "
                                              "only, not \"" + model + "\"");
  if (!clicks) {
    if (p.contains("inputs") || p.contains("categorical.range"))
      return make_error(errc::invalid_argument, "[job] inputs and categorical.range belong to dataset = "
                                                "\"criteo-text\"");
    return {};
  }
  if (ds == "criteo-text") {
    if (p.get_strings("inputs").empty())
      return make_error(errc::invalid_argument, "[job] dataset = \"criteo-text\" needs inputs = [\"day.tsv\", ...]: "
                                                "Criteo text files, relative to this file");
    if (p.get_string("categorical.mode", "hash") != "hash")
      return make_error(errc::unsupported, "[job] dataset = \"criteo-text\" hashes categorical strings "
                                           "(categorical = { mode = \"hash\", range = N }); vocab mode needs "
                                           "two passes: run a preprocess job and train on dataset = \"criteo\"");
    const int64_t range = p.get_int("categorical.range", p.get_int("hash_range", int64_t{1} << 24));
    if (range < 1 || range > (int64_t{1} << 24))
      return make_error(errc::invalid_argument, "[job] categorical.range must be in [1, 16777216] for "
                                                "dataset = \"criteo-text\" (ids travel as float32; every table has "
                                                "range rows), got " + std::to_string(range));
    if (!p.get_ints("table_rows").empty())
      return make_error(errc::invalid_argument, "[job] dataset = \"criteo-text\": every table has "
                                                "categorical.range rows; remove table_rows");
    if (p.contains("data_dir"))
      return make_error(errc::invalid_argument, "[job] dataset = \"criteo-text\" reads inputs, not data_dir");
    if (p.get_string("input", "memory") == "stream" && p.get_bool("augment", false))
      return make_error(errc::invalid_argument, "[job] augment applies to images, not to dataset = \"criteo-text\"");
    // ps streams: each worker's shards parse just its rows. In memory every
    // ps worker would parse the whole text, so that stays refused.
    const auto s = p.get_string("strategy", "single");
    const bool stream = p.get_string("input", "memory") == "stream";
    if (s == "ps" && !stream)
      return make_error(errc::unsupported, "[job] dataset = \"criteo-text\" with input = \"memory\" trains with "
                                           "strategy = \"single\" only (every ps worker would parse the whole "
                                           "text); with strategy = \"ps\" set input = \"stream\", or preprocess "
                                           "the text and use dataset = \"criteo\"");
    if (s != "single" && s != "ps")
      return make_error(errc::unsupported, "[job] dataset = \"criteo-text\" trains with strategy = \"single\" only "
                                           "(or \"ps\" with input = \"stream\") for now, not \"" + s +
                                           "\"; preprocess the text and use dataset = \"criteo\"");
  } else if (!p.contains("data_dir"))
    return make_error(errc::invalid_argument, "[job] dataset = \"criteo\" needs data_dir: a preprocess job's "
                                              "output_dir");
  const double f = p.get_number("test_fraction", 0.1);
  if (!(f > 0.0 && f < 1.0))
    return make_error(errc::invalid_argument, "[job] test_fraction must be in (0, 1), got " + std::to_string(f));
  const auto tables = p.get_ints("table_rows");
  if (!tables.empty() && tables.size() != 1 && tables.size() != 26)
    return make_error(errc::invalid_argument, "[job] table_rows needs 1 value (every table) or 26, got " +
                                                  std::to_string(tables.size()));
  for (int64_t r : tables)
    if (r < 1 || r > (int64_t{1} << 24))
      return make_error(errc::invalid_argument, "[job] table_rows must be in [1, 16777216] (ids travel as float32)");
  for (const char* k : {"bottom_mlp", "top_mlp"})
    for (int64_t w : p.get_ints(k))
      if (w < 1) return make_error(errc::invalid_argument, std::string("[job] ") + k + " widths must be >= 1");
  if (ds == "criteo" && p.get_string("input", "memory") == "stream" && p.get_bool("augment", false))
    return make_error(errc::invalid_argument, "[job] augment applies to images, not to dataset = \"criteo\"");
  return {};
}

// The actors of a dp train job: replica r and ring member r on replica r's
// node, the ring in the planner's order (grouped by host).
expected<std::vector<topology::actor_spec>> expand_dp(const topology::cluster& c) {
  const auto& p = c.job.params;
  if (p.get_string("input", "memory") != "memory")
    return make_error(errc::unsupported, "[job] strategy = \"dp\" reads input = \"memory\" only for now "
                                         "(streamed input feeds one trainer, ps workers or hetpipe's stage 0s)");
  // The ring sums dense gradients; dlrm's embedding tables get sparse ones
  // (rows of the batch only), which the replicas would not combine.
  if (p.get_string("model", "lenet5") == "dlrm")
    return make_error(errc::unsupported, "[job] strategy = \"dp\" cannot train dlrm yet: its embedding tables get "
                                         "sparse gradients, which the ring does not sum; use strategy = \"single\" "
                                         "or \"ps\"");
  auto nodes = p.get_strings("dp_nodes");
  HF_ASSIGN_OR_RETURN(auto replicas, topology::dp_replicas(c, nodes));
  std::vector<std::string> hosts;
  // cpu and cuda replicas mix: a cuda replica copies its gradients to the
  // host for the ring and steps a host copy of the model (kernels/trainer).
  for (const auto& r : replicas) hosts.push_back(r.host);
  std::vector<std::string> order;
  for (std::size_t i : topology::ring_order(hosts)) order.push_back(dp_member_name(i));
  std::vector<topology::actor_spec> v;
  for (std::size_t i = 0; i < replicas.size(); ++i) {
    topology::actor_spec m;
    m.name = dp_member_name(i);
    m.type = "ring_member";
    m.node = replicas[i].node;
    m.args.set("ring", order);
    for (auto key : {"chunk_bytes", "bucket_bytes"})
      if (p.contains(key)) m.args.set(key, p.get_int(key));
    m.args.set("timeout", p.get_number("ring_timeout", 2.0));
    m.args.set("hierarchical", p.get_string("hierarchical", "auto"));
    m.args.set("shm", p.get_string("shm", "auto"));
    v.push_back(std::move(m));
    topology::actor_spec a;
    a.name = replica_name(i);
    a.type = "dp_replica";
    a.node = replicas[i].node;
    a.args.set("rank", int64_t(i));
    a.args.set("replicas", int64_t(replicas.size()));
    a.args.set("member", dp_member_name(i));
    a.args.set("device", int64_t(replicas[i].device));
    v.push_back(std::move(a));
  }
  // Failover only when some node may be lost (registry.hpp's
  // expendable_nodes, which reads dp_failover): else the ring has nothing
  // to drop and the replicas' snapshots would cost for nothing.
  const bool failover = !expendable_nodes(c, v).empty();
  for (auto& a : v) a.args.set("failover", failover);
  return v;
}

}  // namespace

void add_train(registry& reg) {
  using topology::key_spec;
  using topology::key_type;
  topology::type_spec job{"train", "train a model (strategy \"single\": one device, whole model; dp, ps, ralp, hetpipe; input from memory, or with single, ps and hetpipe streamed from pre-processing shards)", {}};
  auto key = [&](std::string name, key_type t, topology::setting_value def, std::string help,
                 std::optional<double> lo = {}, std::optional<double> hi = {},
                 std::vector<std::string> one_of = {}) {
    job.keys.push_back(key_spec{std::move(name), t, false, std::move(def), std::move(help), lo, hi,
                                std::move(one_of)});
  };
  key("strategy", key_type::string, std::string("single"),
      "single: one device trains the whole model; dp: data parallel, one replica per device of dp_nodes; ps: parameter servers (ps_*, consistency keys); ralp: layers after ralp_cut on the PS node (ralp_* keys); hetpipe: virtual workers of pipeline stages, WSP (cpu devices); auto: plan only", {}, {},
      {"single", "dp", "ps", "ralp", "hetpipe", "auto"});
  // HetPipe (the planner's keys; the runtime is actors/hetpipe/). D of Wave
  // Synchronous Parallel is the ps `staleness` key.
  job.keys.push_back(key_spec{"profile_file", key_type::path, false, std::nullopt,
                              "hetpipe, auto: JSON unit profiles per device kind (README); devices name their kind "
                              "with `profile`"});
  key("allocation", key_type::string, std::string("ed"),
      "hetpipe: group devices into virtual workers: np (one node each), ed (equal share of every kind), hd (fast "
      "kinds with slow kinds)", {}, {}, {"np", "ed", "hd"});
  key("virtual_workers", key_type::integer, int64_t{0}, "hetpipe: number of virtual workers (0: from allocation)",
      0.0, 4096.0);
  key("nm", key_type::integer, int64_t{0},
      "hetpipe: minibatches in flight per virtual worker (a wave); 0: auto, the best predicted that fits", 0.0, 1024.0);
  key("max_nm", key_type::integer, int64_t{16}, "hetpipe: the largest Nm that nm = 0 tries", 1.0, 1024.0);
  key("hetpipe_waves", key_type::string, std::string("overlap"),
      "hetpipe: overlap (HetPipe's: a VW starts wave w + 1 while wave w drains; a pull of wave w needs every VW's "
      "waves <= w - 2 - D; cpu stages) or drain (the pipeline drains at every wave boundary; a pull of wave w needs "
      "waves <= w - 1 - D)", {}, {}, {"overlap", "drain"});
  key("hetpipe_drill_jitter", key_type::duration, 0.0,
      "tests only: each hetpipe stage sleeps a random [0, this) before every forward (seeded per stage)", 0.0, 10.0);
  key("ps_placement", key_type::string, std::string("auto"),
      "hetpipe: PS shards spread over every node by bytes, or local (stage k's weights on stage k's node); auto: "
      "local with one virtual worker, else spread", {}, {}, {"auto", "spread", "local"});
  key("dp_nodes", key_type::string_list, std::vector<std::string>{},
      "dp: nodes whose devices hold replicas (empty: every node)");
  key("dp_split", key_type::string, std::string("measured"),
      "dp: split each batch by each replica's measured step cost, fixed + per row (re-measured every epoch and "
      "every dp_resplit_every steps; a replica whose fixed cost alone outlasts the others' steps gets no rows), "
      "by measured per-row speed alone (speed), or equally", {}, {}, {"measured", "speed", "equal"});
  key("dp_resplit_every", key_type::integer, int64_t{100},
      "dp, measured split: re-measure the speeds and re-split every this many steps inside an epoch (0: only "
      "between epochs)", 0.0, 1e9);
  key("dp_failover", key_type::boolean, true,
      "dp: when a node that holds only replicas (not replica 0's) goes down, the others go on: they go back to "
      "their latest snapshot (dp_snapshot_every) and train on split among themselves (false: the loss stops the "
      "job)");
  key("dp_snapshot_every", key_type::integer, int64_t{100},
      "dp, dp_failover: besides each epoch's start, keep the state every this many steps (a copy of the weights and "
      "optimizer state in memory); losing a replica costs the steps since the latest (0: epoch starts only)",
      0.0, 1e9);
  key("chunk_bytes", key_type::size, int64_t{1} << 20, "dp: ring chunk size", 1024.0);
  key("bucket_bytes", key_type::size, int64_t{16} << 20,
      "dp: gradient bucket size; each bucket's sum starts as soon as backward has produced it", 1024.0);
  key("hierarchical", key_type::string, std::string("auto"),
      "dp: replicas sharing a host sum into one leader, the leaders run the ring (auto: when replicas span "
      "hosts and some share one; off: one flat ring)", {}, {}, {"auto", "off"});
  key("shm", key_type::string, std::string("auto"),
      "dp: when every replica is on one host, their ring sums through one shared-memory segment (auto; off: "
      "chunk messages through the data plane)", {}, {}, {"auto", "off"});
  key("ring_timeout", key_type::duration, 2.0,
      "dp: a collective with no progress for this long names the stalled replica and stops the job", 0.1, 3600.0);
  key("model", key_type::string, std::string("lenet5"), "model zoo name", {}, {},
      {"mlp", "lenet5", "vgg11", "vgg16", "vgg19", "resnet18", "resnet50", "resnet152", "dlrm"});
  key("width", key_type::number, 1.0, "width multiplier of image models", 0.01, 16.0);
  key("insert_layers", key_type::string_list, std::vector<std::string>{},
      "plugins' layers inserted into the model, each \"AFTER:TYPE\": layer TYPE (a plugin's add_layer) right "
      "after the model's top-level unit AFTER, named AFTER_TYPE; cpu devices only");
  key("head_width", key_type::integer, int64_t{0},
      "vgg*: hidden width of the two fully connected layers of the head (0: 4096 for inputs of 64 px and more, "
      "else one layer of 512; not scaled by width)",
      0.0, 65536.0);
  key("dataset", key_type::string, std::string("fashion-mnist"),
      "training data; criteo: a preprocess job's output; criteo-text: raw Criteo text hashed on the fly "
      "(inputs, categorical; strategy single, or ps with input = \"stream\"); both for model dlrm only, and dlrm "
      "needs one", {}, {},
      {"fashion-mnist", "synthetic", "criteo", "criteo-text"});
  // No default in the catalog (the defaults are filled in): criteo must
  // tell a missing data_dir from the Fashion-MNIST folder.
  job.keys.push_back(key_spec{"data_dir", key_type::string, false, std::nullopt,
                              "fashion-mnist: folder of the IDX files (/usr/share/datasets/fashion-mnist); criteo "
                              "(required): the preprocess job's output_dir, relative to this file"});
  key("test_fraction", key_type::number, 0.1,
      "criteo: the last fraction of the rows (input order) is the test set", 0.0, 1.0);
  key("max_rows", key_type::integer, int64_t{0}, "criteo: read only the first max_rows records (0: all)", 0.0);
  key("table_rows", key_type::size_list, std::vector<int64_t>{},
      "criteo: rows per embedding table, 1 value (every table) or 26 (empty: vocab lines + 1, or in hash mode "
      "the largest id + 1 from a scan of the records)");
  job.keys.push_back(key_spec{"inputs", key_type::path_list, false, std::nullopt,
                              "criteo-text (required): Criteo text files, in order, relative to this file; the "
                              "same paths on every node"});
  {
    // The preprocess job's table, hash mode only.
    key_spec cat{"categorical", key_type::table, false, std::nullopt,
                 "criteo-text: { mode = \"hash\", range = N }: ids are FNV-1a 64 mod N (as a preprocess job in hash "
                 "mode writes them); every embedding table has N rows",
                 {}, {}, {}};
    cat.shorthand = "mode";
    cat.fields.push_back(key_spec{"mode", key_type::string, false, std::string("hash"), "hash (vocab: preprocess "
                                  "first)", {}, {}, {"hash", "vocab"}});
    cat.fields.push_back(key_spec{"range", key_type::integer, false, std::nullopt,
                                  "hash: ids in [0, range) (default 2^24)", 1.0, 16777216.0, {}});
    job.keys.push_back(std::move(cat));
  }
  key("max_field_bytes", key_type::integer, int64_t{64},
      "criteo-text: longer fields make a line malformed (as preprocess's key)", 1.0,
      double(kernels::preprocess::max_chunk_string_bytes));
  key("embedding_dim", key_type::integer, int64_t{16}, "dlrm: embedding width (also the bottom MLP's output)",
      1.0, 4096.0);
  key("bottom_mlp", key_type::size_list, std::vector<int64_t>{512, 256, 64},
      "dlrm: hidden widths of the bottom MLP over the 13 dense features (a last layer of embedding_dim follows)");
  key("top_mlp", key_type::size_list, std::vector<int64_t>{512, 256},
      "dlrm: hidden widths of the top MLP over the interactions (a last layer of 2 classes follows)");
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
  key("precision", key_type::string, std::string("tf32"),
      "cuda devices (strategy single): how convolutions and matmuls compute, tensors staying f32 in memory: f32 "
      "(strict), tf32 (TF32 convolutions, f32 matmuls: PyTorch's defaults), bf16 or f16 (on 16-bit copies of "
      "their inputs, f32 accumulation; f16 with dynamic loss scaling); cpu devices compute f32 and refuse bf16 "
      "and f16", {}, {}, {"f32", "tf32", "bf16", "f16"});
  key("loss_scale", key_type::number, 65536.0,
      "precision f16: the first loss scale (halved on overflow, doubled after 2000 clean steps)", 1.0, 16777216.0);
  key("eval_each_epoch", key_type::boolean, true, "evaluate on the test set after every epoch");
  key("max_steps_per_epoch", key_type::integer, int64_t{0}, "cut epochs short (0: full epochs)", 0.0);
  key("save_weights", key_type::string, std::string(""), "write the trained weights to this file");
  key("input", key_type::string, std::string("memory"),
      "memory: the trainer's node (ps: each worker's, hetpipe: each VW's stage 0's) loads the data; stream "
      "(strategy single, ps or hetpipe): pre-processing shard actors send batches to the trainer, or each to one "
      "ps worker or one VW's stage 0", {}, {},
      {"memory", "stream"});
  key("preprocess_shards", key_type::integer, int64_t{0},
      "stream: number of shard actors (0: one per preprocess_nodes entry; ps: one per worker); ps: shard k feeds "
      "worker k mod workers, so at least one per worker (hetpipe: one per virtual worker)", 0.0, 4096.0);
  key("preprocess_nodes", key_type::string_list, std::vector<std::string>{},
      "stream: nodes the shards run on, round robin (empty: every node; ps: shard k on worker k mod workers' node)");
  key("prefetch", key_type::integer, int64_t{4}, "stream: credits, batches in flight per shard", 1.0, 1024.0);
  key("preprocess_parallelism", key_type::integer, int64_t{0},
      "stream: threads a shard builds each batch with; 0 = the cores free on its node (probed again every 0.5 s)",
      0.0, 4096.0);
  key("augment", key_type::boolean, false, "stream: random crop (zero padding) and horizontal flip");
  key("crop_padding", key_type::integer, int64_t{2}, "stream, augment: zero padding before the random crop", 0.0,
      64.0);
  key("flip", key_type::boolean, true, "stream, augment: random horizontal flip");
  key("transforms", key_type::string_list, std::vector<std::string>{},
      "stream, images: per-sample transforms that plugins add, applied in this order after crop/flip and "
      "normalisation; a transform's own keys are [job] NAME = { key = ... }");
  key("stream_timeout", key_type::duration, 60.0, "stream: the longest wait for one batch", 0.1, 86400.0);
  key("stream_failover", key_type::boolean, true,
      "stream: when a node that runs only stream shards goes down, the job goes on: another shard of the same "
      "consumer builds the lost shard's steps (false: the loss stops the job)");
  key("stream_fault", key_type::string, std::string(""),
      "tests only: make shard 0 break exactly-once (duplicate or drop a row)", {}, {}, {"", "duplicate", "drop"});
  ps_job::add_train_keys(job);  // strategy "ps" (actors/ps/)
  ralp_job::add_train_keys(job);  // strategy "ralp" (actors/ralp/)
  (void)reg.add_job_kind(
      job,
      [reg = &reg](const topology::cluster& c) -> expected<std::vector<topology::actor_spec>> {
        const bool stream = c.job.params.get_string("input", "memory") == "stream";
        HF_RETURN_IF_ERROR(check_dataset_keys(c));
        if (!c.job.params.get_strings("insert_layers").empty())  // unknown layers or units: at validate time
          HF_RETURN_IF_ERROR(train_model_spec(c).error());
        if (!c.job.params.get_strings("transforms").empty()) {
          const std::string ds = c.job.params.get_string("dataset", "fashion-mnist");
          if (!stream)
            return make_error(errc::invalid_argument, "[job] transforms run in the stream shards: set input = "
                                                      "\"stream\" (strategy single, ps or hetpipe)");
          if (ds == "criteo" || ds == "criteo-text")
            return make_error(errc::invalid_argument, "[job] transforms apply to images, not to dataset = \"" + ds +
                                                          "\"");
          // Unknown names and keys a transform refuses: at validate time.
          HF_RETURN_IF_ERROR(reg->make_transforms(c.job.params).error());
        }
        {
          const std::string s = c.job.params.get_string("strategy", "single");
          const int64_t every = c.job.params.get_int("checkpoint_every", 0);
          if (!c.job.params.get_string("checkpoint_dir", "").empty() && s == "ralp" && every <= 0)
            return make_error(errc::invalid_argument, "[job] checkpoint_dir: strategy = \"ralp\" checkpoints every "
                                                      "checkpoint_every clocks: set checkpoint_every (> 0)");
          // (dp reads input = "memory" only: expand_dp says so.)
          if (every > 0 && s == "single" && stream)
            return make_error(errc::invalid_argument,
                              "[job] checkpoint_every: strategy = \"single\" with input = \"stream\" checkpoints "
                              "after every epoch only (the shards cannot replay half an epoch); leave checkpoint_every "
                              "out, or use input = \"memory\"");
          if (every > 0 && s == "auto")  // the strategy key allows nothing else without a clock or step
            return make_error(errc::invalid_argument,
                              "[job] checkpoint_every counts ps and ralp clocks, hetpipe waves and single/dp steps; "
                              "strategy = \"auto\" picks one of them at run time: name the strategy to set it");
          if (every > 0 && c.job.params.get_string("checkpoint_dir", "").empty())
            return make_error(errc::invalid_argument, "[job] checkpoint_every needs checkpoint_dir");
          const std::string prec = c.job.params.get_string("precision", "tf32");
          if ((prec == "bf16" || prec == "f16") && s != "single")
            return make_error(errc::unsupported, "[job] precision = \"" + prec + "\" applies to strategy = \"single\" "
                                                 "only for now; strategy = \"" + s + "\" computes f32 (cuda "
                                                 "dp replicas: tf32 by default, or \"f32\")");
        }
        if (c.job.params.get_string("strategy", "single") == "ps") return ps_job::expand(c);
        if (c.job.params.get_string("strategy", "single") == "ralp") return ralp_job::expand(c);
        if (c.job.params.get_string("strategy", "single") == "hetpipe") return hp_job::expand(c);
        if (c.job.params.get_string("strategy", "single") == "dp") {
          if (!c.actors.empty())
            return make_error(errc::invalid_argument,
                              "[job] strategy = \"dp\" places its own actors (replica*, ring*); "
                              "remove the [[actors]] tables");
          return expand_dp(c);
        }
        if (!c.actors.empty()) {
          if (stream)
            return make_error(errc::invalid_argument,
                              "[job] input = \"stream\" places its own actors (trainer, stream_shard_*); "
                              "remove the [[actors]] tables or use input = \"memory\"");
          return std::vector<topology::actor_spec>{};
        }
        // The trainer runs on the first node's first device: bf16 and f16
        // need it to be a cuda device (train_single checks again for
        // [[actors]] placements).
        if (const std::string prec = c.job.params.get_string("precision", "tf32"); prec == "bf16" || prec == "f16") {
          const auto& devs = c.nodes[0].devices;
          if (devs.empty() || devs[0].kind != topology::device_kind::cuda)
            return make_error(errc::invalid_argument,
                              "[job] precision = \"" + prec + "\" needs a cuda device, but the trainer's device (node '" +
                                  c.nodes[0].name + "', first device) is a cpu device, which computes f32; use "
                                  "precision = \"tf32\" or list a cuda device first");
        }
        std::vector<topology::actor_spec> v(1);
        v[0].name = v[0].type = "trainer";
        v[0].node = c.nodes[0].name;
        if (stream) {
          HF_ASSIGN_OR_RETURN(stream_options o, stream_options_of(c));
          add_stream_shard_actors(v, o);
        }
        return v;
      },
      [](const std::vector<actor_result>& results) -> std::string {
        // Lift the trainer's (dp: replica 0's) metrics ("model", "epochs", ...)
        // to the report's top level; dp adds whether every replica ended with
        // the same weights.
        std::string lifted, first_checksum;
        bool identical = true;
        int replicas = 0, lost = 0;
        for (auto& r : results) {
          if ((r.name == "trainer" || r.name == "replica0" || r.name == "psworker0" ||
               r.name == "ralpworker0" || r.name == hp_job::head_name) && r.metrics_json.size() > 2)
            lifted = r.metrics_json.substr(1, r.metrics_json.size() - 2);
          if (r.name.rfind("replica", 0) != 0) continue;
          if (!r.ok && r.summary.rfind("lost with node", 0) == 0) {  // dp failover: the others went on
            ++lost;
            continue;
          }
          ++replicas;
          auto pos = r.metrics_json.find("\"weights_checksum\":\"");
          std::string sum = pos == std::string::npos ? std::string() : r.metrics_json.substr(pos + 20, 16);
          if (sum.empty()) identical = false;
          if (replicas == 1)
            first_checksum = sum;
          else if (sum != first_checksum)
            identical = false;
        }
        if (replicas > 0 && !lifted.empty())
          lifted += std::string(",\"replicas_identical\":") + (identical ? "true" : "false") +
                    ",\"replicas_lost\":" + std::to_string(lost);
        if (!lifted.empty()) lifted += ps_job::summarize(results);
        if (!lifted.empty()) lifted += ralp_job::summarize(results);
        if (!lifted.empty()) lifted += hp_job::summarize(results);
        return lifted;
      });
  topology::type_spec d{"dp_replica", "one data-parallel replica of the train job (strategy dp)", {}};
  d.keys.push_back(key_spec{"rank", key_type::integer, false, int64_t{0}, "replica index", 0.0, {}, {}});
  d.keys.push_back(key_spec{"replicas", key_type::integer, false, int64_t{1}, "replicas in the job", 1.0, {}, {}});
  d.keys.push_back(key_spec{"member", key_type::string, true, std::string(""), "its ring member", {}, {}, {}});
  d.keys.push_back(key_spec{"device", key_type::integer, false, int64_t{0}, "index into its node's devices", 0.0,
                            {}, {}});
  d.keys.push_back(key_spec{"failover", key_type::boolean, false, false,
                            "regroup and go back to a snapshot when replicas are lost with their nodes", {}, {}, {}});
  (void)reg.add_actor_type(d, [](caf::actor_system& sys, const actor_env& env) -> caf::actor {
    return sys.spawn<caf::detached>(dp_replica, env);
  });
  topology::type_spec t{"trainer", "trains the job's model on its node's first device", {}};
  (void)reg.add_actor_type(t, [](caf::actor_system& sys, const actor_env& env) -> caf::actor {
    if (env.cluster.job.params.get_string("input", "memory") == "stream") return sys.spawn(stream_trainer, env);
    return sys.spawn<caf::detached>(trainer, env);
  });
}

}  // namespace hetflow::actors::builtin
