// The transport benchmark job: what one tensor message costs between two
// nodes through the whole stack (message_builder, node_services::send_wire,
// data plane, receive buffer, actor mailbox, decode).
//
// For each size in `sizes`:
//   1. ping-pong: the sender sends a tensor, the receiver sends the same
//      buffer back (by reference, no copy); latency = round trip / 2, as
//      ucx_perftest's tag_lat reports it.
//   2. stream: `messages` tensors with at most `window` in flight (fewer
//      for large tensors: at most `window_bytes` of them, but at least 1); the
//      receiver decodes each and returns credits as small wire messages
//      (kind_credit, the count in `seq`, no tensor) on the same path, so
//      flow control costs a data-plane message, not a CAF round through
//      both nodes' middleman threads. Bandwidth counts tensor bytes (the
//      Cap'n Proto envelope, ~100 B, is extra).
// Both sides derive the same plan from the job's keys.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "actors/builtin/skeleton.hpp"
#include "actors/builtin/job_actor.hpp"
#include "actors/json.hpp"

namespace hetflow::actors::builtin {
namespace {

using clock_type = std::chrono::steady_clock;

constexpr uint32_t kind_ping = 1;
constexpr uint32_t kind_stream = 2;
constexpr uint32_t kind_credit = 3;

struct size_plan {
  int64_t bytes = 0;
  int64_t pings = 0;
  int64_t messages = 0;      // timed
  int64_t warmup = 0;        // streamed before the clock starts
  int64_t window = 1;        // messages in flight while streaming
  int64_t credit_every = 1;  // the receiver acknowledges this many at once
};

struct bench_plan {
  std::vector<size_plan> sizes;
};

bench_plan plan_of(const topology::cluster& c) {
  bench_plan p;
  auto sizes = c.job.params.get_ints("sizes");
  if (sizes.empty()) sizes = {8, 4 << 20, 64 << 20};
  int64_t budget = c.job.params.get_int("bytes_per_size", int64_t{2} << 30);
  int64_t max_pings = c.job.params.get_int("pings", 2000);
  int64_t window = c.job.params.get_int("window", 8);
  int64_t window_bytes = c.job.params.get_int("window_bytes", int64_t{64} << 20);
  int64_t warmup_windows = c.job.params.get_int("warmup_windows", 2);
  for (int64_t s : sizes) {
    size_plan sp;
    sp.bytes = std::max<int64_t>(1, s);
    sp.pings = std::clamp<int64_t>((int64_t{256} << 20) / sp.bytes, 10, max_pings);
    sp.messages = std::clamp<int64_t>(budget / sp.bytes, 20, 200000);
    // Several large rendezvous at once interleave on the receiver (each
    // ends late, the buffers outgrow the caches). One 64 MiB message takes
    // ~10 ms, so the credit's round trip (~50 us) between two costs ~0.5%.
    sp.window = std::clamp<int64_t>(window_bytes / sp.bytes, 1, window);
    sp.credit_every = std::max<int64_t>(1, sp.window / 4);
    // Like ucx_perftest's -w: the first windows fault in the receive pool's
    // buffers (and UCX's), which a steady stream has already done.
    sp.warmup = warmup_windows * sp.window;
    p.sizes.push_back(sp);
  }
  return p;
}

wire_buffer_ref make_message(uint32_t kind, const std::string& me, const std::string& to,
                             int64_t bytes) {
  schemas::tensor_meta meta{dtype::u8, {bytes}};
  schemas::envelope_header h{kind, 0, me, to};
  schemas::message_builder b(h, std::span<const schemas::tensor_meta>(&meta, 1));
  auto d = b.tensor_data(0);
  for (std::size_t i = 0; i < d.size(); i += 4096) d[i] = std::byte(i >> 12);
  return std::make_shared<const wire_buffer>(std::move(b).finish());
}

wire_buffer_ref make_credit(const std::string& me, const std::string& to, uint64_t n) {
  schemas::envelope_header h{kind_credit, n, me, to};
  schemas::message_builder b(h, std::span<const schemas::tensor_meta>{});
  return std::make_shared<const wire_buffer>(std::move(b).finish());
}

struct result_row {
  int64_t bytes = 0;
  uint64_t wire_bytes = 0;
  double latency_us = 0;
  double gbytes_per_s = 0;
  int64_t messages = 0;
  int64_t window = 0;
};

struct sender_state : job_actor_state {
  std::string to;
  bench_plan plan;
  std::size_t idx = 0;
  wire_buffer_ref ping_msg, stream_msg;
  int64_t pings_done = 0;
  int64_t sent = 0, acked = 0;
  int64_t acked_at_t0 = -1;  // -1 while warming up
  clock_type::time_point t0{};
  std::vector<result_row> rows;
  static inline const char* name = "hetflow.bench_sender";
};

void start_size(caf::stateful_actor<sender_state>* self);

void finish_all(caf::stateful_actor<sender_state>* self) {
  auto& st = self->state;
  json_writer w;
  w.begin_object().field("data_plane", st.svc->data_plane_name()).key("results").begin_array();
  std::string summary;
  for (auto& r : st.rows) {
    w.begin_object().field("bytes", r.bytes).field("wire_bytes", r.wire_bytes);
    w.field("latency_us", r.latency_us).field("gbytes_per_s", r.gbytes_per_s);
    w.field("messages", r.messages).field("window", r.window).end_object();
    char line[160];
    std::snprintf(line, sizeof line, "%s%lld B: %.2f us, %.3f GB/s", summary.empty() ? "" : "; ",
                  static_cast<long long>(r.bytes), r.latency_us, r.gbytes_per_s);
    summary += line;
  }
  w.end_array().end_object();
  st.svc->report_done(st.me, true, summary, w.str());
}

void pump(caf::stateful_actor<sender_state>* self) {
  auto& st = self->state;
  const auto& sp = st.plan.sizes[st.idx];
  while (st.sent < sp.warmup + sp.messages && st.sent - st.acked < sp.window) {
    if (auto s = st.svc->send_wire(st.to, st.stream_msg); !s.ok())
      return fail_job_actor(self, s.to_string());
    ++st.sent;
  }
}

void start_size(caf::stateful_actor<sender_state>* self) {
  auto& st = self->state;
  if (st.idx == st.plan.sizes.size()) return finish_all(self);
  const auto& sp = st.plan.sizes[st.idx];
  st.ping_msg = make_message(kind_ping, st.me, st.to, sp.bytes);
  st.stream_msg = make_message(kind_stream, st.me, st.to, sp.bytes);
  st.pings_done = 0;
  st.sent = st.acked = 0;
  st.acked_at_t0 = -1;
  st.rows.push_back({sp.bytes, st.stream_msg->size(), 0, 0, sp.messages, sp.window});
  st.t0 = clock_type::now();
  (void)st.svc->send_wire(st.to, st.ping_msg);
}

caf::behavior bench_sender(caf::stateful_actor<sender_state>* self, actor_env env) {
  init_job_actor(self, env);
  auto& st = self->state;
  st.to = env.spec.args.get_string("to", "bench_receiver");
  st.plan = plan_of(env.cluster);
  return {
    [self](start_atom) {
      become_running(
          self,
          [self](wire_atom, const std::string& node, const wire_buffer_ref& buf) {
            auto msg = decode_or_fail(self, node, buf);
            if (!msg) return;
            auto& st = self->state;
            const auto& sp = st.plan.sizes[st.idx];
            if (msg->header().kind == kind_credit) {
              st.acked += static_cast<int64_t>(msg->header().seq);
              if (st.acked_at_t0 < 0 && st.acked >= sp.warmup) {
                st.acked_at_t0 = st.acked;
                st.t0 = clock_type::now();
              }
              if (st.acked >= sp.warmup + sp.messages) {
                double s = std::chrono::duration<double>(clock_type::now() - st.t0).count();
                st.rows.back().gbytes_per_s =
                    static_cast<double>(sp.bytes) * static_cast<double>(st.acked - st.acked_at_t0) / s / 1e9;
                ++st.idx;
                start_size(self);
                return;
              }
              pump(self);
              return;
            }
            if (++st.pings_done < sp.pings) {
              (void)st.svc->send_wire(st.to, st.ping_msg);
              return;
            }
            double us = std::chrono::duration<double, std::micro>(clock_type::now() - st.t0).count();
            st.rows.back().latency_us = us / static_cast<double>(sp.pings) / 2.0;
            st.ping_msg.reset();
            if (sp.warmup == 0) {
              st.acked_at_t0 = 0;
              st.t0 = clock_type::now();
            }
            pump(self);
          });
      start_size(self);
    },
  };
}

struct receiver_state : job_actor_state {
  std::string from;
  bench_plan plan;
  std::size_t idx = 0;
  int64_t pings = 0, received = 0;
  uint64_t unacked = 0;
  static inline const char* name = "hetflow.bench_receiver";
};

caf::behavior bench_receiver(caf::stateful_actor<receiver_state>* self, actor_env env) {
  init_job_actor(self, env);
  auto& st = self->state;
  st.from = env.spec.args.get_string("from", "bench_sender");
  st.plan = plan_of(env.cluster);
  return {
    [self](start_atom) {
      become_running(self, [self](wire_atom, const std::string& node, const wire_buffer_ref& buf) {
        auto& st = self->state;
        auto msg = decode_or_fail(self, node, buf);
        if (!msg) return;
        const auto& sp = st.plan.sizes[st.idx];
        if (msg->header().kind == kind_ping) {
          (void)st.svc->send_wire(st.from, buf);  // echo the same buffer
          ++st.pings;
          return;
        }
        ++st.received;
        ++st.unacked;
        bool last = st.received == sp.warmup + sp.messages;
        if (static_cast<int64_t>(st.unacked) >= sp.credit_every || last) {
          if (auto s = st.svc->send_wire(st.from, make_credit(st.me, st.from, st.unacked)); !s.ok())
            return fail_job_actor(self, s.to_string());
          st.unacked = 0;
        }
        if (last) {
          st.received = st.pings = 0;
          if (++st.idx == st.plan.sizes.size())
            st.svc->report_done(st.me, true, "received every message", {});
        }
      });
    },
  };
}

}  // namespace

void add_transport_bench(registry& reg) {
  using topology::key_spec;
  using topology::key_type;
  topology::type_spec job{"transport_bench",
                          "latency and bandwidth of tensor messages between nodes 0 and 1", {}};
  job.keys.push_back(key_spec{"sizes", key_type::size_list, false,
                              std::vector<int64_t>{8, 4 << 20, 64 << 20},
                              "tensor sizes to measure", {}, {}, {}});
  job.keys.push_back(key_spec{"bytes_per_size", key_type::size, false, int64_t{2} << 30,
                              "bytes streamed per size (timed, after the warm-up)", 1.0, {}, {}});
  job.keys.push_back(key_spec{"pings", key_type::integer, false, int64_t{2000},
                              "most ping-pong round trips per size", 1.0, {}, {}});
  job.keys.push_back(key_spec{"window", key_type::integer, false, int64_t{8},
                              "most messages in flight while streaming", 1.0, 4096.0, {}});
  job.keys.push_back(key_spec{"warmup_windows", key_type::integer, false, int64_t{2},
                              "windows streamed before the clock starts (as ucx_perftest -w)",
                              0.0, 1000.0, {}});
  job.keys.push_back(key_spec{"window_bytes", key_type::size, false, int64_t{64} << 20,
                              "most bytes in flight while streaming (but at least 1 message)",
                              1.0, {}, {}});
  (void)reg.add_job_kind(
      job,
      [](const topology::cluster& c) -> expected<std::vector<topology::actor_spec>> {
        if (c.nodes.size() < 2)
          return make_error(errc::invalid_argument, "transport_bench needs at least 2 nodes");
        // TODO(perf): chunk tensors over Cap'n Proto's 512 MiB blob limit.
        for (int64_t s : c.job.params.get_ints("sizes"))
          if (s < 1 || static_cast<uint64_t>(s) > schemas::max_tensor_bytes)
            return make_error(errc::invalid_argument,
                              "[job] sizes: " + std::to_string(s) +
                                  " bytes is outside 1 B .. 512 MiB, what one tensor message carries");
        if (!c.actors.empty()) return std::vector<topology::actor_spec>{};
        std::vector<topology::actor_spec> v(2);
        v[0].name = v[0].type = "bench_sender";
        v[0].node = c.nodes[0].name;
        v[1].name = v[1].type = "bench_receiver";
        v[1].node = c.nodes[1].name;
        return v;
      },
      [](const std::vector<actor_result>& results) {
        for (auto& r : results)
          if (r.name == "bench_sender" && !r.metrics_json.empty())
            return "\"result\":" + r.metrics_json;
        return std::string{};
      });
  topology::type_spec s{"bench_sender", "drives the transport benchmark", {}};
  s.keys.push_back(key_spec{"to", key_type::string, false, std::string("bench_receiver"),
                            "receiving actor", {}, {}, {}});
  (void)reg.add_actor_type(s, [](caf::actor_system& sys, const actor_env& env) {
    return sys.spawn<caf::detached>(bench_sender, env);
  });
  topology::type_spec r{"bench_receiver", "receives and echoes for the transport benchmark", {}};
  r.keys.push_back(key_spec{"from", key_type::string, false, std::string("bench_sender"),
                            "sending actor", {}, {}, {}});
  (void)reg.add_actor_type(r, [](caf::actor_system& sys, const actor_env& env) {
    return sys.spawn<caf::detached>(bench_receiver, env);
  });
}

}  // namespace hetflow::actors::builtin
