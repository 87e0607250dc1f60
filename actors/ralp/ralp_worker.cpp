// ralp_worker: one RALP worker of the train job (strategy "ralp"): a
// blocking actor (its own thread) around a ralp::worker_core,
//
//   hello (its clocks in all) -> welcome (the cut)
//   for each of its steps (steps j of every epoch with j % workers == rank):
//     pull (clock c) -> the lower weights into the model
//     forward units [0, cut); activations + labels -> server
//     act_grad (dL/d activations, the batch's loss) <- server
//     backward units [0, cut); push (c, lr, lower gradients)
//   worker 0: after each epoch but the last (eval_each_epoch) and at the end
//   (once every worker finished), every weight -> evaluate; bye
//
// one outstanding request at a time; every wait is bounded (ps_timeout +
// 10 s) and polls node_services::stopping(). Bytes sent and received are
// counted per message (the whole wire message).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>

#include "actors/buffer_pool.hpp"
#include "actors/builtin/job_actor.hpp"
#include "actors/builtin/stream_job.hpp"
#include "actors/json.hpp"
#include "actors/log.hpp"
#include "actors/ps/clock_gauges.hpp"
#include "actors/ps/worker_report.hpp"
#include "actors/ralp/ralp_job.hpp"
#include "actors/ralp/ralp_options.hpp"
#include "actors/ralp/ralp_protocol.hpp"
#include "actors/ralp/ralp_worker_core.hpp"
#include "kernels/trace.hpp"
#include "kernels/waits.hpp"
#include "kernels/weights_io.hpp"
#include "kernels/zoo.hpp"

namespace hetflow::actors::ralp_job {
namespace {

using clock_type = std::chrono::steady_clock;

double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

// The worker's view of the server: one outstanding request at a time.
class server_link {
public:
  server_link(caf::blocking_actor* self, std::shared_ptr<node_services> svc, std::string me, int worker,
              double timeout_s)
      : self_(self),
        svc_(std::move(svc)),
        me_(std::move(me)),
        worker_(worker),
        timeout_s_(timeout_s),
        pool_(buffer_pool::create(std::size_t{64} << 10, std::size_t{256} << 20)),
        allocate_([pool = pool_](std::size_t bytes) { return pool->allocate(bytes); }) {}

  status send(uint32_t kind, ralp::ralp_info info, std::span<const kernels::tensor_view> ts = {},
              std::span<const int32_t> labels = {}, const std::string& text = {}) {
    info.worker = worker_;
    auto msg = ralp::make_message(kind, me_, server_name, info, ts, labels, text, &allocate_);
    bytes_sent += int64_t(msg->size());
    return svc_->send_wire(server_name, std::move(msg));
  }

  expected<ralp::ralp_message> await(uint32_t kind, int64_t clock, const char* what) {
    const auto deadline = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(
                                                  std::chrono::duration<double>(timeout_s_ + 10.0));
    std::optional<ralp::ralp_message> got;
    status failure;
    const auto t0 = clock_type::now();
    std::string n = svc_->node_of(server_name);
    kernels::waits::scope open(me_, std::string("the RALP server '") + server_name + "'" + (n.empty() ? "" : " on node '" + n + "'"),
                               "its " + std::string(what) + " at clock " + std::to_string(clock),
                               kernels::waits::span{tk, "wait: server", "clock", clock});
    while (!got && failure.ok()) {
      if (svc_->stopping().load()) return make_error(errc::cancelled, me_ + ": stopped");
      if (clock_type::now() >= deadline) {
        std::string n = svc_->node_of(server_name);
        return make_error(errc::timeout, me_ + ": no answer to its " + what + " at clock " + std::to_string(clock) +
                                             " from the RALP server '" + server_name + "'" +
                                             (n.empty() ? "" : " on node '" + n + "'") + " within " +
                                             std::to_string(int(timeout_s_ + 10)) + " s");
      }
      self_->receive(
          [&](wire_atom, const std::string& node, const wire_buffer_ref& buf) {
            bytes_received += int64_t(buf->size());
            auto m = ralp::read_message(buf, svc_->read_limits(), "node '" + node + "'");
            if (!m) {
              failure = m.error();
              return;
            }
            if (m->kind == ralp::kind_error) {
              failure = make_error(errc::internal, m->text);
              return;
            }
            if (m->kind == ralp::kind_probe && m->sender == server_name) {
              // The server timing the link before it picks the cut: back
              // without the tensor (held lr ms first, the time held in
              // loss: a cold round); not the job's traffic.
              bytes_received -= int64_t(buf->size());
              ralp::ralp_info back = m->info;
              if (m->info.lr > 0 && m->info.lr <= 100) {
                const auto got_at = clock_type::now();
                std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(m->info.lr));
                back.loss = std::chrono::duration<double, std::milli>(clock_type::now() - got_at).count();
              }
              const auto before = bytes_sent;
              if (auto s = send(ralp::kind_probe, back); !s.ok()) failure = s;
              bytes_sent = before;
              return;
            }
            if (m->kind != kind || m->info.clock != clock || m->sender != server_name) {
              failure = make_error(errc::internal, me_ + ": unexpected message kind " + std::to_string(m->kind) +
                                                       " at clock " + std::to_string(m->info.clock) + " from '" +
                                                       m->sender + "' while waiting for its " + what + " at clock " +
                                                       std::to_string(clock));
              return;
            }
            got = std::move(*m);
          },
          caf::after(std::chrono::milliseconds(100)) >> [] {});
    }
    wait_seconds += since(t0);
    if (!failure.ok()) return failure;
    return std::move(*got);
  }
  int64_t bytes_sent = 0, bytes_received = 0;
  double wait_seconds = 0;
  kernels::trace::track_id tk = 0;  // the worker's trace track (0: not tracing)

private:
  caf::blocking_actor* self_;
  std::shared_ptr<node_services> svc_;
  std::string me_;
  int worker_;
  double timeout_s_;
  // The pushes and activations sent come from here and come back once
  // delivered (a fresh buffer costs a page fault per 4 KiB page).
  std::shared_ptr<buffer_pool> pool_;
  schemas::message_builder::allocator allocate_;
};

struct worker_stats {
  int64_t steps = 0, clock = 0, cut = 0;
  std::string cut_unit;
  double pull_seconds = 0, upper_wait_seconds = 0, compute_seconds = 0;
  int64_t bytes_sent = 0, bytes_received = 0, weight_bytes_received = 0;
  int64_t step_bytes = 0;  // sent + received in the training steps (not hello, evaluation, final pull)
  std::vector<kernels::epoch_report> epochs;
  uint64_t checksum = 0;
  double test_accuracy = -1;
  int64_t resumed_from = 0;  // the clock the server restored (0: from the start)
};

// This worker's own times of the model's units for the server's cost model
// (ralp_protocol.hpp, unit_times), on the job's first training rows (the
// data the steps run on: LeNet-5's max pooling takes 1.8x longer on random
// inputs). Before the hello, so the server's link probe (which starts once
// every worker said hello) and this do not share the CPUs.
expected<std::string> own_unit_times(const kernels::model_spec& spec, const kernels::train_config& c,
                                     const kernels::image_dataset& train) {
  std::optional<kernels::tensor> rows;
  if (train.size() >= c.batch_size && train.images.shape().rank() >= 1) {
    kernels::shape s = train.images.shape();
    s[0] = c.batch_size;
    rows = kernels::tensor::empty(s);
    std::memcpy(rows->f32(), train.images.f32(), std::size_t(rows->numel()) * sizeof(float));
  }
  HF_ASSIGN_OR_RETURN(kernels::model_profile prof, profile_twin(spec, c, rows ? &*rows : nullptr));
  std::vector<ralp::unit_time> units;
  for (const auto& u : prof.units) units.push_back({u.name, u.forward_s * 1e3, u.backward_s * 1e3});
  return ralp::encode_unit_times(units);
}

status install(ralp::worker_core& wc, const ralp::ralp_message& m, bool full) {
  std::vector<kernels::tensor_view> vs;
  for (std::size_t i = 0; i < m.tensors(); ++i) {
    const auto& tv = m.msg.tensor(i);
    if (tv.type != dtype::f32) return make_error(errc::wire_corrupt, "ralp weights: tensor " + std::to_string(i) + " is not f32");
    vs.emplace_back(reinterpret_cast<const float*>(tv.data.data()), kernels::shape(tv.shape));
  }
  return wc.install(vs, full);
}

expected<worker_stats> run_worker(caf::blocking_actor* self, const std::shared_ptr<node_services>& svc,
                                  const std::string& me, int w, kernels::train_config c, const ralp_options& o) {
  worker_stats st;
  HF_ASSIGN_OR_RETURN(kernels::training_data data, kernels::load_training_data(c, true, /*with_test=*/w == 0));
  HF_ASSIGN_OR_RETURN(kernels::epoch_plan plan, kernels::make_epoch_plan(data.train.size(), c.batch_size, c.drop_last,
                                                                         c.max_steps_per_epoch));
  HF_ASSIGN_OR_RETURN(auto source, kernels::make_memory_source(data.train, c));
  if (c.where.kind != kernels::device_kind::cpu)
    return make_error(errc::unsupported, me + ": strategy \"ralp\" runs on cpu devices only for now");
  HF_ASSIGN_OR_RETURN(kernels::zoo_options zo, kernels::model_options_for(c));
  HF_ASSIGN_OR_RETURN(kernels::model_spec spec, kernels::make_model_spec(c.model, zo));
  HF_ASSIGN_OR_RETURN(kernels::model m, kernels::build_model(spec, c.where, {c.threads, c.seed}));
  if (!(source->sample_shape() == m.sample_shape(0)))
    return make_error(errc::internal, me + ": the data's samples are " + source->sample_shape().to_string());
  const int W = o.workers;
  server_link link(self, svc, me, w, o.timeout_s);
  link.tk = kernels::trace::track(me);
  const kernels::trace::track_id tk = link.tk;
  kernels::trace::track_scope on_track(tk);  // the model's unit spans record here too
  ralp::ralp_info hello;
  hello.aux = worker_clocks(plan, c.epochs, w, W);
  // Where the server's cost model picks the cut and this worker is on
  // another node (whose device or CPUs may differ), it gets this worker's
  // own unit times with the hello. A failed profile leaves the server's.
  // Not on --resume with checkpoints: the cut comes from the checkpoint
  // (where there is none, the server's profile prices every worker).
  std::string unit_times;
  const bool resuming = o.resume && !o.checkpoint_dir.empty();
  const std::string server_node = svc->node_of(server_name);
  if (o.cut <= 0 && o.link_gbps <= 0 && !resuming && !server_node.empty() && server_node != svc->node_name()) {
    const auto t0 = clock_type::now();
    if (auto t = own_unit_times(spec, c, data.train)) {
      unit_times = std::move(*t);
      log_info(me + ": profiled the model's units here for the server's cost model in " +
               std::to_string(int(since(t0) * 1e3)) + " ms");
    } else {
      log_warn(me + ": profiling the model's units failed (the server's own profile prices them): " +
               t.error().message());
    }
  }
  HF_RETURN_IF_ERROR(link.send(ralp::kind_hello, hello, {}, {}, unit_times));
  HF_ASSIGN_OR_RETURN(auto welcome, link.await(ralp::kind_welcome, 0, "hello"));
  if (welcome.info.global != int64_t(m.size()))
    return make_error(errc::internal, me + ": the RALP server's model has " + std::to_string(welcome.info.global) +
                                          " units, this worker's " + std::to_string(m.size()));
  const std::size_t cut = std::size_t(welcome.info.aux);
  // > 0 when the server restored a checkpoint: this worker's clocks below it
  // are in the weights, so their steps are skipped.
  const int64_t start_clock = welcome.info.correct;
  if (start_clock < 0 || start_clock > hello.aux)
    return make_error(errc::internal, me + ": the RALP server says to start at clock " + std::to_string(start_clock) +
                                          " of " + std::to_string(hello.aux));
  st.resumed_from = start_clock;
  st.cut = int64_t(cut);
  st.cut_unit = cut < m.size() ? m.at(cut).name() : std::string("(no cut)");
  HF_ASSIGN_OR_RETURN(ralp::worker_core wc, ralp::worker_core::make(std::move(m), cut));
  const int64_t eval_batch = c.eval_batch_size > 0 ? c.eval_batch_size : c.batch_size;
  auto pull_all = [&](int64_t clock, int32_t flags) -> status {
    ralp::ralp_info info;
    info.clock = clock;
    info.flags = flags | ralp::flag_full;
    HF_RETURN_IF_ERROR(link.send(ralp::kind_pull, info));
    HF_ASSIGN_OR_RETURN(auto weights, link.await(ralp::kind_weights, clock, "pull of every weight"));
    return install(wc, weights, true);
  };

  const int64_t steps = plan.steps;
  expected<worker_stats> result = make_error(errc::internal, "did not run");
  wc.model().context().run([&] { result = [&]() -> expected<worker_stats> {
  std::vector<kernels::tensor_view> grads;
  int64_t clock = 0;
  bool pull_sent = false;  // the last push carried the pull of `clock`
  for (int epoch = 0; epoch < c.epochs; ++epoch) {
    HF_RETURN_IF_ERROR(source->begin_epoch(epoch));
    kernels::epoch_report er;
    er.epoch = epoch + 1;
    double loss_sum = 0;
    int64_t correct = 0, my_steps = 0;
    auto t0 = clock_type::now();
    for (int64_t s = w; s < steps; s += W) {
      if (clock < start_clock) {  // resumed past this step (memory input: nothing to take)
        ++clock;
        continue;
      }
      if (svc->stopping().load()) return make_error(errc::cancelled, me + ": stopped");
      kernels::trace::scope t_step("step", tk, "clock", clock);
      HF_ASSIGN_OR_RETURN(kernels::train_batch batch, source->next(epoch, s));
      const int64_t bytes_before = link.bytes_sent + link.bytes_received;
      auto tp = clock_type::now();
      kernels::trace::scope t_pull("pull", tk, "clock", clock);
      if (!pull_sent) {  // else the last push asked for this clock's weights
        ralp::ralp_info pull;
        pull.clock = clock;
        HF_RETURN_IF_ERROR(link.send(ralp::kind_pull, pull));
      }
      pull_sent = false;
      HF_ASSIGN_OR_RETURN(auto weights, link.await(ralp::kind_weights, clock, "pull"));
      st.weight_bytes_received += int64_t(weights.msg.buffer()->size());
      HF_RETURN_IF_ERROR(install(wc, weights, false));
      t_pull.end();
      st.pull_seconds += since(tp);
      er.lr = kernels::lr_at(c.schedule, c.optimizer.lr, epoch, s, steps, c.epochs);
      auto tc = clock_type::now();
      kernels::loss_result lr_res;
      if (wc.has_upper()) {
        kernels::trace::scope t_fwd("lower forward", tk, "clock", clock);
        HF_ASSIGN_OR_RETURN(kernels::tensor_view act, wc.forward_lower(batch.images));
        t_fwd.end();
        ralp::ralp_info info;
        info.clock = clock;
        info.lr = er.lr;
        std::vector<kernels::tensor_view> ts{act};
        HF_RETURN_IF_ERROR(link.send(ralp::kind_activations, info, ts, batch.labels));
        const double before = link.wait_seconds;
        HF_ASSIGN_OR_RETURN(auto g, link.await(ralp::kind_act_grad, clock, "activation gradient"));
        st.upper_wait_seconds += link.wait_seconds - before;
        if (g.tensors() != 1 || g.msg.tensor(0).type != dtype::f32 ||
            g.msg.tensor(0).data.size() != act.byte_size())
          return make_error(errc::internal, me + ": the RALP server's activation gradient at clock " +
                                                std::to_string(clock) + " does not fit its activations " +
                                                act.shape().to_string());
        const auto& tv = g.msg.tensor(0);
        kernels::trace::scope t_bwd("lower backward", tk, "clock", clock);
        HF_RETURN_IF_ERROR(wc.backward_lower(
            kernels::tensor_view(reinterpret_cast<const float*>(tv.data.data()), act.shape())));
        lr_res.loss = g.info.loss;
        lr_res.correct = g.info.correct;
      } else {
        kernels::trace::scope t_whole("forward+backward", tk, "clock", clock);
        HF_ASSIGN_OR_RETURN(lr_res, wc.train_whole(batch.images, batch.labels));
      }
      if (!std::isfinite(lr_res.loss))
        return make_error(errc::internal, me + ": loss became " + std::to_string(lr_res.loss) + " at epoch " +
                                              std::to_string(epoch + 1) + " step " + std::to_string(s + 1) +
                                              "; lower the learning rate");
      grads.clear();
      for (auto* p : wc.lower_params()) grads.push_back(p->grad.view());
      ralp::ralp_info push;
      push.clock = clock;
      push.lr = er.lr;
      // The next step's pull rides on the push when that step is in this
      // epoch (its clock is clock + 1); an epoch's first step pulls on its
      // own, after any evaluation's pull of every weight.
      if (s + W < steps) push.flags = ralp::flag_pull_next;
      kernels::trace::scope t_push("push", tk, "clock", clock);
      HF_RETURN_IF_ERROR(link.send(ralp::kind_push, push, grads));
      pull_sent = (push.flags & ralp::flag_pull_next) != 0;
      t_push.end();
      st.compute_seconds += since(tc);
      st.step_bytes += link.bytes_sent + link.bytes_received - bytes_before;
      ++clock;
      ++st.steps;
      kernels::waits::progress();
      ps::publish_worker_clock(me, clock);
      ++my_steps;
      loss_sum += lr_res.loss;
      correct += lr_res.correct;
      er.samples += int64_t(batch.labels.size());
      if (w == 0 && c.progress_every > 0 && my_steps % (c.progress_every * 5) == 0) {
        char line[200];
        std::snprintf(line, sizeof line, "epoch %d/%d step %lld/%lld | loss %.4f", epoch + 1, c.epochs,
                      static_cast<long long>(s + 1), static_cast<long long>(steps), loss_sum / double(my_steps));
        log_info(line);
      }
    }
    HF_RETURN_IF_ERROR(source->end_epoch(epoch));
    if (my_steps == 0) continue;
    er.train_seconds = since(t0);
    er.loss = loss_sum / double(my_steps);
    er.train_accuracy = er.samples > 0 ? double(correct) / double(er.samples) : 0;
    er.samples_per_s = er.train_seconds > 0 ? double(er.samples) / er.train_seconds : 0;
    // Worker 0: every weight once every worker pushed the epoch's clocks below its clock.
    if (w == 0 && c.eval_each_epoch && epoch + 1 < c.epochs) {
      HF_RETURN_IF_ERROR(pull_all(clock, 0));
      HF_RETURN_IF_ERROR(ps_job::evaluate_into(wc.model(), data.test, eval_batch, er));
    }
    st.epochs.push_back(er);
    if (w == 0) ps_job::log_epoch_done(er, c.epochs);
  }
  st.clock = clock;
  if (w == 0) {
    HF_RETURN_IF_ERROR(pull_all(clock, ralp::flag_final));
    HF_ASSIGN_OR_RETURN(st.checksum, kernels::weights_checksum(wc.model()));
    kernels::epoch_report fin;
    HF_RETURN_IF_ERROR(ps_job::evaluate_into(wc.model(), data.test, eval_batch, fin));
    st.test_accuracy = fin.test_accuracy;
    if (!st.epochs.empty() && st.epochs.back().epoch == c.epochs) {
      st.epochs.back().test_accuracy = fin.test_accuracy;
      st.epochs.back().test_logloss = fin.test_logloss;
      st.epochs.back().test_auc = fin.test_auc;
    }
    log_info("final weights (every worker finished): test accuracy " + ps_job::metrics_text(fin));
    if (!c.save_weights.empty()) HF_RETURN_IF_ERROR(kernels::save_weights(wc.model(), c.save_weights));
    ralp::ralp_info bye;
    bye.clock = clock;
    HF_RETURN_IF_ERROR(link.send(ralp::kind_bye, bye));
  }
  st.bytes_sent = link.bytes_sent;
  st.bytes_received = link.bytes_received;
  return st;
  }(); });
  return result;
}

void ralp_worker(caf::blocking_actor* self, actor_env env) {
  auto svc = env.services;
  const std::string me = env.spec.name;
  if (!builtin::await_start(self, *svc)) return;
  const int w = int(env.spec.args.get_int("rank", 0));
  auto cfg = builtin::train_config_of(env.cluster, env.spec.node, std::size_t(env.spec.args.get_int("device", 0)));
  if (!cfg) return svc->report_done(me, false, cfg.error().message(), {});
  auto opts = options_of(env.cluster);
  if (!opts) return svc->report_done(me, false, opts.error().message(), {});
  if (w == 0)
    log_info("RALP: " + std::to_string(opts->workers) + " worker(s), server on node '" + opts->server_node +
             "', batch " + std::to_string(cfg->batch_size) + " per worker, " + cfg->model + " for " +
             std::to_string(cfg->epochs) + " epochs");
  auto t0 = clock_type::now();
  expected<worker_stats> r = run_worker(self, svc, me, w, *cfg, *opts);
  if (!r) return svc->report_done(me, false, r.error().to_string(), {});
  json_writer j;
  j.begin_object().field("model", cfg->model).field("device", cfg->where.to_string());
  j.field("strategy", "ralp").field("rank", int64_t{w}).field("workers", int64_t{opts->workers});
  j.field("cut", r->cut).field("cut_unit", r->cut_unit);
  j.field("steps", r->steps).field("clock", r->clock).field("resumed_from", r->resumed_from);
  j.field("pull_seconds", r->pull_seconds).field("upper_wait_seconds", r->upper_wait_seconds);
  j.field("compute_seconds", r->compute_seconds);
  j.field("bytes_sent", r->bytes_sent).field("bytes_received", r->bytes_received);
  j.field("step_bytes", r->step_bytes);
  j.field("bytes_per_step", r->steps > 0 ? double(r->step_bytes) / double(r->steps) : 0.0);
  j.field("total_seconds", since(t0));
  if (w == 0) j.field("weights_checksum", ps_job::hex64(r->checksum));
  ps_job::write_epochs(j, r->epochs);
  j.end_object();
  std::string summary = std::to_string(r->steps) + " steps, cut before unit " + std::to_string(r->cut);
  if (w == 0 && r->test_accuracy >= 0) summary += ", test accuracy " + std::to_string(r->test_accuracy).substr(0, 6);
  svc->report_done(me, true, summary, j.str());
}

}  // namespace

void add_ralp_worker(registry& reg) {
  using topology::key_spec;
  using topology::key_type;
  topology::type_spec w{"ralp_worker", "one RALP worker of the train job (strategy ralp)", {}};
  w.keys.push_back(key_spec{"rank", key_type::integer, false, int64_t{0}, "worker index", 0.0, {}, {}});
  w.keys.push_back(key_spec{"device", key_type::integer, false, int64_t{0}, "index into its node's devices", 0.0, {}, {}});
  (void)reg.add_actor_type(w, [](caf::actor_system& sys, const actor_env& env) -> caf::actor {
    return sys.spawn(ralp_worker, env);
  });
}

}  // namespace hetflow::actors::ralp_job
