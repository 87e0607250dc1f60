// stream_shard: one pre-processing shard of a streamed train job. It holds
// the training set (loaded or synthesised on its own node), replays every
// epoch's shuffled order (kernels::epoch_order, from the seed alone), and for
// the steps it owns (stream_options::first_step / step_stride: step % shards
// == its index when it feeds one trainer; with strategy "ps" its worker's
// steps, dealt out among that worker's shards, stream_job.hpp) gathers the rows, augments
// and normalises them (kernels/preprocess/image_transforms) straight into a
// batch message, and sends it to the trainer while it has credits
// (stream_protocol.hpp). Its consumer is the trainer, or with strategy "ps"
// ps worker k % W (stream_options::consumer_of).
//
// dataset criteo_text (raw Criteo text, dlrm): instead of a training set in
// memory the shard indexes the text files at start (kernels/criteo_text.hpp:
// the offsets of the well-formed lines; malformed ones are skipped and
// counted as preprocess counts them) and, per batch it owns, parses and
// hashes just that batch's rows straight into the message's (b, 39) rows.
// No augmentation or normalisation: the values are a hash-mode preprocess
// job's records, bit for bit.
//
// dataset criteo (a preprocess job's records, vocab or hash mode): the shard
// maps the part files (kernels::criteo_records) and copies each batch's
// records into (b, 39) rows: load_criteo's values, checked the same way and
// against the embedding tables' sizes.
//
// Failover (stream_protocol.hpp, takeover): when another shard's node is
// lost, the consumer may hand this shard that shard's remaining steps; it
// then builds several streams of steps (`feeds`, one batch of each in turn,
// each with its own credits, epoch order and books). With failover on, a
// shard that has sent everything stays until the consumer's release.
//
// A detached actor: building batches is CPU work that must not hold a CAF
// scheduler thread. It never waits with a deadline of its own: it only waits
// for credits, and the trainer either returns them, fails the job, or times
// out (stream_timeout); a dead trainer node stops the job through the
// runtime.
//
// Resource-adaptive: each batch is built in a oneTBB arena of `parallelism`
// threads (preprocess_parallelism; 0 = the cores free on the node, probed
// again every 0.5 s with kernels/preprocess/resources, like the preprocess
// job), so a shard next to a trainer leaves it the cores it uses.
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>

#include "actors/builtin/job_actor.hpp"
#include "actors/builtin/stream_job.hpp"
#include "actors/builtin/stream_protocol.hpp"
#include "actors/json.hpp"
#include "actors/log.hpp"
#include "kernels/criteo_dataset.hpp"
#include "kernels/criteo_text.hpp"
#include "kernels/preprocess/resources.hpp"
#include "kernels/waits.hpp"
#include "kernels/trace.hpp"

namespace hetflow::actors::builtin {
namespace {

namespace pp = kernels::preprocess;

struct shard_state : job_actor_state {
  int index = 0;
  std::string trainer;  // the consumer: the trainer, a ps worker or a VW's stage 0 (empty until the head names it)
  stream_options opts;
  kernels::train_config cfg;
  // The whole training set, not normalised: as 8-bit pixels when they hold
  // every value exactly (pp::byte_scale: Fashion-MNIST's bytes / 255; a
  // quarter of the f32 memory; `pixels`, and `data` keeps the labels
  // only), else as f32.
  // TODO(perf): load only the rows of this shard's steps (every epoch's
  // order spans the whole set, so today each shard holds all of it).
  kernels::training_data data;
  std::vector<uint8_t> pixels;
  float pixel_scale = 0;  // pixels[i] * pixel_scale is the value (pp::byte_scale)
  pp::channel_normalization norm;
  pp::image_shape sample;
  // criteo_text: the indexed text instead of `data` (rows [0, plan.rows) train).
  std::optional<kernels::criteo_text> text;
  // criteo (a preprocess job's records): the mapped part files instead of
  // `data`, and the embedding tables' sizes the ids are checked against.
  std::optional<kernels::criteo_records> records;
  std::vector<int64_t> table_rows;
  kernels::shape features;  // one sample's shape in the batch message
  // [job] transforms (plugins' per-sample transforms, registry.hpp), applied
  // in order to each built sample after crop/flip and normalisation.
  std::vector<sample_transform> transforms;
  std::vector<std::string> transform_names;
  int64_t transformed = 0;  // samples they were applied to
  kernels::epoch_plan plan;
  int64_t order_rows = 0;   // rows the epoch orders permute
  // The streams of steps this shard builds: its own (feeds[0]) and those of
  // lost shards it took over (stream_protocol.hpp, takeover).
  struct feed {
    int shard = 0;  // whose steps
    std::unique_ptr<kernels::epoch_order> order;
    int epoch = 0;
    int64_t step = 0;  // next step to send in `epoch`
    int64_t credits = 0;
    bool all_sent = false;
    int64_t shard_rows = 0;  // this epoch
    uint64_t shard_checksum = 0;
  };
  std::vector<feed> feeds;
  bool released = false;  // the consumer needs nothing more (kind_release)
  int64_t batches_sent = 0, rows_sent = 0;
  double build_seconds = 0;
  std::optional<pp::parallelism_governor> gov;
  std::unique_ptr<tbb::task_arena> arena;  // gov's current degree
  std::vector<int64_t> ids;
  kernels::trace::track_id tk = 0;  // trace track (0: not tracing)
  std::optional<kernels::waits::scope> credit_wait;  // out of credits (watchdog and trace)
  static inline const char* name = "hetflow.stream_shard";
};

using shard_actor = caf::stateful_actor<shard_state>;

// Moves (epoch, step) to the feed's next step, across epochs; false when
// every epoch is done.
bool advance(shard_state& st, shard_state::feed& f) {
  for (;;) {
    if (f.step < st.plan.steps) return true;
    if (++f.epoch >= st.cfg.epochs) return false;
    f.order->next_epoch();
    f.step = st.opts.first_step(f.shard);
    f.shard_rows = 0;
    f.shard_checksum = 0;
  }
}

wire_buffer_ref build_batch(shard_state& st, shard_state::feed& f) {
  auto t0 = std::chrono::steady_clock::now();
  kernels::trace::scope t_build("build batch", st.tk, "step", f.step + 1);
  const int64_t b0 = st.plan.batch_begin(f.step);
  int64_t bn = st.plan.batch_rows(f.step);
  auto order = f.order->order();
  st.ids.assign(order.begin() + b0, order.begin() + b0 + bn);
  // Fault drills for the exactly-once check (tests only), first batch only.
  if (f.shard == st.index && f.epoch == 0 && f.step == st.opts.first_step(st.index) && !st.opts.fault.empty()) {
    if (st.opts.fault == "duplicate" && bn > 1) st.ids[1] = st.ids[0];
    if (st.opts.fault == "drop" && bn > 1) st.ids.pop_back(), --bn;
  }
  f.shard_rows += bn;
  f.shard_checksum += kernels::sample_ledger::checksum_of(st.ids);
  stream::batch_info info;
  info.epoch = f.epoch;
  info.shard = f.shard;
  info.shards = st.opts.shards();
  info.step = f.step;
  info.rows = st.plan.rows;
  info.shard_rows = f.shard_rows;
  info.shard_checksum = f.shard_checksum;
  stream::batch_writer w(st.me, st.trainer, info, bn, st.features.dims());
  std::copy(st.ids.begin(), st.ids.end(), w.ids().begin());
  const int dop = st.gov->update();
  if (!st.arena || st.arena->max_concurrency() != dop) st.arena = std::make_unique<tbb::task_arena>(dop);
  st.arena->execute([&] {
    if (st.text) {
      if (auto s = st.text->read_rows(st.ids, w.images(), w.labels()); !s.ok()) throw std::runtime_error(s.to_string());
    } else if (st.records) {
      if (auto s = st.records->read_rows(st.ids, w.images(), w.labels(), st.table_rows); !s.ok())
        throw std::runtime_error(s.to_string());
    } else {
      for (int64_t j = 0; j < bn; ++j)
        w.labels()[std::size_t(j)] = st.data.train.labels[std::size_t(st.ids[std::size_t(j)])];
      if (!st.pixels.empty())
        pp::transform_batch(std::span<const uint8_t>(st.pixels), st.pixel_scale, st.sample, st.ids, w.images(),
                            st.opts.augment, st.norm, st.cfg.seed, f.epoch);
      else
        pp::transform_batch(st.data.train.images.view().f32_span(), st.sample, st.ids, w.images(),
                            st.opts.augment, st.norm, st.cfg.seed, f.epoch);
      if (!st.transforms.empty()) {
        // What a transform does depends on (seed, epoch, row) only, so the
        // samples may go to any thread.
        const int64_t numel = st.sample.numel();
        std::span<float> images = w.images();
        tbb::parallel_for(int64_t{0}, bn, [&](int64_t j) {
          sample_context ctx{st.sample.channels, st.sample.height, st.sample.width, st.cfg.seed, f.epoch,
                             st.ids[std::size_t(j)]};
          std::span<float> one = images.subspan(std::size_t(j * numel), std::size_t(numel));
          for (const auto& t : st.transforms) t(one, ctx);
        });
        st.transformed += bn;
      }
    }
  });
  st.build_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++st.batches_sent;
  st.rows_sent += bn;
  kernels::waits::progress();
  return std::move(w).finish();
}

std::string transform_text(const shard_state& st) {
  std::string out;
  for (const auto& n : st.transform_names) out += (out.empty() ? ", transforms " : ", ") + n;
  return out;
}

void finish_if_done(shard_actor* self) {
  auto& st = self->state;
  if (st.opts.consumers_from_head && st.trainer.empty()) return;  // not assigned yet
  for (const auto& f : st.feeds)
    if (!f.all_sent || f.credits != st.opts.prefetch) return;
  // With failover a shard stays until its consumer has every batch: a lost
  // shard's steps may still come to it.
  if (st.opts.failover && !st.released) return;
  char line[300];
  std::snprintf(line, sizeof line,
                "sent %lld batches (%lld rows) in %d epochs; %.2f s building batches, parallelism %d (%d-%d)",
                static_cast<long long>(st.batches_sent), static_cast<long long>(st.rows_sent), st.cfg.epochs,
                st.build_seconds, st.gov->current(), st.gov->min_seen(), st.gov->max_seen());
  std::string summary = line + transform_text(st);
  json_writer w;
  if (st.feeds.size() > 1) {
    summary += "; took over the steps of shard";
    for (std::size_t i = 1; i < st.feeds.size(); ++i) summary += " " + std::to_string(st.feeds[i].shard);
  }
  w.begin_object().field("batches", st.batches_sent).field("rows", st.rows_sent);
  w.key("transforms").begin_array();
  for (const auto& n : st.transform_names) w.value(n);
  w.end_array().field("transformed_samples", st.transformed);
  w.key("took_over").begin_array();
  for (std::size_t i = 1; i < st.feeds.size(); ++i) w.value(int64_t{st.feeds[i].shard});
  w.end_array();
  w.field("build_seconds", st.build_seconds);
  w.key("parallelism").begin_object().field("last", int64_t{st.gov->current()});
  w.field("min", int64_t{st.gov->min_seen()}).field("max", int64_t{st.gov->max_seen()}).end_object();
  if (st.text) {
    // The index's books: the same rows and malformed lines on every node.
    std::snprintf(line, sizeof line, "; indexed %llu lines (%lld rows, %llu malformed) in %.2f s",
                  static_cast<unsigned long long>(st.text->lines()), static_cast<long long>(st.text->rows()),
                  static_cast<unsigned long long>(st.text->malformed().total), st.text->index_seconds());
    summary += line;
    if (!st.text->malformed().examples.empty()) summary += "; first: " + st.text->malformed().examples[0].to_string();
    w.key("criteo_text").raw(st.text->to_json());
  }
  if (st.records) w.key("criteo_records").raw(st.records->to_json());
  if (!st.text && !st.records) {
    w.field("pixels", st.pixels.empty() ? "f32" : "u8");
    w.field("dataset_bytes", int64_t(st.pixels.empty() ? st.data.train.images.numel() * 4 : int64_t(st.pixels.size())));
  }
  w.end_object();
  st.svc->report_done(st.me, true, summary, w.str());
  self->quit();
}

void pump(shard_actor* self) {
  auto& st = self->state;
  // One batch per feed in turn, while any has credits.
  for (bool sent = true; sent;) {
    sent = false;
    for (auto& f : st.feeds) {
      if (f.all_sent || f.credits <= 0) continue;
      if (!advance(st, f)) {
        f.all_sent = true;
        continue;
      }
      wire_buffer_ref msg;
      try {
        msg = build_batch(st, f);
      } catch (const std::exception& e) {
        return fail_job_actor(self, "stream shard '" + st.me + "': cannot build batch " + std::to_string(f.step) +
                                        " of epoch " + std::to_string(f.epoch + 1) + ": " + e.what());
      }
      if (auto s = st.svc->send_wire(st.trainer, std::move(msg)); !s.ok())
        return fail_job_actor(self, "stream shard '" + st.me + "': cannot send to '" + st.trainer + "' on node '" +
                                        st.svc->node_of(st.trainer) + "': " + s.to_string());
      --f.credits;
      f.step += st.opts.step_stride(f.shard);
      sent = true;
    }
  }
  // Out of credits: the shard waits for its consumer to take a batch.
  bool waiting = false;
  for (const auto& f : st.feeds) waiting = waiting || (!f.all_sent && f.credits == 0);
  if (waiting && !st.credit_wait)
    st.credit_wait.emplace(st.me, "'" + st.trainer + "' on node '" + st.svc->node_of(st.trainer) + "'",
                           "a credit (every batch it may send is in flight)",
                           kernels::waits::span{st.tk, "wait: credit (consumer busy)"});
  finish_if_done(self);
}

// A feed of shard `shard`'s steps from (epoch, step) on, with its books.
shard_state::feed make_feed(shard_state& st, int shard, int epoch, int64_t step, int64_t rows, uint64_t checksum) {
  shard_state::feed f;
  f.shard = shard;
  f.order = std::make_unique<kernels::epoch_order>(st.order_rows, st.cfg.seed);
  for (int e = 0; e <= epoch; ++e) f.order->next_epoch();
  f.epoch = epoch;
  f.step = step;
  f.credits = st.opts.prefetch;
  f.shard_rows = rows;
  f.shard_checksum = checksum;
  return f;
}

// The consumer hands this shard a lost shard's steps.
void take_over(shard_actor* self, const std::string& node, const schemas::decoded_message& msg) {
  auto& st = self->state;
  auto t = stream::read_takeover(msg, "node '" + node + "'");
  if (!t) return fail_job_actor(self, "stream shard '" + st.me + "': " + t.error().message());
  const int k = t->shard;
  if (k >= st.opts.shards() || st.opts.consumer_of(k) != st.opts.consumer_of(st.index) || t->epoch >= st.cfg.epochs ||
      t->step >= st.plan.steps || st.opts.shard_of_step(t->step) != k)
    return fail_job_actor(self, "stream shard '" + st.me + "': cannot take over shard " + std::to_string(k) +
                                    " at epoch " + std::to_string(t->epoch + 1) + " step " +
                                    std::to_string(t->step + 1) + " (not a step of that shard, or not "
                                    "this consumer's)");
  for (const auto& f : st.feeds)
    if (f.shard == k)
      return fail_job_actor(self, "stream shard '" + st.me + "': asked twice to take over shard " + std::to_string(k));
  log_warn("stream shard '" + st.me + "' takes over shard " + std::to_string(k) + "'s steps from epoch " +
           std::to_string(t->epoch + 1) + " step " + std::to_string(t->step + 1));
  st.feeds.push_back(make_feed(st, k, t->epoch, t->step, t->shard_rows, t->shard_checksum));
  pump(self);
}

// The shard's own feed to its consumer, once the consumers are known (from
// the topology, or from the head's assign message).
void start_feeding(shard_state& st) {
  st.trainer = st.opts.consumers[std::size_t(st.opts.consumer_of(st.index))];
  st.feeds.push_back(make_feed(st, st.index, 0, st.opts.first_step(st.index), 0, 0));
}

// Strategy "hetpipe": the head names the consumers (the stage 0 of each
// VW, planned at run time); the shard starts feeding its own then.
void assign(shard_actor* self, const std::string& node, const schemas::decoded_message& msg) {
  auto& st = self->state;
  auto names = stream::read_assign(msg, "node '" + node + "'");
  if (!names) return fail_job_actor(self, "stream shard '" + st.me + "': " + names.error().message());
  if (!st.opts.consumers_from_head || !st.trainer.empty())
    return fail_job_actor(self, "stream shard '" + st.me + "': an unexpected assign message from node '" + node + "'");
  if (int(names->size()) > st.opts.shards())
    return fail_job_actor(self, "stream shard '" + st.me + "': " + std::to_string(names->size()) +
                                    " consumers for " + std::to_string(st.opts.shards()) +
                                    " shards (each needs a shard of its own)");
  st.opts.consumers = std::move(*names);
  start_feeding(st);
  log_info("stream shard " + std::to_string(st.index) + " feeds " + st.trainer + " (consumer " +
           std::to_string(st.opts.consumer_of(st.index)) + " of " + std::to_string(st.opts.workers()) + ")");
  pump(self);
}

// Click logs: (b, 39) rows, `rows` training rows; the plan.
status plan_rows(shard_state& st, int64_t rows) {
  st.features = kernels::shape{kernels::criteo_columns};
  HF_ASSIGN_OR_RETURN(st.plan, kernels::make_epoch_plan(rows, st.cfg.batch_size, st.cfg.drop_last,
                                                         st.cfg.max_steps_per_epoch));
  st.order_rows = rows;

  return {};
}

status prepare(shard_state& st, const actor_env& env, const registry& reg) {
  HF_ASSIGN_OR_RETURN(st.opts, stream_options_of(env.cluster));
  st.transform_names = env.cluster.job.params.get_strings("transforms");
  HF_ASSIGN_OR_RETURN(st.transforms, reg.make_transforms(env.cluster.job.params));
  if (st.index >= st.opts.shards())
    return make_error(errc::internal, "shard index " + std::to_string(st.index) + " of " +
                                          std::to_string(st.opts.shards()) + " shards");
  st.gov.emplace(st.opts.parallelism, 0);
  HF_ASSIGN_OR_RETURN(st.cfg, train_config_of(env.cluster, env.spec.node));
  if (!st.transforms.empty() && (st.cfg.data.kind == kernels::dataset_kind::criteo_text ||
                                 st.cfg.data.kind == kernels::dataset_kind::criteo))
    return make_error(errc::invalid_argument, "transforms apply to images, not to click logs");
  if (st.cfg.data.kind == kernels::dataset_kind::criteo_text) {
    if (st.opts.augment.enabled())
      return make_error(errc::invalid_argument, "augment applies to images, not to dataset criteo-text");
    HF_ASSIGN_OR_RETURN(kernels::criteo_text text,
                        kernels::criteo_text::open(kernels::criteo_text_options_of(st.cfg.data)));
    HF_ASSIGN_OR_RETURN(kernels::criteo_split split,
                        kernels::split_criteo_rows(text.rows(), st.cfg.data.test_fraction, "the criteo text"));
    st.text = std::move(text);
    return plan_rows(st, split.train);
  }
  if (st.cfg.data.kind == kernels::dataset_kind::criteo) {
    if (st.opts.augment.enabled())
      return make_error(errc::invalid_argument, "augment applies to images, not to dataset criteo");
    HF_ASSIGN_OR_RETURN(kernels::criteo_records records,
                        kernels::criteo_records::open(st.cfg.data.path, st.cfg.data.max_rows));
    HF_ASSIGN_OR_RETURN(kernels::criteo_split split,
                        kernels::split_criteo_rows(records.rows(), st.cfg.data.test_fraction, st.cfg.data.path));
    // The tables the model has (trainer.cpp's criteo_tables_of): table_rows,
    // else the vocabularies' lines + 1 or, in hash mode, the largest ids + 1.
    const auto& tr = st.cfg.data.table_rows;
    if (tr.size() == 1) st.table_rows.assign(std::size_t(kernels::criteo_tables), tr[0]);
    else if (!tr.empty()) st.table_rows = tr;
    else {
      HF_ASSIGN_OR_RETURN(kernels::criteo_tables_info t, kernels::criteo_table_rows(st.cfg.data.path));
      st.table_rows = t.rows;
    }
    st.records = std::move(records);
    return plan_rows(st, split.train);
  }
  // Not normalised in memory: crop pads with raw zeros, then each sample is
  // normalised with the training set's statistics (the in-memory path's).
  HF_ASSIGN_OR_RETURN(st.data, kernels::load_training_data(st.cfg, /*normalize=*/false, /*with_test=*/false));
  st.norm.mean = st.data.stats.mean;
  st.norm.stddev = st.data.stats.stddev;
  kernels::shape s = st.data.train.sample_shape();
  st.sample = pp::image_shape{s[0], s[1], s[2]};
  st.features = s;
  HF_ASSIGN_OR_RETURN(st.plan, kernels::make_epoch_plan(st.data.train.size(), st.cfg.batch_size, st.cfg.drop_last,
                                                         st.cfg.max_steps_per_epoch));
  st.order_rows = st.data.train.size();

  // 8-bit pixels when they hold the data exactly: the f32 copy goes.
  if (auto all = st.data.train.images.view().f32_span(); (st.pixel_scale = pp::byte_scale(all)) > 0) {
    st.pixels = pp::to_bytes(all, st.pixel_scale);
    st.data.train.images = kernels::tensor();
  }
  return {};
}

caf::behavior stream_shard(shard_actor* self, actor_env env, const registry* reg) {
  init_job_actor(self, env);
  self->state.index = int(env.spec.args.get_int("shard", 0));
  self->state.tk = kernels::trace::track(self->state.me);
  return {
    [self, env, reg](start_atom) {
      auto& st = self->state;
      if (auto s = prepare(st, env, *reg); !s.ok())
        return fail_job_actor(self, "stream shard '" + st.me + "' on node '" + env.spec.node + "': " + s.to_string());
      if (!st.opts.consumers_from_head) start_feeding(st);
      log_info("stream shard " + std::to_string(st.index) + "/" + std::to_string(st.opts.shards()) + " for " +
               (st.trainer.empty() ? std::string("the consumer the head names") : st.trainer) + ": " +
               std::to_string(st.plan.rows) + " rows, " + std::to_string(st.plan.steps) + " steps per epoch, " +
               (st.text      ? "criteo text, " + std::to_string(st.text->malformed().total) + " malformed lines skipped"
                : st.records ? "criteo records of " + st.records->dir() + " (" + std::to_string(st.records->parts()) +
                                   " parts)"
                : st.opts.augment.enabled() ? std::string("augmented")
                                            : std::string("not augmented")) +
               transform_text(st) + ", prefetch " +
               std::to_string(st.opts.prefetch));
      become_running(self, [self](wire_atom, const std::string& node, const wire_buffer_ref& buf) {
        auto& st = self->state;
        auto msg = decode_or_fail(self, node, buf);
        if (!msg) return;
        const uint32_t kind = msg->header().kind;
        if (kind == stream::kind_assign) return assign(self, node, *msg);
        if (st.trainer.empty())
          return fail_job_actor(self, "stream shard '" + st.me + "': message kind " + std::to_string(kind) +
                                          " from node '" + node + "' before the head named its consumer");
        if (kind == stream::kind_takeover) return take_over(self, node, *msg);
        if (kind == stream::kind_release) {
          st.released = true;
          return finish_if_done(self);
        }
        if (kind != stream::kind_credit)
          return fail_job_actor(self, "stream shard '" + st.me + "': unexpected message kind " +
                                          std::to_string(kind) + " from node '" + node + "'");
        auto k = stream::credit_stream(*msg);
        if (!k) return fail_job_actor(self, "stream shard '" + st.me + "': " + k.error().message());
        shard_state::feed* f = *k < 0 ? &st.feeds[0] : nullptr;
        for (auto& g : st.feeds)
          if (g.shard == *k) f = &g;
        if (f == nullptr)
          return fail_job_actor(self, "stream shard '" + st.me + "': a credit for shard " + std::to_string(*k) +
                                          "'s steps, which it does not build");
        f->credits += int64_t(msg->header().seq);
        st.credit_wait.reset();
        if (f->credits > st.opts.prefetch)
          return fail_job_actor(self, "stream shard '" + st.me + "': '" + st.trainer + "' returned more credits than "
                                      "batches were in flight (" + std::to_string(f->credits) + " > prefetch " +
                                      std::to_string(st.opts.prefetch) + ")");
        pump(self);
      });
      pump(self);
    },
  };
}

}  // namespace

void add_stream_shard(registry& reg) {
  using topology::key_spec;
  using topology::key_type;
  topology::type_spec t{"stream_shard",
                        "pre-processing shard of a streamed train job (placed by the train job itself)", {}};
  key_spec shard;
  shard.name = "shard";
  shard.type = key_type::integer;
  shard.default_value = int64_t{0};
  shard.help = "shard index";
  shard.min = 0.0;
  t.keys.push_back(std::move(shard));
  // The registry outlives every node (main's), and holds the transforms.
  (void)reg.add_actor_type(t, [reg = &reg](caf::actor_system& sys, const actor_env& env) {
    return sys.spawn<caf::detached>(stream_shard, env, reg);
  });
}

}  // namespace hetflow::actors::builtin
