// hp_stage: one pipeline stage of a HetPipe virtual worker (strategy
// "hetpipe"): a blocking actor (its own thread) around a
// hetpipe::stage_core (hp_core.hpp has the semantics).
//
//   role <- hphead (or "idle": the plan does not use this device: it ends)
//   for each wave c of its VW:
//     (checkpoint_every: its optimizer state, before the pull)
//     pull(c) -> every PS shard holding its units; weights -> W(c)
//     stage j keeps at most min(Nm, S - j) minibatches between forward and
//     backward (1F1B, the planner's memory model):
//       stage 0: starts minibatches (batch, forward, activations + labels
//                -> stage 1; one stage: forward, loss, backward at once)
//                while it has a free slot; batches from the training set
//                in memory or (input = "stream") from the stream shards the
//                head assigned to its VW, which share its mailbox
//       others:  forward p (taken from the mailbox only with a free slot) ->
//                forward, activations -> next stage; the last stage:
//                forward, loss, backward, dL/dinput -> previous stage
//       backward p -> backward, dL/dinput -> previous stage
//     after each backward: the local update (minibatch order)
//     after the wave's last update: push u(c) to every PS shard (overlapped
//     waves: on a side thread of the stage's, while the next wave computes)
//   the last stage: per-epoch loss and accuracy -> hphead
//
// Every wait is bounded (ps_timeout + 10 s) and polls stopping().
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <random>
#include <thread>

#include "actors/builtin/stream_job.hpp"
#include "actors/control_board.hpp"
#include "actors/hetpipe/hp_core.hpp"
#include "actors/hetpipe/hp_inbox.hpp"
#include "actors/json.hpp"
#include "actors/log.hpp"
#include "actors/metrics.hpp"
#include "actors/node_runtime.hpp"
#include "actors/ps/clock_gauges.hpp"
#include "actors/ps/ps_checkpoint.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cuda/cuda_api.hpp"
#include "kernels/trace.hpp"
#include "kernels/trainer.hpp"
#include "kernels/zoo.hpp"

namespace hetflow::actors::hp_job {
namespace {

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

struct role_info {
  int vw = 0, vws = 1, stage = 0, stages = 1, worker = 0, nm = 1;
  std::size_t first = 0, last = 0;
  std::string prev, next;
  std::vector<int64_t> unit_ps;  // node index of each unit's shard
  int64_t minibatches = 0;
  double timeout_s = 40;
  double jitter_s = 0;  // hetpipe_drill_jitter
  int64_t ckpt_every = 0;  // waves between checkpoints (0: none)
  bool resume = false;
  bool overlap = false;    // overlapped waves (hp_core.hpp)
  int64_t staleness = 0;   // D at the start
  std::vector<std::string> stream_consumers;  // stage 0 of a streamed job: every VW's stage 0, in VW order
};

expected<role_info> parse_role(const std::string& me, const std::map<std::string, std::string>& kv) {
  role_info r;
  try {
    r.vw = std::stoi(kv.at("vw"));
    r.vws = std::stoi(kv.at("vws"));
    r.stage = std::stoi(kv.at("stage"));
    r.stages = std::stoi(kv.at("stages"));
    r.worker = std::stoi(kv.at("worker"));
    r.nm = std::stoi(kv.at("nm"));
    r.first = std::size_t(std::stoll(kv.at("first")));
    r.last = std::size_t(std::stoll(kv.at("last")));
    r.prev = kv.count("prev") ? kv.at("prev") : "";
    r.next = kv.count("next") ? kv.at("next") : "";
    r.unit_ps = split_ints(kv.at("unit_ps"));
    r.minibatches = std::stoll(kv.at("minibatches"));
    r.timeout_s = std::stod(kv.at("timeout"));
    if (kv.count("jitter")) r.jitter_s = std::stod(kv.at("jitter"));
    if (kv.count("ckpt_every")) r.ckpt_every = std::stoll(kv.at("ckpt_every"));
    r.resume = kv.count("resume") && kv.at("resume") == "1";
    r.overlap = kv.count("overlap") && kv.at("overlap") == "1";
    if (kv.count("staleness")) r.staleness = std::stoll(kv.at("staleness"));
    if (kv.count("stream_consumers")) {
      std::istringstream in(kv.at("stream_consumers"));
      for (std::string n; std::getline(in, n, ',');)
        if (!n.empty()) r.stream_consumers.push_back(n);
    }
  } catch (const std::exception& e) {
    return make_error(errc::wire_corrupt, me + ": a malformed role from the head (" + e.what() + ")");
  }
  if (r.nm < 1 || r.first > r.last || r.last >= r.unit_ps.size())
    return make_error(errc::wire_corrupt, me + ": an inconsistent role from the head");
  return r;
}

struct epoch_stats {
  double loss_sum = 0;
  int64_t correct = 0, samples = 0, minibatches = 0;
  clock_type::time_point t0, t1;
  bool started = false;
};

// A thread of the stage's own that runs one job at a time: the wave's push
// (overlapped waves: its messages to the PS shards, a copy of the stage's
// update each, tens of MB for a large stage) and a cuda stage's upload of
// its pulled weights, while the stage's minibatches go on. submit() first
// waits for the job before it, so what a job reads stays valid until the
// next submit() or wait() returns (a stage's wave sums, on the host or on
// its device, are dropped by a rebase only once its shards hold them, i.e.
// after this push; the host copies a cuda stage's push makes are reused by
// the next push, which waits). The
// first error is kept: later jobs are skipped and every wait returns it.
template <class Job> class side_thread {
public:
  explicit side_thread(std::function<status(Job&)> fn) : fn_(std::move(fn)), thread_([this] { loop(); }) {}
  ~side_thread() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  side_thread(const side_thread&) = delete;
  side_thread& operator=(const side_thread&) = delete;

  // Waits for the job in flight, bounded like every wait of the stage;
  // `what` ("STAGE: sending the push of wave 3") names it in the errors.
  status wait(double timeout_s, const std::atomic<bool>& stopping, const std::string& what) {
    std::unique_lock<std::mutex> g(mu_);
    const auto deadline = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(
                                                   std::chrono::duration<double>(timeout_s));
    while (work_) {
      if (stopping.load()) return make_error(errc::cancelled, what + ": stopped");
      if (clock_type::now() >= deadline)
        return make_error(errc::timeout, what + " took more than " + std::to_string(int(timeout_s)) +
                                             " s ([job] ps_timeout + 10 s: raise ps_timeout for a link that slow)");
      cv_.wait_for(g, std::chrono::milliseconds(100));
    }
    return error_;
  }
  status submit(Job job, double timeout_s, const std::atomic<bool>& stopping, const std::string& what) {
    HF_RETURN_IF_ERROR(wait(timeout_s, stopping, what));
    {
      std::lock_guard<std::mutex> g(mu_);
      work_.emplace(std::move(job));
    }
    cv_.notify_all();
    return {};
  }
  double busy_seconds() {
    std::lock_guard<std::mutex> g(mu_);
    return busy_;
  }

private:
  void loop() {
    std::unique_lock<std::mutex> g(mu_);
    for (;;) {
      cv_.wait(g, [&] { return stop_ || work_; });
      if (!work_) return;  // stopping, nothing left
      g.unlock();          // the stage leaves work_ alone until it is reset
      const auto t0 = clock_type::now();
      status s = error_.ok() ? fn_(*work_) : status{};
      const double took = since(t0);
      g.lock();
      busy_ += took;
      if (error_.ok() && !s.ok()) error_ = s;
      work_.reset();
      cv_.notify_all();
    }
  }
  std::function<status(Job&)> fn_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Job> work_;
  status error_;
  bool stop_ = false;
  double busy_ = 0;
  std::thread thread_;  // last: starts once the members above exist
};

struct push_job {
  int64_t wave = 0;
  std::vector<kernels::tensor_view> update;  // on the host; on the device when `ready` is set
  std::shared_ptr<void> ready;               // a cuda stage: the point after the sums on its stream
};

// A cuda stage's pushes leave the device on the push thread: the wave's
// sums copied on a stream of its own, once the stage's stream has passed
// their last step, into one page-locked buffer (the stage's thread only
// marks the point). Copied on the stage's thread, VGG-11's 37 MB held it
// ~0.8 ms a wave (H200). One push at a time (side_thread): the buffer is
// reused by the next.
class device_pushes {
public:
  explicit device_pushes(std::shared_ptr<kernels::device_context> ctx) : ctx_(std::move(ctx)) {}
  ~device_pushes() {
    (void)ctx_->synchronize();
    if (pinned_) static_cast<kernels::cuda::context&>(*ctx_).unpin_host(host_.f32());
  }
  device_pushes(const device_pushes&) = delete;
  device_pushes& operator=(const device_pushes&) = delete;

  // On the push thread: host copies of `update` (device views), valid until the next call.
  expected<std::vector<kernels::tensor_view>> to_host(const std::vector<kernels::tensor_view>& update,
                                                      const std::shared_ptr<void>& ready, kernels::trace::track_id tk,
                                                      int64_t wave) {
    kernels::trace::scope t("push: copy", tk, "wave", wave);
    auto& cc = static_cast<kernels::cuda::context&>(*ctx_);
    int64_t total = 0;
    for (const auto& u : update) total += u.numel();
    if (host_.empty() || host_.numel() < total) {
      if (pinned_) cc.unpin_host(host_.f32());
      host_ = kernels::tensor::empty({std::max<int64_t>(total, 1)});
      pinned_ = cc.pin_host(host_.f32(), std::size_t(total) * sizeof(float));
    }
    HF_RETURN_IF_ERROR(cc.wait_for(ready));
    std::vector<kernels::tensor_view> out;
    float* at = host_.f32();
    for (const auto& u : update) {  // copy() waits for each copy to the host
      HF_RETURN_IF_ERROR(ctx_->copy(u, kernels::mutable_tensor_view(at, u.shape())));
      out.push_back(kernels::tensor_view(at, u.shape()));
      at += u.numel();
    }
    return out;
  }

private:
  std::shared_ptr<kernels::device_context> ctx_;  // its own stream
  kernels::tensor host_;
  bool pinned_ = false;
};

// A cuda stage with overlapped waves and D = 0 requests wave w + 1's pull
// as soon as wave w's answer is in, so the answer - the stage's weights,
// tens of MB - arrives while wave w computes. Copied to the device at the
// wave's first forward, it held the stage's thread ~4.5 ms a wave (VGG-11's
// 37 MB from pageable message buffers, H200). A side thread copies it as
// soon as every shard's answer is in, on a stream of its own, into device
// buffers that the rebase then reads (device to device). One wave at a
// time: the stage requests the next wave only after its rebase has read
// these buffers (release()), so they are never written while read. The
// answers' bookkeeping is the stage thread's (the inbox's intercept runs
// there too); the answers move into the copy's job.
class uploader {
public:
  // The answers (one per shard, in shard order) as the stage's tensors in
  // parameter order, and per tensor the worker's waves its shard holds.
  using pulled = std::pair<std::vector<kernels::tensor_view>, std::vector<int64_t>>;
  using order_fn = std::function<expected<pulled>(const std::vector<ralp::ralp_message>&)>;
  // `staged`: one device tensor per parameter (ctx's device), in order.
  uploader(std::shared_ptr<kernels::device_context> ctx, std::vector<kernels::tensor> staged,
           std::vector<std::string> shards, order_fn order, kernels::trace::track_id track)
      : ctx_(std::move(ctx)), shards_(std::move(shards)), order_(std::move(order)), track_(track),
        staged_(std::move(staged)), copier_([this](job& j) { return upload(j); }) {}
  ~uploader() {
    (void)copier_.wait(1e9, never_, "");  // the copy in flight, if any
    // An upload that failed part way may have copies from host_ queued.
    (void)ctx_->synchronize();
    if (pinned_) static_cast<kernels::cuda::context&>(*ctx_).unpin_host(host_.f32());
  }
  uploader(const uploader&) = delete;
  uploader& operator=(const uploader&) = delete;

  // The stage requested wave w's pull (the previous wave released).
  void expect(int64_t w) {
    wave_ = w;
    answers_.clear();
    answers_.resize(shards_.size());
    got_.assign(shards_.size(), false);
  }
  // An answer of the expected wave from one of the shards, not yet given.
  bool wants(const ralp::ralp_message& m) const {
    const std::size_t i = index_of(m.sender);
    return m.kind == hp_job::kind_weights && m.info.clock == wave_ && wave_ >= 0 && i < shards_.size() && !got_[i];
  }
  bool has(const std::string& shard) const {
    const std::size_t i = index_of(shard);
    return wave_ >= 0 && i < shards_.size() && got_[i];
  }
  // Takes an answer wants() accepted; the last one starts the copy (an
  // error shows at wait()).
  void offer(ralp::ralp_message&& m) {
    const std::size_t i = index_of(m.sender);
    answers_[i] = std::move(m);
    got_[i] = true;
    if (complete()) (void)copier_.submit(job{wave_, std::move(answers_)}, 1e9, never_, "an earlier upload");
  }
  // Waits for wave w's upload: the device copies of its tensors and their
  // marks, valid until release().
  expected<pulled> wait(int64_t w, double timeout_s, const std::atomic<bool>& stopping) {
    if (wave_ != w || !complete())
      return make_error(errc::internal, "hetpipe stage: the upload of wave " + std::to_string(w) +
                                            " was not requested or lacks an answer");
    HF_RETURN_IF_ERROR(
        copier_.wait(timeout_s, stopping, "the copy of wave " + std::to_string(w) + "'s pulled weights to the device"));
    pulled p;
    for (auto& t : staged_) p.first.push_back(t.view());
    p.second = marks_;
    return p;
  }
  // The rebase has read the buffers: the next wave may be uploaded.
  void release() {
    wave_ = -1;
    got_.assign(shards_.size(), false);
  }
  double busy_seconds() { return copier_.busy_seconds(); }

private:
  struct job {
    int64_t wave = -1;
    std::vector<ralp::ralp_message> answers;
  };
  std::size_t index_of(const std::string& sender) const {
    return std::size_t(std::find(shards_.begin(), shards_.end(), sender) - shards_.begin());
  }
  bool complete() const { return std::all_of(got_.begin(), got_.end(), [](bool b) { return b; }); }
  // On the side thread.
  status upload(job& j) {
    kernels::trace::scope t("pull: upload", track_, "wave", j.wave);
    HF_ASSIGN_OR_RETURN(pulled p, order_(j.answers));
    if (staged_.size() != p.first.size())
      return make_error(errc::internal, "hetpipe stage: an upload of " + std::to_string(p.first.size()) +
                                            " tensors for " + std::to_string(staged_.size()) + " parameters");
    // From pageable memory the driver copies through small staging buffers
    // on one thread (~6 GB/s here). So: each tensor copied by a few threads
    // into one page-locked buffer, whose copy to the device runs while the
    // next tensor is copied in.
    if (host_.empty()) {
      int64_t total = 0;
      for (const auto& t : staged_) total += t.numel();
      host_ = kernels::tensor::empty({std::max<int64_t>(total, 1)});
      pinned_ = static_cast<kernels::cuda::context&>(*ctx_).pin_host(host_.f32(), std::size_t(total) * sizeof(float));
    }
    float* at = host_.f32();
    for (std::size_t i = 0; i < staged_.size(); ++i) {  // copy() checks the sizes
      if (!pinned_) {
        HF_RETURN_IF_ERROR(ctx_->copy(p.first[i], staged_[i].mutable_view()));
        continue;
      }
      const float* src = p.first[i].f32();
      const int64_t n = std::min(p.first[i].numel(), staged_[i].numel());
      kernels::cpu::service_arena().execute([&] {
        kernels::cpu::parallel_elements(n, [=](int64_t lo, int64_t hi) {
          std::memcpy(at + lo, src + lo, std::size_t(hi - lo) * sizeof(float));
        });
      });
      HF_RETURN_IF_ERROR(ctx_->copy(kernels::tensor_view(at, p.first[i].shape()), staged_[i].mutable_view()));
      at += n;
    }
    HF_RETURN_IF_ERROR(ctx_->synchronize());
    marks_ = std::move(p.second);  // read by the stage after wait()
    return {};
  }
  static inline const std::atomic<bool> never_{false};
  std::shared_ptr<kernels::device_context> ctx_;  // its own stream
  std::vector<std::string> shards_;
  order_fn order_;
  kernels::trace::track_id track_;
  std::vector<kernels::tensor> staged_;  // on the device, one per parameter
  kernels::tensor host_;                 // the page-locked way there (all tensors)
  bool pinned_ = false;
  int64_t wave_ = -1;  // the wave expected (-1: none)
  std::vector<ralp::ralp_message> answers_;
  std::vector<bool> got_;
  std::vector<int64_t> marks_;
  side_thread<job> copier_;  // last: destroyed (joined) first
};

// Runs `undo` when it goes: undoes the inbox's hooks into objects declared
// before it (so destroyed after it).
class on_exit {
public:
  explicit on_exit(std::function<void()> undo) : undo_(std::move(undo)) {}
  ~on_exit() { undo_(); }
  on_exit(const on_exit&) = delete;
  on_exit& operator=(const on_exit&) = delete;

private:
  std::function<void()> undo_;
};

struct stage_stats {
  int64_t waves = 0, minibatches = 0, param_bytes = 0, checkpoints = 0, resumed_wave = -1;
  double compute_seconds = 0, pull_seconds = 0, push_seconds = 0, push_thread_seconds = 0, pull_thread_seconds = 0;
  std::map<int, epoch_stats> epochs;
  // input = "stream" (stage 0): the options and the source's books.
  std::optional<builtin::stream_options> stream_opts;
  builtin::stream_stats stream;
};

expected<stage_stats> run_stage(const std::shared_ptr<node_services>& svc,
                                const std::string& me, const topology::cluster& cluster, const kernels::train_config& c,
                                const role_info& r, inbox& ib) {
  stage_stats st;
  const bool first_stage = r.stage == 0, last_stage = r.stage == r.stages - 1;
  HF_ASSIGN_OR_RETURN(kernels::zoo_options zo, kernels::model_options_for(c));
  HF_ASSIGN_OR_RETURN(kernels::model_spec spec, kernels::make_model_spec(c.model, zo));
  if (spec.layers.size() != r.unit_ps.size())
    return make_error(errc::internal, me + ": model " + c.model + " has " + std::to_string(spec.layers.size()) +
                                          " units, the head's plan " + std::to_string(r.unit_ps.size()));
  kernels::shape input = spec.input;
  if (r.first > 0) {  // the sample shape entering `first`: build the prefix once
    kernels::model_spec prefix = spec;
    prefix.layers.resize(r.first);
    HF_ASSIGN_OR_RETURN(kernels::model pm, kernels::build_model(prefix, kernels::device::cpu(), {1, c.seed}));
    input = pm.sample_shape(r.first);
  }
  HF_ASSIGN_OR_RETURN(kernels::model_spec slice, hetpipe::slice_spec(spec, r.first, r.last, input));
  std::vector<kernels::model> slots;
  // 1F1B: stage j keeps at most min(Nm, S - j) minibatches between forward
  // and backward (what the planner's memory model counts), so that many slots.
  const int keep = std::min(r.nm, r.stages - r.stage);
  for (int s = 0; s < keep; ++s) {
    HF_ASSIGN_OR_RETURN(kernels::model m, kernels::build_model(slice, c.where, {c.threads, c.seed + uint64_t(s)}));
    if (c.precision && m.where().kind == kernels::device_kind::cuda)  // [job] precision: "tf32" or "f32" here
      static_cast<kernels::cuda::context&>(m.context()).set_math(*c.precision);
    slots.push_back(std::move(m));
  }
  HF_ASSIGN_OR_RETURN(auto core, hetpipe::stage_core::make(std::move(slots), last_stage, c.optimizer,
                                                           r.overlap ? r.nm : 0));
  st.param_bytes = core->parameter_bytes();
  // Each unit's parameter count, to split pulled weights by unit.
  std::vector<std::size_t> unit_params;
  for (std::size_t u = r.first; u <= r.last; ++u) {
    std::vector<kernels::parameter*> ps;
    core->slot(0).at(u - r.first).parameters(ps);
    unit_params.push_back(ps.size());
  }
  // The PS nodes of its units, in node order.
  std::vector<int> shards;
  for (std::size_t u = r.first; u <= r.last; ++u)
    if (std::find(shards.begin(), shards.end(), int(r.unit_ps[u])) == shards.end()) shards.push_back(int(r.unit_ps[u]));
  std::sort(shards.begin(), shards.end());

  // Stage 0 reads the data: the whole training set from memory, or its
  // VW's batches from the stream shards (input = "stream": the same batches
  // in the same order; VW v takes the steps j with j % V == v either way).
  std::optional<kernels::training_data> data;
  std::unique_ptr<kernels::batch_source> source;
  kernels::epoch_plan plan;
  // The inbox hands stream batches to the source while it waits; undone
  // before the source goes (declared after it, so destroyed first).
  std::optional<on_exit> diverting;
  if (first_stage && !r.stream_consumers.empty()) {
    HF_ASSIGN_OR_RETURN(builtin::stream_options so, builtin::stream_options_of(cluster));
    so.consumers = r.stream_consumers;
    if (int(so.consumers.size()) != r.vws || so.consumers[std::size_t(r.vw)] != me)
      return make_error(errc::internal, me + ": the head's stream consumers do not name it as VW " +
                                            std::to_string(r.vw) + "'s stage 0");
    HF_ASSIGN_OR_RETURN(builtin::stream_trainer_data sd, builtin::load_stream_trainer_data(c, /*with_test=*/false));
    HF_ASSIGN_OR_RETURN(plan, kernels::make_epoch_plan(sd.train_rows, c.batch_size, c.drop_last, c.max_steps_per_epoch));
    auto src = builtin::make_stream_source(ib.self(), svc, me, so, plan, sd.sample, sd.classes, c.seed, &st.stream,
                                           r.vw, [&ib](const std::string& node, const wire_buffer_ref& buf) {
                                             ib.keep(node, buf);
                                           });
    ib.set_divert([s = src.get()](const std::string& node, const wire_buffer_ref& buf) { return s->offer(node, buf); });
    source = std::move(src);
    diverting.emplace([&ib] { ib.divert = nullptr; });
    st.stream_opts = std::move(so);
  } else if (first_stage) {
    HF_ASSIGN_OR_RETURN(kernels::training_data d, kernels::load_training_data(c, true, /*with_test=*/false));
    data = std::move(d);
    HF_ASSIGN_OR_RETURN(plan, kernels::make_epoch_plan(data->train.size(), c.batch_size, c.drop_last,
                                                       c.max_steps_per_epoch));
    HF_ASSIGN_OR_RETURN(source, kernels::make_memory_source(data->train, c));
  }
  if (first_stage) {
    if (!(source->sample_shape() == spec.input))
      return make_error(errc::internal, me + ": the data's samples are " + source->sample_shape().to_string() +
                                            ", the model's input " + spec.input.to_string());
    if (vw_minibatches(plan.steps, c.epochs, r.vw, r.vws) != r.minibatches)
      return make_error(errc::internal, me + ": the head counts " + std::to_string(r.minibatches) +
                                            " minibatches for VW " + std::to_string(r.vw) + ", the data makes " +
                                            std::to_string(vw_minibatches(plan.steps, c.epochs, r.vw, r.vws)));
  }
  const int64_t per_epoch = r.minibatches / std::max(1, c.epochs);
  const hetpipe::wave_plan waves{r.minibatches, r.nm};
  const kernels::trace::track_id tk = ib.tk;
  std::map<int64_t, double> lr_of;  // per minibatch in flight
  std::map<int64_t, int> epoch_of;
  int open_epoch = -1;

  // Pulls: the request to every shard holding its units, then their
  // answers. Overlapped waves with D = 0 request wave w + 1 as soon as wave
  // w's answer is in, so the shards' answer waits in the inbox for the
  // wave's first forward (their round trip is hidden; with D = 0 the answer
  // holds exactly the waves <= w - 1 whenever it comes). With D > 0 a shard
  // answers as soon as the bound allows, with what has arrived, so an early
  // request would only get staler weights: those pull at the forward.
  int64_t requested = -1;  // the latest wave whose pull was requested
  // A cuda stage that prefetches its pulls copies them to the device on a
  // thread of its own (uploader above).
  std::optional<uploader> uploads;
  auto request_pull = [&](int64_t wave) -> status {
    if (wave <= requested) return {};
    if (uploads) uploads->expect(wave);
    for (int n : shards) {
      ralp::ralp_info info;
      info.worker = r.worker;
      info.clock = wave;
      info.aux = int64_t(r.first);
      info.reserved = int32_t(r.last);
      HF_RETURN_IF_ERROR(ib.send(ps_name(n), kind_pull, info));
    }
    requested = wave;
    return {};
  };
  // The shards' answers (in shard order) as the stage's tensors in
  // parameter order (each shard sends its units of [first, last] in order),
  // and per tensor this worker's waves its shard already holds.
  auto order_answers = [&r, &shards, &unit_params, me](const std::vector<ralp::ralp_message>& answers)
      -> expected<uploader::pulled> {
    std::vector<std::vector<kernels::tensor_view>> by_unit(r.last - r.first + 1);
    for (std::size_t a = 0; a < shards.size(); ++a) {
      std::size_t k = 0;
      for (std::size_t u = r.first; u <= r.last; ++u) {
        if (r.unit_ps[u] != shards[a]) continue;
        for (std::size_t i = 0; i < unit_params[u - r.first]; ++i) {
          HF_ASSIGN_OR_RETURN(auto v, f32_view(answers[a], k++));
          by_unit[u - r.first].push_back(v);
        }
      }
      if (k != answers[a].tensors())
        return make_error(errc::internal, me + ": " + ps_name(shards[a]) + " sent " +
                                              std::to_string(answers[a].tensors()) + " tensors, want " + std::to_string(k));
    }
    uploader::pulled out;
    for (auto& v : by_unit) out.first.insert(out.first.end(), v.begin(), v.end());
    for (std::size_t u = r.first; u <= r.last; ++u) {
      const auto a = std::size_t(std::find(shards.begin(), shards.end(), int(r.unit_ps[u])) - shards.begin());
      for (std::size_t i = 0; i < unit_params[u - r.first]; ++i) out.second.push_back(answers[a].info.global);
    }
    return out;
  };
  auto pull = [&](int64_t wave) -> status {
    kernels::trace::scope t("pull", tk, "wave", wave);
    const auto t0 = clock_type::now();
    HF_RETURN_IF_ERROR(request_pull(wave));
    auto answer_of = [&](const std::string& from) {
      return ib.next(
          [&](const ralp::ralp_message& x) {
            return x.kind == kind_weights && x.sender == from && x.info.clock == wave;
          },
          r.timeout_s, "the PS shard " + ib.who(from), "weights of wave " + std::to_string(wave));
    };
    if (uploads) {  // the answers not taken early, then the upload's device copies
      for (int n : shards)
        if (!uploads->has(ps_name(n))) {
          HF_ASSIGN_OR_RETURN(auto m, answer_of(ps_name(n)));
          uploads->offer(std::move(m));
        }
      auto up = uploads->wait(wave, r.timeout_s, svc->stopping());
      if (!up) return up.error().with_context(me);
      uploader::pulled& p = *up;
      HF_RETURN_IF_ERROR(core->rebase(p.first, p.second));
      uploads->release();
      st.pull_seconds += since(t0);
      return {};
    }
    std::vector<ralp::ralp_message> answers;
    for (int n : shards) {
      HF_ASSIGN_OR_RETURN(auto m, answer_of(ps_name(n)));
      answers.push_back(std::move(m));
    }
    HF_ASSIGN_OR_RETURN(uploader::pulled p, order_answers(answers));
    if (core->overlapped())
      HF_RETURN_IF_ERROR(core->rebase(p.first, p.second));
    else
      HF_RETURN_IF_ERROR(core->install(p.first));
    st.pull_seconds += since(t0);
    return {};
  };
  if (core->overlapped() && core->on_device() && r.staleness == 0 && !core->params().empty()) {
    // One more copy of the stage's weights on the device (the planner's
    // memory model counts it for a cuda stage): without room for it, the
    // pulls are copied on this thread as before.
    auto uctx = kernels::make_device_context(core->slot(0).where(), 1);
    std::vector<kernels::tensor> staged;
    if (uctx) try {
        for (kernels::parameter* q : core->params())
          staged.push_back(kernels::tensor::empty_on((*uctx)->memory(), q->value.shape()));
      } catch (const std::bad_alloc&) {
        staged.clear();
      }
    if (uctx && !staged.empty()) {
      std::vector<std::string> names;
      for (int n : shards) names.push_back(ps_name(n));
      uploads.emplace(std::move(*uctx), std::move(staged), std::move(names), order_answers,
                      tk != 0 ? kernels::trace::track(me + " uploads") : kernels::trace::track_id{0});
      ib.intercept = [&uploads](ralp::ralp_message& m) {
        if (!uploads->wants(m)) return false;
        uploads->offer(std::move(m));
        return true;
      };
    } else {
      log_info(me + ": " + (uctx ? std::string("no device memory for a second copy of the stage's weights")
                                 : "no second stream (" + uctx.error().message() + ")") +
               ": each wave's pulled weights are copied to the device on the stage's thread");
    }
  }
  // Undone before `uploads` goes (declared after it, so destroyed first).
  on_exit reset_intercept([&ib] { ib.intercept = nullptr; });

  // The messages of a push. Every shard gets one (empty when it holds none
  // of these units): its clock table counts every stage of every VW.
  auto send_push = [&](int64_t wave, const std::vector<kernels::tensor_view>& u,
                       kernels::trace::track_id track) -> status {
    kernels::trace::scope t("push: send", track, "wave", wave);
    const int nodes = int(cluster.nodes.size());
    for (int n = 0; n < nodes; ++n) {
      std::vector<kernels::tensor_view> ts;
      std::size_t k = 0;
      for (std::size_t un = r.first; un <= r.last; ++un)
        for (std::size_t i = 0; i < unit_params[un - r.first]; ++i, ++k)
          if (r.unit_ps[un] == n) ts.push_back(u[k]);
      ralp::ralp_info info;
      info.worker = r.worker;
      info.clock = wave;
      info.aux = int64_t(r.first);
      info.reserved = int32_t(r.last);
      HF_RETURN_IF_ERROR(ib.send(ps_name(n), kind_push, info, ts));
    }
    return {};
  };
  // Overlapped waves send on a side thread (its own trace track); a cuda
  // stage's sums leave the device there too, on a stream of their own
  // (device_pushes; without a second stream, on the stage's thread).
  std::optional<device_pushes> device_push;
  if (core->overlapped() && core->on_device()) {
    if (auto pctx = kernels::make_device_context(core->slot(0).where(), 1))
      device_push.emplace(std::move(*pctx));
    else
      log_info(me + ": no second stream (" + pctx.error().message() + "): each wave's update is copied to the host "
                    "on the stage's thread");
  }
  std::optional<side_thread<push_job>> async_push;
  kernels::trace::track_id push_tk = 0;
  if (core->overlapped()) {
    if (tk != 0) push_tk = kernels::trace::track(me + " pushes");
    async_push.emplace([&send_push, &device_push, push_tk](push_job& j) -> status {
      if (!j.ready) return send_push(j.wave, j.update, push_tk);
      HF_ASSIGN_OR_RETURN(std::vector<kernels::tensor_view> host, device_push->to_host(j.update, j.ready, push_tk, j.wave));
      return send_push(j.wave, host, push_tk);
    });
  }
  auto push_sent = [&](int64_t wave) {
    return async_push->wait(r.timeout_s, svc->stopping(), me + ": sending the push of wave " + std::to_string(wave));
  };
  auto push = [&](int64_t wave) -> status {
    kernels::trace::scope t("push", tk, "wave", wave);
    const auto t0 = clock_type::now();
    if (core->overlapped()) {
      HF_RETURN_IF_ERROR(push_sent(wave - 1));  // the previous push read the views wave_delta reuses
      push_job job{wave, {}, {}};
      if (device_push) {
        HF_ASSIGN_OR_RETURN(auto d, core->wave_delta_on_device(wave));
        job.update = std::move(d.update);
        job.ready = std::move(d.ready);
      } else {
        HF_ASSIGN_OR_RETURN(job.update, core->wave_delta(wave));
      }
      HF_RETURN_IF_ERROR(async_push->submit(std::move(job), r.timeout_s, svc->stopping(),
                                                  me + ": sending the push of wave " + std::to_string(wave - 1)));
    } else {
      HF_ASSIGN_OR_RETURN(std::vector<kernels::tensor> owned, core->wave_update());
      std::vector<kernels::tensor_view> u;
      for (auto& x : owned) u.push_back(x.view());
      HF_RETURN_IF_ERROR(send_push(wave, u, tk));
    }
    st.push_seconds += since(t0);
    return {};
  };

  // The jitter drill: a random pause before every forward.
  std::mt19937_64 jitter_rng(std::hash<std::string>{}(me));
  auto jitter = [&] {
    if (r.jitter_s <= 0) return;
    std::uniform_real_distribution<double> u(0.0, r.jitter_s);
    std::this_thread::sleep_for(std::chrono::duration<double>(u(jitter_rng)));
  };

  auto account = [&](int64_t p, const kernels::loss_result& lr, int64_t rows) {
    auto& e = st.epochs[epoch_of[p]];
    if (!e.started) {
      e.started = true;
      e.t0 = clock_type::now();
    }
    e.loss_sum += lr.loss;
    e.correct += lr.correct;
    e.samples += rows;
    ++e.minibatches;
    e.t1 = clock_type::now();
    if (r.vw == 0 && e.minibatches == per_epoch) {  // VW 0's epoch is over (the others' come at the end)
      const double secs = std::chrono::duration<double>(e.t1 - e.t0).count();
      char line[200];
      std::snprintf(line, sizeof line, "VW 0: epoch %d/%d: loss %.4f, train accuracy %.4f, %.0f samples/s",
                    epoch_of[p] + 1, c.epochs, e.loss_sum / double(e.minibatches),
                    e.samples > 0 ? double(e.correct) / double(e.samples) : 0.0,
                    secs > 0 ? double(e.samples) / secs : 0.0);
      log_info(line);
    } else if (r.vw == 0 && c.progress_every > 0 && e.minibatches % (c.progress_every * 5) == 0) {
      char line[200];
      std::snprintf(line, sizeof line, "VW 0: epoch %d/%d minibatch %lld/%lld | loss %.4f", epoch_of[p] + 1, c.epochs,
                    static_cast<long long>(e.minibatches), static_cast<long long>(per_epoch),
                    e.loss_sum / double(e.minibatches));
      log_info(line);
    }
  };

  // The last stage's minibatch p: forward, loss, backward; dL/d(input) to
  // the previous stage (before the local update, which is off the critical
  // path), the local update, the statistics.
  auto last_step = [&](int64_t p, kernels::tensor_view in, std::span<const int32_t> labels, double lr) -> status {
    kernels::trace::scope t("forward+backward", tk, "minibatch", p);
    HF_ASSIGN_OR_RETURN(auto fb, core->forward_backward_last(p, in, labels, !first_stage));
    t.end();  // the send and the local update have spans of their own
    if (!std::isfinite(fb.loss.loss))
      return make_error(errc::internal, me + ": loss became " + std::to_string(fb.loss.loss) + " at minibatch " +
                                            std::to_string(p) + "; lower the learning rate");
    if (!first_stage) {
      ralp::ralp_info info;
      info.clock = p;
      std::vector<kernels::tensor_view> ts{fb.input_grad};
      kernels::trace::scope ts_send("send", tk, "minibatch", p);
      HF_RETURN_IF_ERROR(ib.send(r.prev, kind_backward, info, ts));
    }
    {
      kernels::trace::scope tu("local update", tk, "minibatch", p);
      HF_RETURN_IF_ERROR(core->local_update(p, lr));
    }
    account(p, fb.loss, int64_t(labels.size()));
    return {};
  };

  // Stage 0: minibatch p from the data (its batch, forward, activations +
  // labels -> the next stage; a one-stage VW: forward, loss, backward).
  // Minibatch p is step r.vw + (p % per_epoch) * r.vws of epoch p / per_epoch;
  // its batch, the source moved to that epoch first.
  auto batch_of = [&](int64_t p) -> expected<kernels::train_batch> {
    const int epoch = int(p / per_epoch);
    if (epoch != open_epoch) {
      if (open_epoch >= 0) HF_RETURN_IF_ERROR(source->end_epoch(open_epoch));
      HF_RETURN_IF_ERROR(source->begin_epoch(epoch));
      open_epoch = epoch;
    }
    return source->next(epoch, r.vw + (p % per_epoch) * r.vws);
  };
  auto start_one = [&](int64_t p) -> status {
    HF_ASSIGN_OR_RETURN(kernels::train_batch b, batch_of(p));
    const int epoch = open_epoch;
    const int64_t step = r.vw + (p % per_epoch) * r.vws;
    const double lr = kernels::lr_at(c.schedule, c.optimizer.lr, epoch, step, plan.steps, c.epochs);
    lr_of[p] = lr;
    epoch_of[p] = epoch;
    jitter();
    const auto tc = clock_type::now();
    if (last_stage) {  // a one-stage VW
      HF_RETURN_IF_ERROR(last_step(p, b.images, b.labels, lr));
    } else {
      kernels::trace::scope t("forward", tk, "minibatch", p);
      HF_ASSIGN_OR_RETURN(kernels::tensor_view act, core->forward(p, b.images));
      ralp::ralp_info info;
      info.clock = p;
      info.global = epoch;
      info.aux = step;
      info.lr = lr;
      std::vector<kernels::tensor_view> ts{act};
      kernels::trace::scope ts_send("send", tk, "minibatch", p);
      HF_RETURN_IF_ERROR(ib.send(r.next, kind_forward, info, ts, b.labels));
    }
    st.compute_seconds += since(tc);
    return {};
  };
  int kept = 0;  // forwarded here, backward not yet
  // Activations of minibatch p from the previous stage.
  auto on_forward = [&](const ralp::ralp_message& m) -> status {
    const int64_t p = m.info.clock;
    if (first_stage || m.sender != r.prev)
      return make_error(errc::internal, me + ": activations from '" + m.sender + "', not its previous stage");
    jitter();
    const auto tc = clock_type::now();
    lr_of[p] = m.info.lr;
    epoch_of[p] = int(m.info.global);
    HF_ASSIGN_OR_RETURN(kernels::tensor_view in, f32_view(m, 0));
    HF_ASSIGN_OR_RETURN(std::vector<int32_t> labels, ralp::i32_values(m, 1));
    if (last_stage) {
      HF_RETURN_IF_ERROR(last_step(p, in, labels, m.info.lr));
    } else {
      kernels::trace::scope t("forward", tk, "minibatch", p);
      HF_ASSIGN_OR_RETURN(kernels::tensor_view act, core->forward(p, in));
      ralp::ralp_info info = m.info;
      std::vector<kernels::tensor_view> ts{act};
      kernels::trace::scope ts_send("send", tk, "minibatch", p);
      HF_RETURN_IF_ERROR(ib.send(r.next, kind_forward, info, ts, labels));
      ++kept;
    }
    st.compute_seconds += since(tc);
    return {};
  };
  // dL/d(output) of minibatch p from the next stage: backward, dL/d(input)
  // to the previous stage, the local update.
  auto on_backward = [&](const ralp::ralp_message& m) -> status {
    const int64_t p = m.info.clock;
    if (last_stage || m.sender != r.next)
      return make_error(errc::internal, me + ": gradients from '" + m.sender + "', not its next stage");
    const auto tc = clock_type::now();
    HF_ASSIGN_OR_RETURN(kernels::tensor_view g, f32_view(m, 0));
    {
      kernels::trace::scope t("backward", tk, "minibatch", p);
      HF_ASSIGN_OR_RETURN(kernels::tensor_view dx, core->backward(p, g, !first_stage));
      if (!first_stage) {
        ralp::ralp_info info;
        info.clock = p;
        std::vector<kernels::tensor_view> ts{dx};
        kernels::trace::scope ts_send("send", tk, "minibatch", p);
        HF_RETURN_IF_ERROR(ib.send(r.prev, kind_backward, info, ts));
      }
    }
    {
      kernels::trace::scope tu("local update", tk, "minibatch", p);
      HF_RETURN_IF_ERROR(core->local_update(p, lr_of[p]));
    }
    --kept;
    st.compute_seconds += since(tc);
    return {};
  };
  // Checkpoints of the local optimizer state (the shards keep the weights),
  // written before the pull of `wave` (waves < `wave` are in): every
  // checkpoint_every waves, and at the waves `hetflow shell`'s checkpoint
  // asked for (control_board.hpp; the job's shards cut at the same wave).
  std::shared_ptr<ps::checkpoint_store> store;
  if (const std::string dir = cluster.job.params.get_string("checkpoint_dir", ""); !dir.empty())
    store = ps::make_directory_store(dir);
  std::set<int64_t> asked;
  int64_t checkpoint_generation = 0;
  int64_t first_wave_of_run = 0;  // --resume: the restored wave
  auto checkpoint_wave = [&](int64_t w) { return (r.ckpt_every > 0 && w % r.ckpt_every == 0) || asked.count(w) > 0; };
  auto take_checkpoint_request = [&] {
    const auto taken = control::take_new_checkpoint_request(checkpoint_generation);
    if (!taken) return;
    const auto& req = *taken;
    const std::string what = me + ": checkpoint before wave " + std::to_string(req.label);
    std::string refused;
    if (!store)
      refused = what + ": the job has no checkpoint_dir";
    else if (req.label <= requested || req.label < first_wave_of_run)
      refused = what + ": it asked for the weights of wave " + std::to_string(std::max(requested, first_wave_of_run)) +
                " already";
    else if (req.label >= waves.waves())
      refused = what + ": past its last wave (" + std::to_string(waves.waves() - 1) + ")";
    if (!refused.empty()) {
      log_warn("shell: " + refused);
      control::answer_checkpoint(me, req.generation, false, refused);
      return;
    }
    asked.insert(req.label);
    control::answer_checkpoint(me, req.generation, true,
                               what + " (its optimizer state; weights asked for up to wave " + std::to_string(requested) + ")");
  };
  // `hetflow shell`'s pause: no new work until resume.
  auto honour_pause = [&]() -> status {
    take_checkpoint_request();
    if (!control::paused(me)) return {};
    kernels::waits::scope w(me, "the shell", "resume (paused by `hetflow shell`)");
    while (control::paused(me)) {
      take_checkpoint_request();
      if (svc->stopping().load()) return make_error(errc::cancelled, me + ": stopped");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return {};
  };
  auto after_step = [&](int64_t done_before) {
    for (int64_t q = done_before; q < core->updates(); ++q) {  // q is done here
      lr_of.erase(q);
      epoch_of.erase(q);
    }
    kernels::waits::progress();
    actors::metrics::set_gauge("hetflow_hetpipe_in_flight", "Minibatches between forward and backward at a HetPipe stage",
                               {{"actor", me}}, double(kept));
  };
  auto write_checkpoint = [&](int64_t wave) -> status {
    kernels::trace::scope t("checkpoint", tk, "wave", wave);
    ps::checkpoint_meta meta;
    meta.shard_name = me;
    meta.shard = r.worker;
    meta.label = wave;
    meta.clocks = {wave};
    meta.optimizer_steps = core->optimizer_steps();
    std::vector<ps::named_tensor> ts;
    HF_ASSIGN_OR_RETURN(std::vector<kernels::state_tensor> state, core->optimizer_state());
    for (auto& t : state) ts.push_back({t.name, &t.value});
    // ... and the running statistics ("state:" + name).
    HF_ASSIGN_OR_RETURN(std::vector<kernels::state_tensor> stats, core->state_host());
    for (auto& t : stats) {
      t.name = "state:" + t.name;
      ts.push_back({t.name, &t.value});
    }
    meta.state_tensors = int64_t(ts.size());
    HF_RETURN_IF_ERROR(ps::write_checkpoint(*store, meta, ts));
    ++st.checkpoints;
    if (asked.erase(wave) > 0) log_warn("shell: " + me + " wrote the checkpoint asked for before wave " + std::to_string(wave));
    return {};
  };
  auto pushed = [&](int64_t wave) -> status {
    HF_RETURN_IF_ERROR(push(wave));
    ++st.waves;
    ps::publish_worker_clock(me, wave + 1);  // waves pushed (the shell's `clocks`)
    return {};
  };
  // At the end: the stage's running statistics to the head (which averages
  // each over the VWs for the final evaluation).
  auto send_state = [&]() -> status {
    if (!core->has_state()) return {};
    HF_ASSIGN_OR_RETURN(std::vector<kernels::state_tensor> stats, core->state_host());
    std::vector<kernels::tensor_view> ts;
    std::string names;
    for (auto& t : stats) {
      ts.push_back(t.value.view());
      names += t.name + "\n";
    }
    ralp::ralp_info info;
    info.worker = r.vw;
    info.aux = int64_t(r.first);
    return ib.send(head_name, kind_state, info, ts, {}, names);
  };
  const std::string upstream = first_stage ? "stage " + std::to_string(r.stage + 1) + " " + ib.who(r.next)
                                           : "its neighbour stages";

  expected<stage_stats> result = make_error(errc::internal, "did not run");
  core->slot(0).context().run([&] { result = [&]() -> expected<stage_stats> {
    int64_t first_wave = 0;
    if (r.resume) {
      HF_ASSIGN_OR_RETURN(int64_t label, agree_on_label(ib, store.get(), me));
      if (label >= 0) {
        HF_ASSIGN_OR_RETURN(ps::loaded_checkpoint ck, ps::read_checkpoint(*store, me, label));
        const std::string where = me + ": checkpoint " + std::to_string(label);
        std::vector<std::string> opt_names, stat_names;
        std::vector<kernels::tensor> opt_values, stat_values;
        for (std::size_t i = 0; i < ck.names.size() && i < ck.tensors.size(); ++i) {
          const bool stat = ck.names[i].rfind("state:", 0) == 0;
          (stat ? stat_names : opt_names).push_back(stat ? ck.names[i].substr(6) : ck.names[i]);
          (stat ? stat_values : opt_values).push_back(std::move(ck.tensors[i]));
        }
        HF_RETURN_IF_ERROR(core->restore(c.optimizer.kind, ck.meta.optimizer_steps, opt_values, opt_names,
                                         waves.first_of(label), where));
        HF_RETURN_IF_ERROR(core->restore_state(stat_names, stat_values, where));
        first_wave = label;
        first_wave_of_run = label;
        st.resumed_wave = label;
        // Streamed: the shards replay every step from the start, so take
        // (and drop) the batches of the minibatches before the checkpoint;
        // the books stay whole. TODO(perf): tell the shards where to start.
        if (first_stage && st.stream_opts)
          for (int64_t p = 0; p < waves.first_of(label); ++p) HF_RETURN_IF_ERROR(batch_of(p).error());
      }
    }
    if (r.overlap) {
      // Overlapped waves: one strict 1F1B schedule over every minibatch -
      // forward the next while fewer than `keep` wait here for their
      // backward, else the backward of the oldest - pulling at each wave's
      // first forward and pushing after its last update. Checkpoint waves
      // are drained: every backward before them first.
      const int64_t total = r.minibatches;
      int64_t next_f = waves.first_of(first_wave);
      int64_t pulled = -1;  // the latest wave pulled
      while (core->updates() < total) {
        if (svc->stopping().load()) return make_error(errc::cancelled, me + ": stopped");
        HF_RETURN_IF_ERROR(honour_pause());
        const int64_t done = core->updates();
        bool forward = next_f < total && kept < keep;
        if (forward && waves.wave_of(next_f) != pulled) {  // the wave's first forward
          const int64_t w = waves.wave_of(next_f);
          const bool drained = checkpoint_wave(w);
          if (drained && done < next_f) {
            forward = false;  // finish the backwards before it
          } else {
            if (store && drained && w > first_wave) HF_RETURN_IF_ERROR(write_checkpoint(w));
            HF_RETURN_IF_ERROR(pull(w));
            pulled = w;
            if (r.staleness == 0 && w + 1 < waves.waves()) HF_RETURN_IF_ERROR(request_pull(w + 1));
          }
        }
        if (forward && first_stage) {
          HF_RETURN_IF_ERROR(start_one(next_f));
          if (!last_stage) ++kept;
        } else {
          const auto want_kind = forward ? kind_forward : kind_backward;
          const int64_t want = forward ? next_f : done;
          HF_ASSIGN_OR_RETURN(auto m, ib.next(
                                          [&](const ralp::ralp_message& x) {
                                            return x.kind == want_kind && x.info.clock == want;
                                          },
                                          r.timeout_s, upstream,
                                          std::string(forward ? "activations" : "gradients") + " of minibatch " +
                                              std::to_string(want) + " (wave " +
                                              std::to_string(waves.wave_of(want)) + ")"));
          HF_RETURN_IF_ERROR(forward ? on_forward(m) : on_backward(m));
        }
        if (forward) ++next_f;
        for (int64_t q = done; q < core->updates(); ++q)  // a wave's last update: its push
          if (q + 1 == total || waves.wave_of(q + 1) != waves.wave_of(q)) HF_RETURN_IF_ERROR(pushed(waves.wave_of(q)));
        after_step(done);
      }
      HF_RETURN_IF_ERROR(push_sent(waves.waves() - 1));  // the last wave's push sent
      st.push_thread_seconds = async_push->busy_seconds();
      if (uploads) st.pull_thread_seconds = uploads->busy_seconds();
      if (first_stage && open_epoch >= 0) HF_RETURN_IF_ERROR(source->end_epoch(open_epoch));
      st.minibatches = core->updates() - waves.first_of(first_wave);
      HF_RETURN_IF_ERROR(send_state());
      return st;
    }
    for (int64_t wave = first_wave; wave < waves.waves(); ++wave) {
      if (svc->stopping().load()) return make_error(errc::cancelled, me + ": stopped");
      take_checkpoint_request();
      if (store && wave > first_wave && checkpoint_wave(wave)) HF_RETURN_IF_ERROR(write_checkpoint(wave));
      HF_RETURN_IF_ERROR(pull(wave));
      const int64_t begin = waves.first_of(wave), end = begin + waves.size_of(wave);
      int64_t next_start = begin;  // stage 0: the next minibatch to start
      while (core->updates() < end) {
        HF_RETURN_IF_ERROR(honour_pause());
        const int64_t done = core->updates();
        if (first_stage) {  // start what the limit allows (a one-stage VW: all of the wave)
          while (next_start < end && kept < keep) {
            const int64_t d = core->updates();
            HF_RETURN_IF_ERROR(start_one(next_start++));
            if (!last_stage) ++kept;
            after_step(d);
          }
          if (core->updates() >= end) break;
        }
        // A forward only while fewer than `keep` minibatches wait for their
        // backward here; backwards always.
        HF_ASSIGN_OR_RETURN(auto m, ib.next(
                                        [&](const ralp::ralp_message& x) {
                                          return x.kind == kind_backward || (x.kind == kind_forward && kept < keep);
                                        },
                                        r.timeout_s, upstream,
                                        "activations or gradients of wave " + std::to_string(wave)));
        const int64_t p = m.info.clock;
        if (p < begin || p >= end)
          return make_error(errc::internal, me + ": minibatch " + std::to_string(p) + " from '" + m.sender +
                                                "' is not in wave " + std::to_string(wave) + " [" +
                                                std::to_string(begin) + ", " + std::to_string(end) + ")");
        HF_RETURN_IF_ERROR(m.kind == kind_forward ? on_forward(m) : on_backward(m));
        after_step(done);
      }
      HF_RETURN_IF_ERROR(pushed(wave));
    }
    if (first_stage && open_epoch >= 0) HF_RETURN_IF_ERROR(source->end_epoch(open_epoch));
    st.minibatches = core->updates() - waves.first_of(first_wave);
    HF_RETURN_IF_ERROR(send_state());
    return st;
  }(); });
  return result;
}

void hp_stage(caf::blocking_actor* self, actor_env env) {
  auto svc = env.services;
  const std::string me = env.spec.name;
  if (!builtin::await_start(self, *svc)) return;
  inbox ib(self, svc, me);
  // From the start (its wait for the role too): spans on one track must nest.
  ib.tk = kernels::trace::track(me);
  kernels::trace::track_scope on_track(ib.tk);  // the model's unit spans record here too
  ib.stash_stream = env.cluster.job.params.get_string("input", "memory") == "stream";
  auto role = await_role(ib, env.cluster);
  if (!role) return svc->report_done(me, false, role.error().to_string(), {});
  const auto& kv = *role;
  if (kv.count("idle")) return svc->report_done(me, true, "not used by the plan", "{\"used\":false}");
  auto r = parse_role(me, kv);
  if (!r) return svc->report_done(me, false, r.error().to_string(), {});
  ib.stash_stream = ib.stash_stream && r->stage == 0;  // no stream batch comes to the others
  {
    const int cpus = int(usable_cpus().size());
    const bool pinned = cpus < int(std::max(1u, std::thread::hardware_concurrency()));
    ib.activation_linger = hetpipe::pipeline_send_linger(env.cluster, env.spec.node, cpus, pinned);
  }
  auto cfg = builtin::train_config_of(env.cluster, env.spec.node, std::size_t(env.spec.args.get_int("device", 0)));
  if (!cfg) return svc->report_done(me, false, cfg.error().message(), {});
  const auto t0 = clock_type::now();
  control::allow_pause(me);
  auto st = run_stage(svc, me, env.cluster, *cfg, *r, ib);
  control::forget(me);
  if (!st) {
    // Tell the head (it may be waiting for this VW's statistics).
    ralp::ralp_info info;
    (void)ib.send(head_name, kind_error, info, {}, {}, st.error().to_string());
    return svc->report_done(me, false, st.error().to_string(), {});
  }
  if (r->stage == r->stages - 1) {
    std::string text;
    for (auto& [e, s] : st->epochs) {
      char line[200];
      std::snprintf(line, sizeof line, "%d %.17g %lld %lld %lld %.9g\n", e, s.loss_sum,
                    static_cast<long long>(s.correct), static_cast<long long>(s.samples),
                    static_cast<long long>(s.minibatches), std::chrono::duration<double>(s.t1 - s.t0).count());
      text += line;
    }
    ralp::ralp_info info;
    info.worker = r->vw;
    info.aux = st->minibatches;
    auto s = ib.send(head_name, kind_stats, info, {}, {}, text);
    if (!s.ok()) return svc->report_done(me, false, s.to_string(), {});
  }
  json_writer j;
  j.begin_object().field("used", true).field("vw", int64_t{r->vw}).field("stage", int64_t{r->stage});
  j.field("first_unit", int64_t(r->first)).field("last_unit", int64_t(r->last));
  j.field("device", cfg->where.to_string()).field("nm", int64_t{r->nm});
  j.field("slots", int64_t{std::min(r->nm, r->stages - r->stage)});
  j.field("waves", st->waves).field("minibatches", st->minibatches);
  j.field("parameter_bytes", st->param_bytes);
  j.field("checkpoints", st->checkpoints).field("resumed_wave", st->resumed_wave);
  j.field("compute_seconds", st->compute_seconds).field("pull_seconds", st->pull_seconds);
  j.field("push_seconds", st->push_seconds).field("push_thread_seconds", st->push_thread_seconds);
  j.field("pull_thread_seconds", st->pull_thread_seconds);
  j.field("wait_seconds", ib.wait_seconds);
  j.field("bytes_sent", ib.bytes_sent.load()).field("bytes_received", ib.bytes_received);
  j.field("total_seconds", since(t0));
  if (st->stream_opts) {
    std::vector<int> mine;
    for (int k = 0; k < st->stream_opts->shards(); ++k)
      if (st->stream_opts->consumer_of(k) == r->vw) mine.push_back(k);
    builtin::write_stream_report(j, *st->stream_opts, mine, st->stream, cfg->epochs);
  }
  j.end_object();
  svc->report_done(me, true,
                   "VW " + std::to_string(r->vw) + " stage " + std::to_string(r->stage) + ": units " +
                       std::to_string(r->first) + ".." + std::to_string(r->last) + ", " +
                       std::to_string(st->minibatches) + " minibatches in " + std::to_string(st->waves) + " waves",
                   j.str());
}

}  // namespace

void add_hp_stage(registry& reg) {
  using topology::key_spec;
  using topology::key_type;
  topology::type_spec t{"hp_stage", "one pipeline stage of a HetPipe virtual worker (strategy hetpipe)", {}};
  t.keys.push_back(key_spec{"device", key_type::integer, false, int64_t{0}, "index into its node's devices", 0.0, {}, {}});
  (void)reg.add_actor_type(t, [](caf::actor_system& sys, const actor_env& env) -> caf::actor {
    return sys.spawn(hp_stage, env);
  });
}

}  // namespace hetflow::actors::hp_job
