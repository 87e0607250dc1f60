// The skeleton job: exercises the whole foundation across nodes.
//
//   producer (n0) --tensor i = x--> transformer (n1) --y = 2x + 1--> checker (n2)
//        ^                                                              |
//        +------------------- credit (CAF control plane) ---------------+
//
// Tensors are Cap'n Proto messages built in place (message_builder) and moved
// by the data plane (or by reference when two actors share a node). The
// producer keeps at most `window` tensors in flight (credit-based flow
// control: no unbounded queue anywhere). The checker regenerates every x from
// the seed and checks every element of y bit for bit, and the order of
// arrival, so a lost, duplicated, reordered or corrupted tensor fails the job.
#include "actors/builtin/skeleton.hpp"

#include <chrono>
#include <cstring>

#include "actors/builtin/job_actor.hpp"
#include "actors/json.hpp"

namespace hetflow::actors::builtin {
namespace {

using clock_type = std::chrono::steady_clock;

struct skeleton_params {
  int64_t tensors = 64;
  int64_t elements = 0;  // f32 elements per tensor
  int64_t window = 4;
  uint64_t seed = 1;
};

skeleton_params params_of(const topology::cluster& c) {
  skeleton_params p;
  p.tensors = c.job.params.get_int("tensors", 64);
  p.elements = std::max<int64_t>(1, c.job.params.get_int("tensor_bytes", 1 << 20) / 4);
  p.window = c.job.params.get_int("window", 4);
  p.seed = static_cast<uint64_t>(c.job.params.get_int("seed", 1));
  return p;
}

uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Element j of input tensor i: a 24-bit value scaled into [0, 1), exactly
// representable in f32, so 2x + 1 is computed identically everywhere.
inline float input_value(uint64_t base, int64_t j) {
  uint32_t v = static_cast<uint32_t>(base + static_cast<uint64_t>(j) * 0x9E3779B1u) >> 8;
  return static_cast<float>(v) * (1.0f / 16777216.0f);
}

void fill_input(std::span<std::byte> out, uint64_t seed, int64_t i) {
  uint64_t base = splitmix(seed * 1000003ull + static_cast<uint64_t>(i));
  float* f = reinterpret_cast<float*>(out.data());
  int64_t n = static_cast<int64_t>(out.size() / 4);
  for (int64_t j = 0; j < n; ++j) f[j] = input_value(base, j);
}

constexpr uint32_t kind_input = 1;
constexpr uint32_t kind_output = 2;

// --- producer ------------------------------------------------------------------

struct producer_state : job_actor_state {
  std::string to, checker;
  skeleton_params p;
  int64_t sent = 0;
  int64_t credits = 0;
  bool done = false;
  static inline const char* name = "hetflow.producer";
};

void producer_pump(caf::stateful_actor<producer_state>* self) {
  auto& st = self->state;
  while (st.credits > 0 && st.sent < st.p.tensors) {
    schemas::tensor_meta meta{dtype::f32, {st.p.elements}};
    schemas::envelope_header h{kind_input, static_cast<uint64_t>(st.sent), st.me, st.to};
    schemas::message_builder b(h, std::span<const schemas::tensor_meta>(&meta, 1));
    fill_input(b.tensor_data(0), st.p.seed, st.sent);
    auto buf = std::make_shared<const wire_buffer>(std::move(b).finish());
    if (auto s = st.svc->send_wire(st.to, std::move(buf)); !s.ok()) {
      st.done = true;
      return fail_job_actor(self, "cannot send tensor " + std::to_string(st.sent) + " to '" +
                                      st.to + "': " + s.to_string());
    }
    ++st.sent;
    --st.credits;
  }
  if (st.sent == st.p.tensors && !st.done) {
    st.done = true;
    st.svc->report_done(st.me, true, "sent " + std::to_string(st.sent) + " tensors", {});
  }
}

caf::behavior producer(caf::stateful_actor<producer_state>* self, actor_env env) {
  init_job_actor(self, env);
  auto& st = self->state;
  st.to = env.spec.args.get_string("to", "transformer");
  st.checker = env.spec.args.get_string("checker", "checker");
  st.p = params_of(env.cluster);
  return {
    [self](start_atom) {
      become_running(self, [self](credit_atom, uint64_t n) {
        self->state.credits += static_cast<int64_t>(n);
        producer_pump(self);
      });
      self->state.credits = self->state.p.window;
      producer_pump(self);
    },
  };
}

// --- transformer -----------------------------------------------------------------

struct transformer_state : job_actor_state {
  std::string to;
  skeleton_params p;
  int64_t seen = 0;
  static inline const char* name = "hetflow.transformer";
};

caf::behavior transformer(caf::stateful_actor<transformer_state>* self, actor_env env) {
  init_job_actor(self, env);
  auto& st = self->state;
  st.to = env.spec.args.get_string("to", "checker");
  st.p = params_of(env.cluster);
  return {
    [self](start_atom) {
      become_running(self, [self](wire_atom, const std::string& from, const wire_buffer_ref& buf) {
        auto& st = self->state;
        auto msg = decode_or_fail(self, from, buf);
        if (!msg) return;
        if (msg->tensor_count() != 1 || msg->tensor(0).type != dtype::f32)
          return fail_job_actor(self, "tensor message " + std::to_string(msg->header().seq) + " from node '" +
                      from + "' is not one f32 tensor");
        const auto& x = msg->tensor(0);
        schemas::tensor_meta meta{dtype::f32, {x.shape.begin(), x.shape.end()}};
        schemas::envelope_header h{kind_output, msg->header().seq, st.me, st.to};
        schemas::message_builder b(h, std::span<const schemas::tensor_meta>(&meta, 1));
        auto out = b.tensor_data(0);
        const float* in = reinterpret_cast<const float*>(x.data.data());
        float* o = reinterpret_cast<float*>(out.data());
        int64_t n = x.numel();
        for (int64_t j = 0; j < n; ++j) o[j] = 2.0f * in[j] + 1.0f;
        auto s = st.svc->send_wire(st.to, std::make_shared<const wire_buffer>(std::move(b).finish()));
        if (!s.ok()) return fail_job_actor(self, "cannot forward to '" + st.to + "': " + s.to_string());
        if (++st.seen == st.p.tensors) {
          st.svc->report_done(st.me, true, "transformed " + std::to_string(st.seen) + " tensors", {});
        }
      });
    },
  };
}

// --- checker -------------------------------------------------------------------

struct checker_state : job_actor_state {
  std::string producer;
  skeleton_params p;
  int64_t next = 0;
  uint64_t bytes = 0;
  uint64_t checksum = 0xcbf29ce484222325ull;
  clock_type::time_point first{};
  static inline const char* name = "hetflow.checker";
};

caf::behavior checker(caf::stateful_actor<checker_state>* self, actor_env env) {
  init_job_actor(self, env);
  auto& st = self->state;
  st.producer = env.spec.args.get_string("producer", "producer");
  st.p = params_of(env.cluster);
  return {
    [self](start_atom) {
      become_running(self, [self](wire_atom, const std::string& from, const wire_buffer_ref& buf) {
        auto& st = self->state;
        if (st.next == 0) st.first = clock_type::now();
        auto msg = decode_or_fail(self, from, buf);
        if (!msg) return;
        const auto& h = msg->header();
        if (h.seq != static_cast<uint64_t>(st.next))
          return fail_job_actor(self, "expected tensor " + std::to_string(st.next) + " but got " +
                      std::to_string(h.seq) + " from '" + h.sender + "' (lost or reordered)");
        if (msg->tensor_count() != 1 || msg->tensor(0).numel() != st.p.elements)
          return fail_job_actor(self, "tensor " + std::to_string(h.seq) + " has the wrong shape");
        const float* y = reinterpret_cast<const float*>(msg->tensor(0).data.data());
        uint64_t base = splitmix(st.p.seed * 1000003ull + static_cast<uint64_t>(st.next));
        for (int64_t j = 0; j < st.p.elements; ++j) {
          float want = 2.0f * input_value(base, j) + 1.0f;
          if (std::memcmp(&y[j], &want, 4) != 0)
            return fail_job_actor(self, "tensor " + std::to_string(st.next) + " element " + std::to_string(j) +
                        ": got " + std::to_string(y[j]) + ", expected " + std::to_string(want));
        }
        // FNV-1a over the first and last element of each tensor: a compact
        // fingerprint of the run for the report.
        for (float v : {y[0], y[st.p.elements - 1]}) {
          uint32_t bits;
          std::memcpy(&bits, &v, 4);
          st.checksum = (st.checksum ^ bits) * 0x100000001b3ull;
        }
        st.bytes += msg->tensor(0).data.size();
        ++st.next;
        if (auto p = st.svc->find_actor(st.producer)) self->send(p, credit_atom::value, uint64_t{1});
        if (st.next == st.p.tensors) {
          double secs = std::chrono::duration<double>(clock_type::now() - st.first).count();
          json_writer w;
          w.begin_object().field("tensors", st.next).field("bytes", st.bytes);
          w.field("seconds", secs).field("gbytes_per_s", secs > 0 ? st.bytes / secs / 1e9 : 0.0);
          char hex[17];
          std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(st.checksum));
          w.field("checksum", std::string(hex)).field("data_plane", st.svc->data_plane_name());
          w.end_object();
          st.svc->report_done(st.me, true,
                              "checked " + std::to_string(st.next) + " tensors (" +
                                  std::to_string(st.bytes) + " bytes), all correct",
                              w.str());
        }
      });
    },
  };
}

}  // namespace

void add_skeleton(registry& reg) {
  using topology::key_spec;
  using topology::key_type;
  topology::type_spec job{"skeleton",
                          "tensors made on one node, transformed on a second, checked on a third",
                          {}};
  job.keys.push_back(key_spec{"tensors", key_type::integer, false, int64_t{64},
                              "number of tensors to send", 1.0, 1e9, {}});
  job.keys.push_back(key_spec{"tensor_bytes", key_type::size, false, int64_t{1 << 20},
                              "bytes per tensor (f32); one message carries at most 512 MiB",
                              4.0, double(schemas::max_tensor_bytes), {}});
  job.keys.push_back(key_spec{"window", key_type::integer, false, int64_t{4},
                              "tensors in flight (credits)", 1.0, 1024.0, {}});
  job.keys.push_back(key_spec{"seed", key_type::integer, false, int64_t{1},
                              "seed of the tensor contents", 0.0, {}, {}});
  (void)reg.add_job_kind(
      job,
      [](const topology::cluster& c) -> expected<std::vector<topology::actor_spec>> {
        // Actors given in the file take precedence; otherwise place the three
        // roles on nodes 0, 1 and 2 (wrapping around on smaller clusters).
        if (!c.actors.empty()) return std::vector<topology::actor_spec>{};
        auto n = c.nodes.size();
        std::vector<topology::actor_spec> v(3);
        v[0].name = "producer";
        v[0].type = "producer";
        v[0].node = c.nodes[0].name;
        v[1].name = "transformer";
        v[1].type = "transformer";
        v[1].node = c.nodes[1 % n].name;
        v[2].name = "checker";
        v[2].type = "checker";
        v[2].node = c.nodes[2 % n].name;
        return v;
      },
      [](const std::vector<actor_result>& results) {
        // The checker is the one actor that reports metrics.
        for (auto& r : results)
          if (r.metrics_json.size() > 2) return "\"result\":" + r.metrics_json;
        return std::string{};
      });

  topology::type_spec prod{"producer", "makes the skeleton job's input tensors", {}};
  prod.keys.push_back(key_spec{"to", key_type::string, false, std::string("transformer"),
                               "actor that receives the tensors", {}, {}, {}});
  prod.keys.push_back(key_spec{"checker", key_type::string, false, std::string("checker"),
                               "actor that returns credits", {}, {}, {}});
  (void)reg.add_actor_type(prod, [](caf::actor_system& sys, const actor_env& env) {
    return sys.spawn(producer, env);
  });
  topology::type_spec tr{"transformer", "computes y = 2x + 1 on every tensor", {}};
  tr.keys.push_back(key_spec{"to", key_type::string, false, std::string("checker"),
                             "actor that receives the results", {}, {}, {}});
  (void)reg.add_actor_type(tr, [](caf::actor_system& sys, const actor_env& env) {
    return sys.spawn(transformer, env);
  });
  topology::type_spec ck{"checker", "checks every element and the order of arrival", {}};
  ck.keys.push_back(key_spec{"producer", key_type::string, false, std::string("producer"),
                             "actor to return credits to", {}, {}, {}});
  (void)reg.add_actor_type(ck, [](caf::actor_system& sys, const actor_env& env) {
    return sys.spawn(checker, env);
  });
}

}  // namespace hetflow::actors::builtin
