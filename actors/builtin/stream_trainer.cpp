// The consumer's side of a streamed train job: a kernels::batch_source whose
// next() reads batches out of the consumer's mailbox (the trainer, or a ps
// worker, is a blocking actor; stream_protocol.hpp has the protocol, and
// stream_job.hpp which shards feed which consumer).
//
// Exactly-once, checked three ways on every epoch:
//   1. each batch is the step the plan expects from that shard, with the
//      plan's row count and sample shape;
//   2. the shard's running row count and id checksum in each batch equal
//      what the trainer computed from the ids it received from that shard
//      (nothing lost or changed on the way);
//   3. a sample_ledger over the whole epoch: no id twice, none out of range,
//      and exactly the rows of the consumer's steps at the end (one trainer:
//      plan.used_rows(), every row once; ps worker w: the rows of the steps
//      j % W == w, which the W workers' books add up to);
//   4. the ids are the rows the epoch's order (replayed here from the seed)
//      puts in that step, in that order -- which also pins the training
//      sequence to the in-memory path's, whatever the number of shards.
// Any failure ends the job with a message naming the shard and its node.
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "actors/builtin/job_actor.hpp"
#include "actors/builtin/stream_job.hpp"
#include "actors/builtin/stream_protocol.hpp"
#include "actors/log.hpp"
#include "kernels/criteo_dataset.hpp"
#include "kernels/criteo_text.hpp"
#include "kernels/trace.hpp"
#include "kernels/waits.hpp"

namespace hetflow::actors::builtin {
namespace {

using clock_type = std::chrono::steady_clock;

class stream_source final : public stream_batch_source {
public:
  stream_source(caf::blocking_actor* self, std::shared_ptr<node_services> svc, std::string me,
                stream_options opts, const kernels::epoch_plan& plan, const kernels::shape& sample,
                int64_t classes, uint64_t seed, stream_stats* stats, int worker, other_wire_handler other)
      : self_(self), svc_(std::move(svc)), me_(std::move(me)), opts_(std::move(opts)), plan_(plan),
        sample_(sample), classes_(classes), stats_(stats), worker_(worker), other_(std::move(other)),
        ledger_(plan.rows), order_(plan.rows, seed), shard_rows_(std::size_t(opts_.shards()), 0),
        shard_checksum_(std::size_t(opts_.shards()), 0), tk_(kernels::trace::track(me_)),
        lost_(std::size_t(opts_.shards()), false), last_(std::size_t(opts_.shards())), started_(clock_type::now()) {
    for (int64_t j = worker_; j < plan_.steps; j += opts_.workers()) my_rows_ += plan_.batch_rows(j);
    for (int k = 0; k < opts_.shards(); ++k) server_.push_back(stream::shard_name(k));
  }

  // The consumer has every batch it will take: its shards may finish
  // (stream_protocol.hpp, release). Best effort: a shard that is gone
  // needs none.
  ~stream_source() override {
    for (int k = 0; k < opts_.shards(); ++k)
      if (opts_.consumer_of(k) == worker_ && !lost_[std::size_t(k)])
        (void)svc_->send_wire(stream::shard_name(k), stream::make_release(me_, stream::shard_name(k)));
  }

  const kernels::epoch_plan& plan() const override { return plan_; }
  kernels::shape sample_shape() const override { return sample_; }
  int64_t classes() const override { return classes_; }

  status begin_epoch(int epoch) override {
    ledger_.begin_epoch(epoch, my_rows_);
    while (order_.epoch() < epoch) order_.next_epoch();
    std::fill(shard_rows_.begin(), shard_rows_.end(), 0);
    std::fill(shard_checksum_.begin(), shard_checksum_.end(), 0);
    return {};
  }

  expected<kernels::train_batch> next(int epoch, int64_t step) override {
    current_ = schemas::decoded_message{};  // the previous batch is trained on
    if (step % opts_.workers() != worker_)
      return make_error(errc::internal, me_ + ": asked for step " + std::to_string(step + 1) +
                                            ", which is not among its steps (worker " + std::to_string(worker_) +
                                            " of " + std::to_string(opts_.workers()) + ")");
    const int64_t key = int64_t(epoch) * plan_.steps + step;
    next_key_ = key;
    const int shard = opts_.shard_of_step(step);
    auto t0 = clock_type::now();
    auto deadline = t0 + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(opts_.timeout_s));
    HF_RETURN_IF_ERROR(check_lost());
    auto it = buffered_.find(key);
    // The wait for a batch that is not here yet (watchdog and trace).
    std::optional<kernels::waits::scope> waiting;
    if (it == buffered_.end())
      waiting.emplace(me_, who(shard), "the batch of epoch " + std::to_string(epoch + 1) + " step " +
                                           std::to_string(step + 1),
                      kernels::waits::span{tk_, "wait: batch", "shard", shard});
    while (it == buffered_.end()) {
      if (svc_->stopping().load()) return make_error(errc::cancelled, "train: stopped while waiting for a batch");
      auto now = clock_type::now();
      if (now >= deadline)
        return make_error(errc::timeout, "train: no batch for epoch " + std::to_string(epoch + 1) + " step " +
                                             std::to_string(step + 1) + " from " + who(shard) + " within " +
                                             std::to_string(int(opts_.timeout_s)) + " s (stream_timeout)");
      auto wait = std::min<clock_type::duration>(deadline - now, std::chrono::milliseconds(100));
      self_->receive(
          [this](wire_atom, const std::string& node, const wire_buffer_ref& buf) {
            if (offer(node, buf)) return;
            if (other_) return other_(node, buf);
            // Not a stream batch, and nobody else to take it: say what it is.
            auto msg = schemas::decode_message(buf, svc_->read_limits(), "node '" + node + "'");
            if (!msg) return fail(msg.error());
            auto view = stream::read_batch(*msg, "node '" + node + "'");
            fail(view ? make_error(errc::internal, "train: unexpected message from node '" + node + "'")
                      : view.error());
          },
          caf::after(std::chrono::duration_cast<std::chrono::milliseconds>(wait) + std::chrono::milliseconds(1)) >>
              [] {});
      if (!failure_.ok()) return failure_;
      const int before = takeovers_;
      HF_RETURN_IF_ERROR(check_lost());
      if (takeovers_ != before) deadline = clock_type::now() + (deadline - t0);  // a new builder: a full wait
      it = buffered_.find(key);
    }
    waiting.reset();
    if (stats_) stats_->wait_seconds += std::chrono::duration<double>(clock_type::now() - t0).count();
    pending p = std::move(it->second);
    buffered_.erase(it);
    // The credit goes back as soon as the batch is taken: the shard builds
    // its next one while this one trains. It goes to the shard that built
    // the batch (a taker's credits name the stream); none to a lost one.
    if (!dead_senders_.count(p.sender)) {
      const int32_t stream_of = p.sender == stream::shard_name(shard) ? -1 : int32_t(shard);
      if (auto s = svc_->send_wire(p.sender, stream::make_credit(me_, p.sender, 1, stream_of)); !s.ok()) {
        // A shard whose node just went down: its loss is noticed within
        // moments (the node's monitor); anything else fails the job.
        const std::string node = svc_->node_of(p.sender);
        auto until = clock_type::now() + std::chrono::seconds(3);
        while (!svc_->node_lost(node) && clock_type::now() < until && !svc_->stopping().load())
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        if (!svc_->node_lost(node))
          return status(s.code(), "train: cannot return a credit to '" + p.sender + "' on node '" + node +
                                      "': " + s.message());
        HF_RETURN_IF_ERROR(check_lost());
      }
    }
    HF_RETURN_IF_ERROR(check_batch(p, epoch, step, shard));
    current_ = std::move(p.msg);
    if (stats_) ++stats_->batches;
    const int64_t bn = int64_t(p.view.labels.size());
    kernels::shape x{bn};
    for (int64_t d : sample_.dims()) x.push_back(d);
    return kernels::train_batch{kernels::tensor_view(p.view.images.data(), x), p.view.labels};
  }

  // A resumed run's epochs before its checkpoint: the shards replay every
  // epoch from the start, so take (and drop) this consumer's batches of it,
  // checking them and the epoch's books as if they were trained on.
  // TODO(perf): tell the shards the first epoch instead.
  status skip_epoch(int epoch) override {
    HF_RETURN_IF_ERROR(begin_epoch(epoch));
    for (int64_t s = worker_; s < plan_.steps; s += opts_.workers()) HF_RETURN_IF_ERROR(next(epoch, s).error());
    return end_epoch(epoch);
  }

  status end_epoch(int epoch) override {
    current_ = schemas::decoded_message{};
    HF_RETURN_IF_ERROR(ledger_.end_epoch());
    if (stats_) stats_->epochs.push_back({epoch + 1, ledger_.count(), ledger_.checksum()});
    return {};
  }

private:
  struct pending {
    schemas::decoded_message msg;
    std::string node;
    std::string sender;  // the shard actor that built it (a taker for a lost shard's steps)
    stream::batch_view view;
  };
  // The last batch received of each shard's steps (whoever built it): a
  // takeover resumes after it, with its books.
  struct last_seen {
    int64_t key = -1;  // epoch * steps + step; -1: none yet
    int64_t rows = 0;
    uint64_t checksum = 0;
  };

  // Failover (stream_protocol.hpp, takeover): a shard of this consumer whose
  // builder's node is lost gets its steps rebuilt by a surviving shard of
  // this consumer, from the step after the last one received.
  status check_lost() {
    for (int k = 0; k < opts_.shards(); ++k) {
      if (opts_.consumer_of(k) != worker_) continue;
      const std::string& builder = server_[std::size_t(k)];
      if (builder.empty() || !svc_->node_lost(svc_->node_of(builder))) continue;
      HF_RETURN_IF_ERROR(take_over(k));
    }
    return {};
  }

  status take_over(int k) {
    const std::string old_builder = server_[std::size_t(k)];
    const std::string node = svc_->node_of(old_builder);
    dead_senders_.insert(old_builder);
    lost_[std::size_t(k)] = true;  // (a node is lost only with stream_failover: registry.hpp)
    // Where k's steps resume.
    const auto& l = last_[std::size_t(k)];
    int epoch = 0;
    int64_t step = opts_.first_step(k), rows = 0;
    uint64_t sum = 0;
    if (l.key >= 0) {
      epoch = int(l.key / plan_.steps);
      step = l.key % plan_.steps + opts_.step_stride(k);
      rows = l.rows;
      sum = l.checksum;
      if (step >= plan_.steps) {
        ++epoch;
        step = opts_.first_step(k);
        rows = 0;
        sum = 0;
      }
    }
    if (epoch >= opts_.epochs || step >= plan_.steps) {
      server_[std::size_t(k)].clear();  // every batch of k is here already
      log_info(me_ + ": " + who(k) + " went down after its last batch arrived; nothing to take over");
      return {};
    }
    // The taker: a surviving shard of this consumer (its own actor, on a
    // node not lost) building the fewest streams.
    int taker = -1;
    std::size_t load = 0;
    for (int t = 0; t < opts_.shards(); ++t) {
      if (t == k || opts_.consumer_of(t) != worker_ || lost_[std::size_t(t)] ||
          svc_->node_lost(opts_.shard_nodes[std::size_t(t)]))
        continue;
      std::size_t n = 0;
      for (const auto& b : server_) n += b == stream::shard_name(t);
      if (taker < 0 || n < load) taker = t, load = n;
    }
    if (taker < 0)
      return make_error(errc::peer_down, "train: " + who(k) + " is lost and no other shard of '" + me_ +
                                               "' is left to take over its steps (epoch " + std::to_string(epoch + 1) +
                                               " step " + std::to_string(step + 1) + " on)");
    stream::takeover_info t;
    t.shard = k;
    t.epoch = epoch;
    t.step = step;
    t.shard_rows = rows;
    t.shard_checksum = sum;
    const std::string taker_name = stream::shard_name(taker);
    if (auto s = svc_->send_wire(taker_name, stream::make_takeover(me_, taker_name, t)); !s.ok())
      return status(s.code(), "train: cannot hand " + who(k) + "'s steps to '" + taker_name + "': " + s.message());
    server_[std::size_t(k)] = taker_name;
    ++takeovers_;
    const double at = std::chrono::duration<double>(clock_type::now() - started_).count();
    if (stats_) stats_->takeovers.push_back({k, node, taker, epoch + 1, step + 1, at});
    log_warn(me_ + ": node '" + node + "' is down: '" + taker_name + "' builds shard " + std::to_string(k) +
             "'s steps from epoch " + std::to_string(epoch + 1) + " step " + std::to_string(step + 1));
    return {};
  }

  std::string who(int shard) const {
    return "stream shard '" + stream::shard_name(shard) + "' on node '" + opts_.shard_nodes[std::size_t(shard)] + "'";
  }

  void fail(status s) {
    if (failure_.ok()) failure_ = std::move(s);
  }

public:
  // On the consumer's thread, inside a receive() (next()'s or the other
  // protocol's).
  bool offer(const std::string& node, const wire_buffer_ref& buf) override {
    auto msg = schemas::decode_message(buf, svc_->read_limits(), "node '" + node + "'");
    if (!msg || msg->header().kind != stream::kind_batch) return false;
    take(node, std::move(*msg));
    return true;
  }

private:
  void take(const std::string& node, schemas::decoded_message msg_in) {
    auto msg = &msg_in;
    auto view = stream::read_batch(*msg, "node '" + node + "'");
    if (!view) return fail(view.error());
    const auto& info = view->info;
    if (info.shards != opts_.shards() || info.shard < 0 || info.shard >= opts_.shards())
      return fail(make_error(errc::internal, "train: node '" + node + "' sent a batch of shard " +
                                                 std::to_string(info.shard) + " of " + std::to_string(info.shards) +
                                                 ", but this job has " + std::to_string(opts_.shards()) + " shards"));
    if (opts_.consumer_of(info.shard) != worker_)
      return fail(make_error(errc::internal, "train: " + who(info.shard) + " sent a batch to '" + me_ +
                                                 "', but it feeds '" +
                                                 opts_.consumers[std::size_t(opts_.consumer_of(info.shard))] + "'"));
    if (dead_senders_.count(msg->header().sender)) {
      // Built by a shard whose node is lost, read only now: its taker
      // rebuilds every step after the last one received before the loss.
      if (stats_) ++stats_->dropped_late;
      return;
    }
    if (msg->header().sender != server_[std::size_t(info.shard)] || info.step < 0 || info.step >= plan_.steps ||
        opts_.shard_of_step(info.step) != info.shard || info.epoch < 0)
      return fail(make_error(errc::internal, "train: " + who(info.shard) + " sent step " +
                                                 std::to_string(info.step) + " of epoch " +
                                                 std::to_string(info.epoch + 1) + ", which it does not own (" +
                                                 std::to_string(plan_.steps) + " steps per epoch)"));
    const int64_t key = int64_t(info.epoch) * plan_.steps + info.step;
    if (key < next_key_ || buffered_.count(key))
      return fail(make_error(errc::internal, "exactly-once check: " + who(info.shard) + " sent step " +
                                                 std::to_string(info.step + 1) + " of epoch " +
                                                 std::to_string(info.epoch + 1) + " twice"));
    auto& l = last_[std::size_t(info.shard)];
    l.key = key;
    l.rows = info.shard_rows;
    l.checksum = info.shard_checksum;
    std::string sender = msg->header().sender;
    buffered_.emplace(key, pending{std::move(*msg), node, std::move(sender), *view});
    if (stats_) stats_->max_buffered = std::max<int64_t>(stats_->max_buffered, int64_t(buffered_.size()));
    // Only this consumer's shards send to it: at most their credits wait
    // (and a taker's fresh credits beside a lost shard's last batches).
    const int64_t bound = int64_t(opts_.shards_of(worker_) + takeovers_) * opts_.prefetch;
    if (int64_t(buffered_.size()) > bound)
      return fail(make_error(errc::internal, "train: " + std::to_string(buffered_.size()) +
                                                 " batches waiting, more than shards x prefetch = " +
                                                 std::to_string(bound) + ": a shard ignored its credits"));
  }

  status check_batch(const pending& p, int epoch, int64_t step, int shard) {
    const auto& v = p.view;
    const int64_t bn = int64_t(v.labels.size());
    if (v.info.rows != plan_.rows)
      return make_error(errc::invalid_argument,
                        "train: " + who(shard) + " has " + std::to_string(v.info.rows) +
                            " training rows but the trainer has " + std::to_string(plan_.rows) +
                            ": the nodes see different data (check data_dir, or the criteo-text inputs, on every node)");
    kernels::shape got;
    for (std::size_t d = 1; d < v.image_shape.size(); ++d) got.push_back(v.image_shape[d]);
    if (bn != plan_.batch_rows(step) || !(got == sample_))
      return make_error(errc::internal, "exactly-once check: batch " + std::to_string(step + 1) + " of epoch " +
                                            std::to_string(epoch + 1) + " from " + who(shard) + " has " +
                                            std::to_string(bn) + " rows of " + got.to_string() + "; the plan says " +
                                            std::to_string(plan_.batch_rows(step)) + " rows of " +
                                            sample_.to_string());
    for (int32_t y : v.labels)
      if (y < 0 || y >= classes_)
        return make_error(errc::wire_corrupt, "train: " + who(shard) + " sent label " + std::to_string(y) +
                                                  " (classes: " + std::to_string(classes_) + ")");
    HF_RETURN_IF_ERROR(ledger_.add(v.ids, who(shard)));
    auto expect = order_.order().subspan(std::size_t(plan_.batch_begin(step)), std::size_t(bn));
    for (int64_t j = 0; j < bn; ++j)
      if (v.ids[std::size_t(j)] != expect[std::size_t(j)])
        return make_error(errc::internal, "exactly-once check: row " + std::to_string(j) + " of batch " +
                                              std::to_string(step + 1) + " of epoch " + std::to_string(epoch + 1) +
                                              " from " + who(shard) + " is sample " +
                                              std::to_string(v.ids[std::size_t(j)]) + ", the epoch's order says " +
                                              std::to_string(expect[std::size_t(j)]) +
                                              " (do all nodes use the same seed?)");
    auto& rows = shard_rows_[std::size_t(shard)];
    auto& sum = shard_checksum_[std::size_t(shard)];
    rows += bn;
    sum += kernels::sample_ledger::checksum_of(v.ids);
    if (rows != v.info.shard_rows || sum != v.info.shard_checksum)
      return make_error(errc::internal, "exactly-once check: " + who(shard) + " says it sent " +
                                            std::to_string(v.info.shard_rows) + " rows in epoch " +
                                            std::to_string(epoch + 1) + " up to step " + std::to_string(step + 1) +
                                            ", the trainer received " + std::to_string(rows) +
                                            (rows == v.info.shard_rows ? " with a different id checksum" : ""));
    return {};
  }

  caf::blocking_actor* self_;
  std::shared_ptr<node_services> svc_;
  std::string me_;
  stream_options opts_;
  kernels::epoch_plan plan_;
  kernels::shape sample_;
  int64_t classes_;
  stream_stats* stats_;
  int worker_;                 // index in opts_.consumers
  other_wire_handler other_;   // wire messages that are not stream batches
  int64_t my_rows_ = 0;        // rows of this consumer's steps, per epoch
  kernels::sample_ledger ledger_;
  kernels::epoch_order order_;
  std::vector<int64_t> shard_rows_;
  std::vector<uint64_t> shard_checksum_;
  kernels::trace::track_id tk_;          // the consumer's trace track
  std::map<int64_t, pending> buffered_;  // by epoch * steps + step
  int64_t next_key_ = 0;
  // Failover: per shard, whether its original builder is lost, the actor
  // that builds its steps now ("" once nothing of it is left to build), and
  // the last batch of it received.
  std::vector<bool> lost_;
  std::vector<std::string> server_;
  std::vector<last_seen> last_;
  std::set<std::string> dead_senders_;  // builders on lost nodes: their late batches are dropped
  int takeovers_ = 0;
  clock_type::time_point started_;
  schemas::decoded_message current_;     // the batch being trained on
  status failure_;
};

}  // namespace

expected<stream_trainer_data> load_stream_trainer_data(const kernels::train_config& c, bool with_test) {
  stream_trainer_data out;
  if (c.data.kind == kernels::dataset_kind::criteo_text) {
    // The trainer indexes the text too: the row count (and so the plan and
    // the split) comes from the files, as on every shard node.
    HF_ASSIGN_OR_RETURN(kernels::criteo_text text, kernels::criteo_text::open(kernels::criteo_text_options_of(c.data)));
    HF_ASSIGN_OR_RETURN(kernels::criteo_split split,
                        kernels::split_criteo_rows(text.rows(), c.data.test_fraction, "the criteo text"));
    out.train_rows = split.train;
    out.sample = kernels::shape{kernels::criteo_columns};
    out.classes = 2;
    if (with_test) {
      HF_ASSIGN_OR_RETURN(out.test, text.load_range(split.train, text.rows()));
    }
    out.input_json = text.to_json();
    return out;
  }
  if (c.data.kind == kernels::dataset_kind::criteo) {
    // The records mapped, not loaded: the row count (and so the plan and the
    // split) from the part files, as on every shard node; the test rows
    // (the last test_fraction) read.
    HF_ASSIGN_OR_RETURN(kernels::criteo_records records, kernels::criteo_records::open(c.data.path, c.data.max_rows));
    HF_ASSIGN_OR_RETURN(kernels::criteo_split split,
                        kernels::split_criteo_rows(records.rows(), c.data.test_fraction, c.data.path));
    out.train_rows = split.train;
    out.sample = kernels::shape{kernels::criteo_columns};
    out.classes = 2;
    if (with_test) {
      HF_ASSIGN_OR_RETURN(out.test, records.load_range(split.train, records.rows()));
    }
    out.input_key = "criteo_records";
    out.input_json = records.to_json();
    return out;
  }
  HF_ASSIGN_OR_RETURN(kernels::training_data data, kernels::load_training_data(c, /*normalize=*/true, with_test));
  out.train_rows = data.train.size();
  out.sample = data.train.sample_shape();
  out.classes = data.train.classes;
  out.test = std::move(data.test);
  return out;
}

std::unique_ptr<stream_batch_source> make_stream_source(caf::blocking_actor* self,
                                                        std::shared_ptr<node_services> svc, const std::string& me,
                                                        const stream_options& opts, const kernels::epoch_plan& plan,
                                                        const kernels::shape& sample, int64_t classes, uint64_t seed,
                                                        stream_stats* stats, int worker, other_wire_handler other) {
  return std::make_unique<stream_source>(self, std::move(svc), me, opts, plan, sample, classes, seed, stats, worker,
                                         std::move(other));
}

}  // namespace hetflow::actors::builtin
