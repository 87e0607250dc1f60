// ps_worker (ps_worker.hpp).
#include <cmath>
#include <cstdio>
#include <thread>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <numeric>
#include <optional>

#include "actors/builtin/job_actor.hpp"
#include "actors/builtin/stream_job.hpp"
#include "actors/json.hpp"
#include "actors/log.hpp"
#include "actors/ps/clock_gauges.hpp"
#include "actors/ps/ps_options.hpp"
#include "actors/ps/ps_protocol.hpp"
#include "actors/ps/ps_checkpoint.hpp"
#include "actors/ps/ps_worker.hpp"
#include "actors/ps/worker_report.hpp"
#include "kernels/loss.hpp"
#include "kernels/trace.hpp"
#include "kernels/waits.hpp"
#include "kernels/weights_io.hpp"

namespace hetflow::actors::ps_job {
namespace {

using clock_type = std::chrono::steady_clock;

double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }


// ---------------------------------------------------------------- ps_worker

// The worker's view of the shards: one outstanding request at a time.
//
// With input = "stream" the worker's mailbox also receives its stream
// shards' batches, at any time (up to prefetch per shard in flight): a
// batch met while awaiting PS replies goes to `divert` (the stream source
// buffers it), and a PS message met while the source waits for a batch is
// queued in `early` and read first by the next await().
class shard_link {
public:
  shard_link(caf::blocking_actor* self, std::shared_ptr<node_services> svc, std::string me, int worker, int shards,
             double timeout_s)
      : self_(self), svc_(std::move(svc)), me_(std::move(me)), worker_(worker), shards_(shards),
        timeout_s_(timeout_s) {}

  status send_all(uint32_t kind, ps::ps_info info) {
    info.worker = worker_;
    for (int k = 0; k < shards_; ++k) {
      info.shard = k;
      auto msg = ps::make_control(kind, me_, shard_name(k), info);
      bytes_sent += int64_t(msg->size());
      HF_RETURN_IF_ERROR(svc_->send_wire(shard_name(k), std::move(msg)));
    }
    return {};
  }
  status send(int k, wire_buffer_ref msg) {
    bytes_sent += int64_t(msg->size());
    return svc_->send_wire(shard_name(k), std::move(msg));
  }
  int64_t bytes_sent = 0, bytes_received = 0;
  // Input "stream": true when it took the message (a stream batch).
  std::function<bool(const std::string&, const wire_buffer_ref&)> divert;
  std::deque<std::pair<std::string, wire_buffer_ref>> early;

  // One answer of kind `kind` for `clock` from every shard, indexed by shard.
  expected<std::vector<ps::ps_message>> await(uint32_t kind, int64_t clock, const char* what) {
    std::vector<ps::ps_message> out(static_cast<std::size_t>(shards_));
    std::vector<bool> got(std::size_t(shards_), false);
    int count = 0;
    status failure;
    const auto deadline = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(
                                                  std::chrono::duration<double>(timeout_s_ + 10.0));
    auto on_wire = [&](const std::string& node, const wire_buffer_ref& buf) {
      if (divert && divert(node, buf)) return;
      bytes_received += int64_t(buf->size());
      auto m = ps::read_ps_message(buf, svc_->read_limits(), "node '" + node + "'");
      if (!m) {
        failure = m.error();
        return;
      }
      if (m->kind == ps::kind_error) {
        failure = make_error(errc::internal, m->text);
        return;
      }
      const int k = m->info.shard;
      if (m->kind != kind || m->info.clock != clock || k < 0 || k >= shards_ || got[std::size_t(k)] ||
          m->sender != shard_name(k)) {
        failure = make_error(errc::internal, me_ + ": unexpected message kind " + std::to_string(m->kind) +
                                                 " at clock " + std::to_string(m->info.clock) + " from '" +
                                                 m->sender + "' while waiting for its " + what + " at clock " +
                                                 std::to_string(clock));
        return;
      }
      got[std::size_t(k)] = true;
      ++count;
      out[std::size_t(k)] = std::move(*m);
    };
    while (!early.empty() && failure.ok()) {
      auto [node, buf] = std::move(early.front());
      early.pop_front();
      on_wire(node, buf);
    }
    if (!failure.ok()) return failure;
    while (count < shards_) {
      if (svc_->stopping().load()) return make_error(errc::cancelled, me_ + ": stopped");
      if (clock_type::now() >= deadline) {
        std::string missing;
        for (int k = 0; k < shards_; ++k)
          if (!got[std::size_t(k)]) {
            std::string n = svc_->node_of(shard_name(k));
            missing += (missing.empty() ? "" : ", ") + ("'" + shard_name(k) + "'") + (n.empty() ? "" : " on node '" + n + "'");
          }
        return make_error(errc::timeout, me_ + ": no answer to its " + what + " at clock " + std::to_string(clock) +
                                             " from PS shard " + missing + " within " +
                                             std::to_string(int(timeout_s_ + 10)) + " s");
      }
      self_->receive([&](wire_atom, const std::string& node, const wire_buffer_ref& buf) { on_wire(node, buf); },
                     caf::after(std::chrono::milliseconds(100)) >> [] {});
      if (!failure.ok()) return failure;
    }
    return out;
  }

private:
  caf::blocking_actor* self_;
  std::shared_ptr<node_services> svc_;
  std::string me_;
  int worker_, shards_;
  double timeout_s_;
};

struct worker_stats {
  int64_t steps = 0, start_clock = 0, clock = 0, max_staleness = 0, staleness_sum = 0, pulls = 0;
  double pull_seconds = 0, compute_seconds = 0;
  int64_t resumed_from = -1;
  int64_t bytes_sent = 0, bytes_received = 0, rows_pulled = 0;
  std::vector<kernels::epoch_report> epochs;
  uint64_t checksum = 0;
  double test_accuracy = -1;
  builtin::stream_stats stream;  // input = "stream"
};

// The model's sparse parameters (embedding tables) as the PS worker sees
// them: which columns of the input hold each table's row ids. Only DLRM's
// tables (a dlrm_interaction first unit) are sparse in the zoo.
struct sparse_view {
  std::vector<int> tensor;       // per table: its index in m.parameters()
  std::vector<int64_t> rows;     // per table: its rows
  int64_t first_column = 0;      // table t's ids are in input column first_column + t
};

expected<sparse_view> sparse_view_of(kernels::model& m) {
  sparse_view v;
  auto params = m.parameters();
  for (std::size_t i = 0; i < params.size(); ++i)
    if (params[i]->sparse) {
      v.tensor.push_back(int(i));
      v.rows.push_back(params[i]->value.shape()[0]);
    }
  if (v.tensor.empty()) return v;
  const auto& layers = m.spec().layers;
  if (layers.empty() || layers.front().kind != kernels::layer_kind::dlrm_interaction ||
      layers.front().dlrm.table_rows.size() != v.tensor.size())
    return make_error(errc::unsupported, "strategy \"ps\": model " + m.name() +
                                             " has sparse parameters outside a first dlrm unit, whose rows a PS "
                                             "worker cannot know before the forward pass");
  v.first_column = layers.front().dlrm.dense_features;
  return v;
}

// Per table: the distinct rows a forward over `input` reads, ascending.
expected<std::vector<std::vector<int64_t>>> rows_read(const sparse_view& v, kernels::tensor_view input) {
  std::vector<std::vector<int64_t>> out(v.tensor.size());
  const int64_t n = input.shape()[0], cols = input.shape().inner_numel();
  const float* x = input.f32();
  for (std::size_t t = 0; t < out.size(); ++t) {
    auto& r = out[t];
    r.resize(std::size_t(n));
    const int64_t col = v.first_column + int64_t(t);
    if (col >= cols) return make_error(errc::invalid_argument, "input has no column for table " + std::to_string(t));
    for (int64_t s = 0; s < n; ++s) {
      const float f = x[s * cols + col];
      if (!(f >= 0.0f && f < float(v.rows[t]) && f == std::floor(f)))
        return make_error(errc::invalid_argument, "sample " + std::to_string(s) + " has id " + std::to_string(f) +
                                                      " for table " + std::to_string(t) + " of " +
                                                      std::to_string(v.rows[t]) + " rows");
      r[std::size_t(s)] = int64_t(f);
    }
    std::sort(r.begin(), r.end());
    r.erase(std::unique(r.begin(), r.end()), r.end());
  }
  return out;
}

// Per shard, per piece: the piece-local rows of `want` (per table, global
// rows ascending) that the piece holds; `all`: every row.
std::vector<std::vector<ps::row_request>> requests_of(const ps::placement& pl, const sparse_view& v,
                                                      const std::vector<std::vector<int64_t>>* want) {
  std::vector<std::vector<ps::row_request>> out(pl.pieces_of.size());
  for (std::size_t k = 0; k < pl.pieces_of.size(); ++k)
    for (const auto& pc : pl.pieces_of[k]) {
      ps::row_request r;
      if (!want) {
        r.all = true;
      } else {
        const auto t = std::size_t(std::find(v.tensor.begin(), v.tensor.end(), pc.tensor) - v.tensor.begin());
        const auto& rows = (*want)[t];
        auto lo = std::lower_bound(rows.begin(), rows.end(), pc.row_begin);
        auto hi = std::lower_bound(lo, rows.end(), pc.row_end);
        for (auto it = lo; it != hi; ++it) r.rows.push_back(*it - pc.row_begin);
      }
      out[k].push_back(std::move(r));
    }
  return out;
}

// Copies the shards' weights into the model: the dense tensors whole, the
// table rows each shard sent for the rows `asked` of it.
status install(kernels::model& m, const ps::placement& pl, const std::vector<ps::ps_message>& replies,
               const std::vector<std::vector<ps::row_request>>& asked, int64_t& rows_installed) {
  auto params = m.parameters();
  for (std::size_t k = 0; k < replies.size(); ++k) {
    const auto& idx = pl.tensors_of[k];
    const auto& pieces = pl.pieces_of[k];
    const auto& reply = replies[k];
    const auto& msg = reply.msg;
    if (reply.tensors != idx.size() + pieces.size())
      return make_error(errc::internal, "PS shard '" + shard_name(int(k)) + "' sent " +
                                            std::to_string(reply.tensors) + " tensors, its placement has " +
                                            std::to_string(idx.size() + pieces.size()));
    for (std::size_t j = 0; j < idx.size(); ++j) {
      auto* p = params[std::size_t(idx[j])];
      const auto& tv = msg.tensor(j);
      if (tv.type != dtype::f32 || tv.data.size() != p->value.byte_size())
        return make_error(errc::internal, "PS shard '" + shard_name(int(k)) + "' sent " + std::to_string(tv.data.size()) +
                                              " bytes for " + p->name);
      std::memcpy(p->value.f32(), tv.data.data(), tv.data.size());
      ++p->version;
    }
    for (std::size_t j = 0; j < pieces.size(); ++j) {
      const auto& pc = pieces[j];
      auto* p = params[std::size_t(pc.tensor)];
      const int64_t dim = p->value.shape().inner_numel();
      const auto& req = asked[k][j];
      const int64_t n = req.all ? pc.rows() : int64_t(req.rows.size());
      const auto& tv = msg.tensor(idx.size() + j);
      if (tv.type != dtype::f32 || tv.data.size() != std::size_t(n * dim) * sizeof(float))
        return make_error(errc::internal, "PS shard '" + shard_name(int(k)) + "' sent " + std::to_string(tv.data.size()) +
                                              " bytes for " + std::to_string(n) + " rows of " + p->name);
      float* table = p->value.f32();
      const auto* src = reinterpret_cast<const float*>(tv.data.data());
      if (req.all) {
        if (n > 0) std::memcpy(table + pc.row_begin * dim, src, tv.data.size());
      } else {
        for (int64_t i = 0; i < n; ++i)
          std::memcpy(table + (pc.row_begin + req.rows[std::size_t(i)]) * dim, src + i * dim,
                      std::size_t(dim) * sizeof(float));
      }
      rows_installed += n;
      ++p->version;
    }
  }
  return {};
}

// Shard k's part of a step's gradients: its dense tensors' gradients, then
// for each of its pieces the touched rows (piece-local, ascending) and
// their gradient rows; one push message.
wire_buffer_ref push_message(kernels::model& m, const ps::placement& pl, int k, const ps::ps_info& info,
                             const std::string& me, const std::vector<std::vector<int64_t>>& order) {
  auto params = m.parameters();
  std::vector<const kernels::tensor*> ts;
  for (int i : pl.tensors_of[std::size_t(k)]) ts.push_back(&params[std::size_t(i)]->grad);
  const auto& pieces = pl.pieces_of[std::size_t(k)];
  if (pieces.empty()) return ps::make_tensors(ps::kind_push, me, shard_name(k), info, ts);
  std::vector<kernels::tensor> values;
  values.reserve(pieces.size());
  std::vector<ps::row_request> rows(pieces.size());
  for (std::size_t j = 0; j < pieces.size(); ++j) {
    const auto& pc = pieces[j];
    const auto* p = params[std::size_t(pc.tensor)];
    const auto& g = p->sparse_grad;
    const int64_t dim = p->value.shape().inner_numel();
    // order[tensor]: indices into g.rows by ascending row.
    const auto& ord = order[std::size_t(pc.tensor)];
    auto lo = std::lower_bound(ord.begin(), ord.end(), pc.row_begin,
                               [&](int64_t i, int64_t r) { return g.rows[std::size_t(i)] < r; });
    auto hi = std::lower_bound(lo, ord.end(), pc.row_end,
                               [&](int64_t i, int64_t r) { return g.rows[std::size_t(i)] < r; });
    kernels::tensor v = kernels::tensor::empty({int64_t(hi - lo), dim});
    int64_t at = 0;
    for (auto it = lo; it != hi; ++it, ++at) {
      rows[j].rows.push_back(g.rows[std::size_t(*it)] - pc.row_begin);
      std::memcpy(v.f32() + at * dim, g.values.f32() + *it * dim, std::size_t(dim) * sizeof(float));
    }
    values.push_back(std::move(v));
  }
  for (auto& v : values) ts.push_back(&v);
  ps::ps_info with_rows = info;
  with_rows.flags |= ps::flag_rows;
  const auto list = ps::encode_rows(rows);
  return ps::make_tensors(ps::kind_push, me, shard_name(k), with_rows, ts, list);
}

// `so`: the stream options with input = "stream", null for "memory".
expected<worker_stats> run_worker(caf::blocking_actor* self, const std::shared_ptr<node_services>& svc,
                                  const std::string& me, int w, kernels::train_config c, const ps_options& o,
                                  const builtin::stream_options* so) {
  worker_stats st;
  namespace trace = kernels::trace;
  // The loop runs inside the model's device context (maybe another thread):
  // spans name their track explicitly.
  const trace::track_id tk = trace::track(me);
  shard_link link(self, svc, me, w, o.shards, o.timeout_s);
  // The batches: from memory (the whole training set loaded here), or from
  // this worker's stream shards, which build exactly the batches of its
  // steps that memory would give it (same plan, same epoch order).
  kernels::training_data data;  // memory: the training set (the source views it)
  kernels::image_dataset test;  // worker 0: the test set
  std::unique_ptr<kernels::batch_source> source;
  kernels::epoch_plan plan;
  if (so == nullptr) {
    HF_ASSIGN_OR_RETURN(data, kernels::load_training_data(c, true, /*with_test=*/w == 0));
    HF_ASSIGN_OR_RETURN(plan, kernels::make_epoch_plan(data.train.size(), c.batch_size, c.drop_last,
                                                       c.max_steps_per_epoch));
    HF_ASSIGN_OR_RETURN(source, kernels::make_memory_source(data.train, c));
    test = std::move(data.test);
  } else {
    HF_ASSIGN_OR_RETURN(builtin::stream_trainer_data sd, builtin::load_stream_trainer_data(c, /*with_test=*/w == 0));
    HF_ASSIGN_OR_RETURN(plan, kernels::make_epoch_plan(sd.train_rows, c.batch_size, c.drop_last, c.max_steps_per_epoch));
    st.stream.input_json = sd.input_json;
    st.stream.input_key = sd.input_key;
    test = std::move(sd.test);
    auto src = builtin::make_stream_source(
        self, svc, me, *so, plan, sd.sample, sd.classes, c.seed, &st.stream, w,
        [&link](const std::string& node, const wire_buffer_ref& buf) { link.early.emplace_back(node, buf); });
    link.divert = [s = src.get()](const std::string& node, const wire_buffer_ref& buf) { return s->offer(node, buf); };
    source = std::move(src);
  }
  if (c.where.kind != kernels::device_kind::cpu)
    return make_error(errc::unsupported, me + ": strategy \"ps\" runs on cpu devices only for now");
  HF_ASSIGN_OR_RETURN(kernels::model m, build_model_for(c, c.where, c.threads));
  if (!(source->sample_shape() == m.sample_shape(0)))
    return make_error(errc::internal, me + ": the data's samples are " + source->sample_shape().to_string());
  const ps::placement pl = placement_of(m, o.shards);
  HF_ASSIGN_OR_RETURN(const sparse_view sv, sparse_view_of(m));
  const bool sparse = !sv.tensor.empty();
  // A pull: every shard gets its list of rows (sparse models) and answers
  // with its dense tensors and those rows.
  auto pull_from_all = [&](ps::ps_info info, const std::vector<std::vector<ps::row_request>>& asked) -> status {
    if (!sparse) return link.send_all(ps::kind_pull, info);
    info.worker = w;
    info.flags |= ps::flag_rows;
    for (int k = 0; k < o.shards; ++k) {
      info.shard = k;
      const auto list = ps::encode_rows(asked[std::size_t(k)]);
      HF_RETURN_IF_ERROR(link.send(k, ps::make_control(ps::kind_pull, me, shard_name(k), info, list)));
    }
    return {};
  };
  const auto all_rows = requests_of(pl, sv, nullptr);
  const int W = o.workers;
  // Pushes go to the shards on other nodes first: a shard on this node
  // handles its push at once, on this node's cores, and held the remote
  // pushes back by up to 0.45 ms on a one-core node (traced).
  std::vector<int> push_order;
  for (int pass = 0; pass < 2; ++pass)
    for (int sh = 0; sh < o.shards; ++sh)
      if ((o.shard_nodes[std::size_t(sh)] == svc->node_name()) == (pass == 1)) push_order.push_back(sh);

  if (o.resume) {
    HF_RETURN_IF_ERROR(link.send_all(ps::kind_hello, {}));
    HF_ASSIGN_OR_RETURN(auto lists, link.await(ps::kind_checkpoints, 0, "checkpoint query"));
    std::vector<std::vector<int64_t>> labels;
    for (auto& l : lists) labels.push_back(l.list);
    const int64_t label = ps::newest_common_label(labels);
    if (label < 0) {
      if (w == 0) log_warn("--resume: no checkpoint is complete on every PS shard in " + o.checkpoint_dir + "; starting from scratch");
    } else {
      ps::ps_info info;
      info.clock = label;
      HF_RETURN_IF_ERROR(link.send_all(ps::kind_restore, info));
      HF_ASSIGN_OR_RETURN(auto restored, link.await(ps::kind_restored, label, "restore"));
      for (auto& r : restored)
        if (int(r.list.size()) != W || r.list[std::size_t(w)] != restored[0].list[std::size_t(w)])
          return make_error(errc::internal, me + ": the shards restored different clocks for it");
      st.start_clock = restored[0].list[std::size_t(w)];
      st.resumed_from = label;
      log_info(me + ": resuming from checkpoint " + std::to_string(label) + " at clock " +
               std::to_string(st.start_clock));
    }
  }

  const int64_t steps = plan.steps;
  expected<worker_stats> result = make_error(errc::internal, "did not run");
  // The training loop runs inside the model's device context (its threads).
  m.context().run([&] { result = [&]() -> expected<worker_stats> {
  kernels::tensor grad;
  int64_t clock = 0, k = 0;
  // The previous push carried this step's pull (flag_pull_next).
  bool pulled_ahead = false;
  for (int epoch = 0; epoch < c.epochs; ++epoch) {
    HF_RETURN_IF_ERROR(source->begin_epoch(epoch));
    kernels::epoch_report er;
    er.epoch = epoch + 1;
    double loss_sum = 0;
    int64_t correct = 0, my_steps = 0;
    auto t0 = clock_type::now();
    for (int64_t s = w; s < steps; s += W, ++k) {
      if (k < st.start_clock) {
        // Resumed past this step. The stream shards replay every step from
        // the start, so take (and drop) its batch: the books stay whole.
        // TODO(perf): tell the shards the start clock instead.
        if (so != nullptr) {
          auto skipped = source->next(epoch, s);
          if (!skipped) return skipped.error();
        }
        clock = k + 1;
        continue;
      }
      if (svc->stopping().load()) return make_error(errc::cancelled, me + ": stopped");
      if (w == o.drill_worker && clock == o.drill_clock && o.drill_delay_s > 0) {
        log_warn(me + ": fault drill: sleeping " + std::to_string(o.drill_delay_s) + " s before clock " +
                 std::to_string(clock));
        auto until = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(
                                             std::chrono::duration<double>(o.drill_delay_s));
        while (clock_type::now() < until && !svc->stopping().load())
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      // The batch first: a sparse model pulls only the table rows it reads.
      // Streamed input: the wait for the batch shows inside ("wait: batch").
      trace::scope t_batch("batch", tk, "clock", clock);
      HF_ASSIGN_OR_RETURN(kernels::train_batch batch, source->next(epoch, s));
      t_batch.end();
      auto tp = clock_type::now();
      trace::scope t_pull("pull", tk, "clock", clock);
      ps::ps_info pull;
      pull.clock = clock;
      // Worker 0 evaluates after an epoch's last step: it then needs every row.
      const bool eval_after = w == 0 && c.eval_each_epoch && epoch + 1 < c.epochs && s + W >= steps;
      std::vector<std::vector<ps::row_request>> asked;
      if (sparse) {
        if (eval_after) {
          asked = all_rows;
        } else {
          auto want = rows_read(sv, batch.images);
          if (!want) return make_error(errc::invalid_argument, me + ": epoch " + std::to_string(epoch + 1) + " step " +
                                                                   std::to_string(s + 1) + ": " + want.error().message());
          asked = requests_of(pl, sv, &*want);
        }
      }
      if (pulled_ahead)
        pulled_ahead = false;
      else
        HF_RETURN_IF_ERROR(pull_from_all(pull, asked));
      // The shards answer once their clock allows (SSP): waiting here is
      // waiting on the slowest worker.
      kernels::waits::scope w_pull(me, "the ps shards",
                                   "the weights of clock " + std::to_string(clock) +
                                       " (a shard answers once the slowest worker's clock allows)",
                                   kernels::waits::span{tk, "wait: pull/clock", "clock", clock});
      HF_ASSIGN_OR_RETURN(auto replies, link.await(ps::kind_weights, clock, "pull"));
      w_pull.end();
      HF_RETURN_IF_ERROR(install(m, pl, replies, asked, st.rows_pulled));
      t_pull.end();
      int64_t g = ps::infinite_clock;
      for (auto& r : replies) g = std::min(g, r.info.global);
      const int64_t lag = g == ps::infinite_clock ? 0 : std::max<int64_t>(0, clock - g);
      st.max_staleness = std::max(st.max_staleness, lag);
      st.staleness_sum += lag;
      ++st.pulls;
      st.pull_seconds += since(tp);
      auto tc = clock_type::now();
      trace::scope t_fb("forward+backward", tk, "clock", clock);
      HF_ASSIGN_OR_RETURN(kernels::tensor_view logits, m.forward(batch.images, kernels::mode::train));
      if (grad.empty()) grad = kernels::tensor::empty(logits.shape());
      grad.resize(logits.shape());
      HF_ASSIGN_OR_RETURN(kernels::loss_result lr_res,
                          kernels::softmax_cross_entropy(logits, batch.labels, grad.mutable_view()));
      HF_RETURN_IF_ERROR(m.backward(grad.view()).error());
      t_fb.end();
      if (!std::isfinite(lr_res.loss))
        return make_error(errc::internal, me + ": loss became " + std::to_string(lr_res.loss) + " at epoch " +
                                              std::to_string(epoch + 1) + " step " + std::to_string(s + 1) +
                                              "; lower the learning rate");
      er.lr = kernels::lr_at(c.schedule, c.optimizer.lr, epoch, s, steps, c.epochs);
      auto params = m.parameters();
      // Per sparse tensor: its gradient's entries by ascending row.
      std::vector<std::vector<int64_t>> order(params.size());
      for (int i : sv.tensor) {
        const auto& g = params[std::size_t(i)]->sparse_grad;
        auto& ord = order[std::size_t(i)];
        ord.resize(g.rows.size());
        std::iota(ord.begin(), ord.end(), int64_t{0});
        std::sort(ord.begin(), ord.end(), [&](int64_t a, int64_t b) { return g.rows[std::size_t(a)] < g.rows[std::size_t(b)]; });
      }
      trace::scope t_push("push", tk, "clock", clock);
      // A dense model's next pull asks for nothing but its clock: it rides
      // on this push (flag_pull_next), so each shard has it with the push
      // and answers as soon as its clock allows. A sparse model's lists the
      // rows of a batch not read yet.
      const bool next_step = s + W < steps || (epoch + 1 < c.epochs && w < steps);
      pulled_ahead = !sparse && next_step;
      for (int sh : push_order) {
        ps::ps_info push;
        push.worker = w;
        push.shard = sh;
        push.clock = clock;
        push.lr = er.lr;
        if (pulled_ahead) push.flags |= ps::flag_pull_next;
        HF_RETURN_IF_ERROR(link.send(sh, push_message(m, pl, sh, push, me, order)));
      }
      t_push.end();
      kernels::waits::progress();
      st.compute_seconds += since(tc);
      ++clock;
      ps::publish_worker_clock(me, clock);
      ++st.steps;
      ++my_steps;
      loss_sum += lr_res.loss;
      correct += lr_res.correct;
      er.samples += int64_t(batch.labels.size());
      if (w == 0 && c.progress_every > 0 && my_steps % c.progress_every == 0 && my_steps % (c.progress_every * 5) == 0) {
        char line[200];
        std::snprintf(line, sizeof line, "epoch %d/%d step %lld/%lld | loss %.4f | staleness max %lld", epoch + 1,
                      c.epochs, static_cast<long long>(s + 1), static_cast<long long>(steps),
                      loss_sum / double(my_steps), static_cast<long long>(st.max_staleness));
        log_info(line);
      }
    }
    HF_RETURN_IF_ERROR(source->end_epoch(epoch));
    if (my_steps == 0) continue;  // resumed past this epoch
    er.train_seconds = since(t0);
    er.loss = loss_sum / double(my_steps);
    er.train_accuracy = er.samples > 0 ? double(correct) / double(er.samples) : 0;
    er.samples_per_s = er.train_seconds > 0 ? double(er.samples) / er.train_seconds : 0;
    // Worker 0's weights at its last pull of the epoch (the last epoch: the final weights, below).
    if (w == 0 && c.eval_each_epoch && epoch + 1 < c.epochs) {
      trace::scope t_eval("evaluate", tk, "epoch", epoch + 1);
      HF_RETURN_IF_ERROR(evaluate_into(m, test, c.eval_batch_size > 0 ? c.eval_batch_size : c.batch_size, er));
    }
    st.epochs.push_back(er);
    if (w == 0) log_epoch_done(er, c.epochs);
  }
  st.clock = clock;
  ps::ps_info done;
  done.clock = clock;
  HF_RETURN_IF_ERROR(link.send_all(ps::kind_done, done));
  if (w == 0) {
    // The final weights, once every worker has finished.
    ps::ps_info fin;
    fin.clock = clock;
    fin.flags = ps::flag_final;  // every row of every table
    HF_RETURN_IF_ERROR(link.send_all(ps::kind_pull, fin));
    kernels::waits::scope w_final(me, "the ps shards", "the final weights (every worker finished)",
                                  kernels::waits::span{tk, "wait: final pull", "clock", clock});
    HF_ASSIGN_OR_RETURN(auto replies, link.await(ps::kind_weights, clock, "final pull"));
    w_final.end();
    HF_RETURN_IF_ERROR(install(m, pl, replies, all_rows, st.rows_pulled));
    HF_ASSIGN_OR_RETURN(st.checksum, kernels::weights_checksum(m));
    kernels::epoch_report fin_eval;
    trace::scope t_eval("evaluate", tk, "epoch", c.epochs);
    HF_RETURN_IF_ERROR(evaluate_into(m, test, c.eval_batch_size > 0 ? c.eval_batch_size : c.batch_size, fin_eval));
    t_eval.end();
    st.test_accuracy = fin_eval.test_accuracy;
    if (!st.epochs.empty() && st.epochs.back().epoch == c.epochs) {
      st.epochs.back().test_accuracy = fin_eval.test_accuracy;
      st.epochs.back().test_logloss = fin_eval.test_logloss;
      st.epochs.back().test_auc = fin_eval.test_auc;
    }
    log_info("final weights (every worker finished): test accuracy " + metrics_text(fin_eval));
    if (!c.save_weights.empty()) HF_RETURN_IF_ERROR(kernels::save_weights(m, c.save_weights));
    HF_RETURN_IF_ERROR(link.send_all(ps::kind_bye, fin));
  }
  st.bytes_sent = link.bytes_sent;
  st.bytes_received = link.bytes_received;
  return st;
  }(); });
  return result;
}

void ps_worker(caf::blocking_actor* self, actor_env env) {
  auto svc = env.services;
  const std::string me = env.spec.name;
  if (!builtin::await_start(self, *svc)) return;
  const int w = int(env.spec.args.get_int("rank", 0));
  auto cfg = builtin::train_config_of(env.cluster, env.spec.node, std::size_t(env.spec.args.get_int("device", 0)));
  if (!cfg) return svc->report_done(me, false, cfg.error().message(), {});
  auto opts = options_of(env.cluster);
  if (!opts) return svc->report_done(me, false, opts.error().message(), {});
  std::optional<builtin::stream_options> so;
  std::vector<int> my_shards;  // input = "stream": the shards that feed this worker
  if (env.cluster.job.params.get_string("input", "memory") == "stream") {
    auto s = builtin::stream_options_of(env.cluster);
    if (!s) return svc->report_done(me, false, s.error().message(), {});
    if (s->workers() != opts->workers || s->consumers[std::size_t(w)] != me)
      return svc->report_done(me, false, me + ": the stream options name " + std::to_string(s->workers()) +
                                             " consumers, the ps job " + std::to_string(opts->workers) + " workers",
                              {});
    for (int k = w; k < s->shards(); k += s->workers()) my_shards.push_back(k);
    so = std::move(*s);
  }
  if (w == 0)
    log_info("parameter servers: " + std::to_string(opts->workers) + " worker(s), " + std::to_string(opts->shards) +
             " shard(s), " + opts->model.to_string() + ", batch " + std::to_string(cfg->batch_size) +
             " per worker, " + cfg->model + " for " + std::to_string(cfg->epochs) + " epochs" +
             (so ? ", streamed from " + std::to_string(so->shards()) + " stream shard(s), prefetch " +
                       std::to_string(so->prefetch) + (so->augment.enabled() ? ", augmented" : "")
                 : std::string()));
  auto t0 = clock_type::now();
  expected<worker_stats> r = run_worker(self, svc, me, w, *cfg, *opts, so ? &*so : nullptr);
  if (!r) return svc->report_done(me, false, r.error().to_string(), {});
  json_writer j;
  j.begin_object().field("model", cfg->model).field("device", cfg->where.to_string());
  j.field("strategy", "ps").field("rank", int64_t{w}).field("workers", int64_t{opts->workers});
  j.field("shards", int64_t{opts->shards}).field("consistency", opts->model.to_string());
  j.field("staleness", opts->model.staleness).field("steps", r->steps).field("start_clock", r->start_clock);
  j.field("clock", r->clock).field("max_staleness", r->max_staleness);
  j.field("mean_staleness", r->pulls > 0 ? double(r->staleness_sum) / double(r->pulls) : 0.0);
  j.field("pull_seconds", r->pull_seconds).field("compute_seconds", r->compute_seconds);
  j.field("bytes_sent", r->bytes_sent).field("bytes_received", r->bytes_received).field("rows_pulled", r->rows_pulled);
  j.key("resumed_from");
  if (r->resumed_from < 0)
    j.null();
  else
    j.value(r->resumed_from);
  j.field("total_seconds", since(t0));
  if (w == 0) j.field("weights_checksum", hex64(r->checksum));
  // Before "epochs": ps_job::summarize cuts a worker's metrics at its last "epochs".
  if (so) builtin::write_stream_report(j, *so, my_shards, r->stream, cfg->epochs);
  write_epochs(j, r->epochs);
  j.end_object();
  std::string summary = std::to_string(r->steps) + " steps, max staleness " + std::to_string(r->max_staleness);
  if (w == 0 && r->test_accuracy >= 0) summary += ", test accuracy " + std::to_string(r->test_accuracy).substr(0, 6);
  svc->report_done(me, true, summary, j.str());
}


}  // namespace

void add_ps_worker(registry& reg) {
  using topology::key_spec;
  using topology::key_type;
  topology::type_spec w{"ps_worker", "one parameter-server worker of the train job (strategy ps)", {}};
  w.keys.push_back(key_spec{"rank", key_type::integer, false, int64_t{0}, "worker index", 0.0, {}, {}});
  w.keys.push_back(key_spec{"device", key_type::integer, false, int64_t{0}, "index into its node's devices", 0.0, {}, {}});
  (void)reg.add_actor_type(w, [](caf::actor_system& sys, const actor_env& env) -> caf::actor {
    return sys.spawn(ps_worker, env);
  });
}

}  // namespace hetflow::actors::ps_job
