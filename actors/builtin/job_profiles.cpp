#include "actors/builtin/job_profiles.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/builtin/stream_job.hpp"
#include "actors/hetpipe/hp_core.hpp"
#include "actors/ring/host_ring_probe.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cuda/cuda_api.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/profile.hpp"
#include "kernels/trace.hpp"
#include "kernels/trainer.hpp"
#include "kernels/zoo.hpp"
#include "topology/cost_model.hpp"
#include "topology/data_parallel.hpp"
#include "topology/hetpipe_plan.hpp"

namespace hetflow::actors {

expected<std::vector<kernels::inserted_layer>> insert_layers_of(const topology::settings& p) {
  std::vector<kernels::inserted_layer> out;
  auto trim = [](std::string s) {
    const auto b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  };
  for (const std::string& e : p.get_strings("insert_layers")) {
    auto bad = [&](const std::string& why) {
      return make_error(errc::invalid_argument, "[job] insert_layers: '" + e + "' is not \"AFTER:TYPE\" or "
                                                "\"AFTER:TYPE(key=value, ...)\" (a unit of the model, a plugin's layer" +
                                                    (why.empty() ? std::string(")") : "): " + why));
    };
    const auto open = e.find('(');
    const std::string head = e.substr(0, open);
    const auto colon = head.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == head.size() || head.find(':', colon + 1) != std::string::npos)
      return bad("");
    kernels::inserted_layer l{head.substr(0, colon), head.substr(colon + 1), {}};
    if (open != std::string::npos) {
      if (e.back() != ')' || e.find('(', open + 1) != std::string::npos || e.find(')') != e.size() - 1)
        return bad("unbalanced parentheses");
      const std::string body = e.substr(open + 1, e.size() - open - 2);
      std::size_t pos = 0;
      while (pos <= body.size() && !trim(body).empty()) {
        const auto comma = std::min(body.find(',', pos), body.size());
        const std::string kv = body.substr(pos, comma - pos);
        const auto eq = kv.find('=');
        if (eq == std::string::npos || trim(kv.substr(0, eq)).empty() || trim(kv.substr(eq + 1)).empty())
          return bad("'" + trim(kv) + "' is not key=value");
        l.args.emplace_back(trim(kv.substr(0, eq)), trim(kv.substr(eq + 1)));
        pos = comma + 1;
        if (comma == body.size()) break;
      }
    }
    out.push_back(std::move(l));
  }
  return out;
}

expected<kernels::model_spec> train_model_spec(const topology::cluster& c) {
  const auto& p = c.job.params;
  kernels::zoo_options zo;
  zo.width = p.get_number("width", 1.0);
  zo.head_width = p.get_int("head_width", 0);
  HF_ASSIGN_OR_RETURN(zo.insert_layers, insert_layers_of(p));
  if (p.get_string("dataset", "fashion-mnist") == "synthetic") {
    auto s = p.get_ints("input_shape");
    if (s.size() == 3) zo.input = kernels::shape{s[0], s[1], s[2]};
    zo.classes = p.get_int("classes", 10);
  }
  return kernels::make_model_spec(p.get_string("model", "lenet5"), zo);
}

int cpu_threads(const topology::node_spec& n, const topology::device_spec& d) {
  return topology::cpu_device_threads(n, d, int(std::thread::hardware_concurrency()));
}

// LeNet-5's max pooling ran 1.8x slower on random normal inputs than on
// Fashion-MNIST, and the simulator under-predicted its single-device run by
// 13-26% (2026-12-06). Only where the cost model prices whole steps
// (single, dp): HetPipe's stages (and ps, ralp, auto) are priced by their
// units plus transfers that miss the stage's hand-off of activations to the
// data plane (0.2 ms a LeNet-5 minibatch traced, 0.04 ms priced at the
// assumed 100 Gb/s); on the job's samples the 1-VW simulation came out
// 20-30% high, on random inputs (slower pooling) within 12%. Random inputs
// there until the hand-off is priced.
std::optional<kernels::tensor> sample_input(const topology::cluster& c, const kernels::model_spec& spec, int64_t rows) {
  if (c.nodes.empty() || rows <= 0) return std::nullopt;
  if (const std::string s = c.job.params.get_string("strategy", "single"); s != "single" && s != "dp")
    return std::nullopt;
  auto cfg = builtin::train_config_of(c, c.nodes.front().name);
  if (!cfg) return std::nullopt;
  auto x = kernels::sample_training_batch(*cfg, rows);
  if (!x) return std::nullopt;
  kernels::shape want{rows};
  for (int64_t d : spec.input.dims()) want.push_back(d);
  if (x->shape() != want) return std::nullopt;
  return std::move(*x);
}

kernels::optimizer_config optimizer_config_of(const topology::cluster& c) {
  const auto& p = c.job.params;
  kernels::optimizer_config oc;
  oc.kind = p.get_string("optimizer", "sgd") == "adam" ? kernels::optimizer_kind::adam : kernels::optimizer_kind::sgd;
  oc.lr = p.get_number("lr", 0.05);
  oc.momentum = p.get_number("momentum", 0.9);
  oc.weight_decay = p.get_number("weight_decay", 0.0);
  return oc;
}

namespace {

// The most replicas that share one host.
uint32_t most_on_one_host(const std::vector<topology::dp_replica>& replicas) {
  std::map<std::string, uint32_t> per_host;
  uint32_t most = 0;
  for (const auto& r : replicas) most = std::max(most, ++per_host[r.host]);
  return most;
}

// Member k of colocated_step_factor on its own `threads` CPUs of the
// machine (k * threads on, in /sys/devices/system/cpu/online's order, round
// the list), as `hetflow run` gives each local node its own: measured from
// inside a node, whose mask `hetflow run` narrowed to the node's CPUs, the
// members would otherwise share them (a factor of 2.3 for two VGG-11 copies
// on one CPU, 2026-11-29). Best effort: a mask the kernel refuses is left.
void pin_member(uint32_t k, int threads) {
  static const std::vector<int> cpus = [] {
    std::ifstream in("/sys/devices/system/cpu/online");
    std::string text;
    std::getline(in, text);
    auto parsed = topology::parse_cpu_list(text);
    return parsed ? *parsed : std::vector<int>{};
  }();
  if (cpus.empty()) return;
  const std::size_t t = std::size_t(std::max(1, threads));
  cpu_set_t set;
  CPU_ZERO(&set);
  for (std::size_t i = 0; i < t; ++i) CPU_SET(cpus[(std::size_t(k) * t + i) % cpus.size()], &set);
  (void)::pthread_setaffinity_np(::pthread_self(), sizeof set, &set);
}

using clk = std::chrono::steady_clock;
double ms_since(clk::time_point t0) { return std::chrono::duration<double, std::milli>(clk::now() - t0).count(); }

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / double(v.size());
}

// A model's inputs for timed training steps: `sample` (sample_input's rows)
// if given, else `rows` random rows (seeded); and an output gradient of 1e-3
// everywhere.
struct step_inputs {
  kernels::tensor x, dy;
};
step_inputs make_step_inputs(const std::optional<kernels::tensor>& sample, kernels::model& m, int64_t rows,
                             uint64_t seed) {
  step_inputs in{sample ? sample->clone() : kernels::random_input(m, rows, seed), {}};
  kernels::shape out{rows};
  for (int64_t d : m.sample_shape(m.size()).dims()) out.push_back(d);
  in.dy = kernels::tensor::empty(out);
  for (float& v : in.dy.f32_span()) v = 1e-3f;
  return in;
}

// One training step of `m`, in its context: forward, backward, `between`
// (if any), the optimizer's step at a tiny learning rate (the weights
// barely move).
status train_step(kernels::model& m, const step_inputs& in, kernels::optimizer& opt, double lr,
                  const std::function<void()>& between = {}) {
  auto y = m.forward(in.x.view(), kernels::mode::train);
  if (!y) return y.error();
  auto d = m.backward(in.dy.view(), false);
  if (!d) return d.error();
  if (between) between();
  auto params = m.parameters();
  return opt.step(params, lr * 1e-6);
}

// Written before each timed pass of the optimizer's step and the weights'
// copy: the caches as a backward pass leaves them (activations streamed
// through), not as the same pass just before left them. Timed warm, the
// step of VGG-11 w0.25 took 0.245 ms; after 32 MiB written 0.30-0.35 ms,
// against 0.94 ms a minibatch for a stage's whole local update inside a run
// (2026-11-29, 2-core VM, before the summed step).
struct cache_evictor {
  std::vector<float> scratch = std::vector<float>(std::size_t{8} << 20);  // 32 MiB
  float v = 0;
  void operator()() { std::fill(scratch.begin(), scratch.end(), v += 1); }
};

}  // namespace

expected<update_times> time_update(const topology::cluster& c, kernels::model& m) {
  const kernels::optimizer_config oc = optimizer_config_of(c);
  // A cuda model's optimizer runs on the device (as a hetpipe stage's
  // does): each step is timed to its end.
  const bool cuda = m.where().kind == kernels::device_kind::cuda;
  HF_ASSIGN_OR_RETURN(auto opt, cuda ? static_cast<kernels::cuda::context&>(m.context()).make_optimizer(oc)
                                     : kernels::make_optimizer(oc));
  auto params = m.parameters();
  // A cpu stage's summed step adds to its wave's update: one per parameter.
  std::vector<std::vector<float>> sums;
  std::vector<float*> sum_ptrs;
  if (!cuda)
    for (auto* p : params) {
      sums.emplace_back(std::size_t(p->value.numel()), 0.0f);
      sum_ptrs.push_back(sums.back().data());
    }
  std::vector<double> steps, summed;
  status st;
  std::optional<cache_evictor> evict;
  if (!cuda) evict.emplace();
  m.context().run([&] {
    // Interleaved: the two medians see the same phases of the machine.
    for (int i = 0; i < 7 && st.ok(); ++i) {
      if (evict) (*evict)();
      auto t0 = clk::now();
      st = opt->step(params, oc.lr * 1e-6);
      if (st.ok()) st = m.context().synchronize();
      steps.push_back(ms_since(t0));
      if (cuda || !st.ok()) continue;
      (*evict)();
      t0 = clk::now();
      st = opt->step_summed(params, oc.lr * 1e-6, sum_ptrs, /*add=*/true);
      summed.push_back(ms_since(t0));
    }
  });
  HF_RETURN_IF_ERROR(st);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  update_times out;
  out.step_ms = median(steps);
  if (!summed.empty()) out.sum_ms = std::max(0.0, median(summed) - out.step_ms);
  return out;
}

expected<double> time_whole_step(const topology::cluster& c, kernels::model& m, int64_t rows, double phase_seconds) {
  if (rows <= 0) return make_error(errc::invalid_argument, "whole step: rows must be > 0");
  if (m.where().kind != kernels::device_kind::cpu) return make_error(errc::unsupported, "whole step: cpu models only");
  const kernels::optimizer_config oc = optimizer_config_of(c);
  HF_ASSIGN_OR_RETURN(auto opt, kernels::make_optimizer(oc));
  const step_inputs in = make_step_inputs(sample_input(c, m.spec(), rows), m, rows, 7);
  std::vector<double> times;
  status st;
  auto pass = [&] {  // its ms (st says whether it ran)
    const auto t0 = clk::now();
    st = train_step(m, in, *opt, oc.lr);
    return ms_since(t0);
  };
  m.context().run([&] {
    // Untimed: 3 passes and 0.03 s at least (a fresh process's first
    // passes touch their memory for the first time); timed: 5..100 passes,
    // until phase_seconds.
    double warm_ms = 0;
    for (int warm = 0; st.ok() && (warm < 3 || (warm_ms < 30 && warm < 100)); ++warm) warm_ms += pass();
    while (st.ok() && (times.size() < 5 ||
                       (times.size() < 100 && mean(times) * double(times.size()) < phase_seconds * 1e3))) {
      const double ms = pass();
      if (st.ok()) times.push_back(ms);
    }
  });
  HF_RETURN_IF_ERROR(st);
  return mean(times);
}

weight_passes time_weight_passes(kernels::model& m) {
  weight_passes out;
  if (m.where().kind != kernels::device_kind::cpu) return out;
  auto all = m.parameters();
  // For at most 64 MiB of weights (more copies of a VGG-16 would be 0.5
  // GiB each), the times then scaled to all of them (the passes are linear
  // in bytes).
  constexpr int64_t budget = int64_t{64} << 20;
  int64_t all_bytes = 0, timed_bytes = 0;
  std::vector<kernels::parameter*> params;
  for (auto* p : all) {
    const int64_t b = p->value.numel() * int64_t(sizeof(float));
    all_bytes += b;
    if (timed_bytes + b <= budget || params.empty()) {
      params.push_back(p);
      timed_bytes += b;
    }
  }
  if (timed_bytes == 0) return out;
  std::vector<std::vector<float>> slot, sum;
  for (auto* p : params) {
    slot.emplace_back(std::size_t(p->value.numel()));
    sum.emplace_back(std::size_t(p->value.numel()), 0.0f);
  }
  std::vector<double> copies, adds;
  cache_evictor evict;
  m.context().run([&] {
    for (int i = 0; i < 7; ++i) {
      evict();
      auto t0 = clk::now();
      for (std::size_t k = 0; k < params.size(); ++k)
        hetpipe::copy_floats(slot[k].data(), params[k]->value.f32(), params[k]->value.numel());
      copies.push_back(ms_since(t0));
      evict();
      t0 = clk::now();
      for (std::size_t k = 0; k < params.size(); ++k)
        kernels::cpu::add(sum[k].data(), params[k]->value.f32(), sum[k].data(), params[k]->value.numel());
      adds.push_back(ms_since(t0));
    }
  });
  std::sort(copies.begin(), copies.end());
  std::sort(adds.begin(), adds.end());
  const double scale = double(all_bytes) / double(timed_bytes);
  out.copy_ms = copies[copies.size() / 2] * scale;
  out.add_ms = adds[adds.size() / 2] * scale;
  return out;
}

expected<double> colocated_step_factor(const topology::cluster& c, const kernels::model_spec& spec, int threads,
                                       uint32_t members, int64_t rows, int rounds, double phase_seconds,
                                       uint64_t sweep_bytes, double* together_ms) {
  if (members < 2) return 1.0;
  if (rows <= 0) return make_error(errc::invalid_argument, "co-located step: rows must be > 0");
  const kernels::optimizer_config oc = optimizer_config_of(c);
  struct replica {
    kernels::model m;
    std::unique_ptr<kernels::optimizer> opt;
    step_inputs in;
    std::vector<double> times;  // seconds of each timed pass
    status st;
    std::vector<float> sweep;  // sweep_bytes: read and written between backward and the step
  };
  std::vector<std::unique_ptr<replica>> reps;
  const auto sample = sample_input(c, spec, rows);  // every member times the same rows
  for (uint32_t k = 0; k < members; ++k) {
    kernels::build_options bo;
    bo.threads = threads;
    bo.seed = 1 + k;
    HF_ASSIGN_OR_RETURN(kernels::model m, kernels::build_model(spec, kernels::device::cpu(), bo));
    HF_ASSIGN_OR_RETURN(auto opt, kernels::make_optimizer(oc));
    step_inputs in = make_step_inputs(sample, m, rows, 7 + k);
    reps.push_back(std::make_unique<replica>(replica{std::move(m), std::move(opt), std::move(in), {}, {},
                                                     std::vector<float>(std::size_t(sweep_bytes / sizeof(float)))}));
  }
  // One training step as a replica computes it. The sum's traffic between
  // backward and the step: a dp replica's gradients go through the host
  // ring (its own and the peers' read, the average written) before the
  // step, and leave the caches to the step and the next forward as that
  // does. Not timed: the cost model prices the sum itself.
  auto step = [&oc](replica& r) {
    const auto t0 = clk::now();
    clk::duration swept{};
    status st;
    r.m.context().run([&] {
      st = train_step(r.m, r.in, *r.opt, oc.lr, [&] {
        if (r.sweep.empty()) return;
        const auto s0 = clk::now();
        for (float& v : r.sweep) v = v * 0.5f + 1.0f;
        swept = clk::now() - s0;
      });
    });
    r.times.push_back(std::chrono::duration<double>(clk::now() - t0 - swept).count());
    return st;
  };
  // Passes per phase: until phase_seconds of one replica's passes, 5..60.
  replica& first = *reps[0];
  for (int i = 0; i < 3; ++i) HF_RETURN_IF_ERROR(step(first));  // warm-up
  first.times.clear();
  while (first.times.size() < 5 ||
         (first.times.size() < 60 && mean(first.times) * double(first.times.size()) < phase_seconds))
    HF_RETURN_IF_ERROR(step(first));
  const int passes = int(first.times.size());
  // Rounds of (one replica alone, all at once), alternating against drift;
  // the factor is the median round's ratio of the slowest replica's mean
  // pass to the lone one's.
  std::vector<std::pair<double, double>> ratios;  // (ratio, slowest mean pass in ms)
  for (int round = 0; round < std::max(1, rounds); ++round) {
    first.times.clear();
    for (int i = 0; i < passes; ++i) HF_RETURN_IF_ERROR(step(first));
    const double alone = mean(first.times);
    for (auto& r : reps) r->times.clear();
    std::barrier<> sync{static_cast<std::ptrdiff_t>(members)};
    std::atomic<bool> failed{false};
    auto body = [&](replica& r, uint32_t k) {
      pin_member(k, threads);
      // The copies compute at once: each its own trace track (spans on one
      // track must nest).
      kernels::trace::track_scope on_track(kernels::trace::track("co-located step, copy " + std::to_string(k)));
      for (int i = 0; i < passes + 2; ++i) {  // 2 warm-up passes together
        sync.arrive_and_wait();
        if (failed.load()) break;
        try {
          r.st = step(r);
        } catch (const std::exception& e) {  // (bad_alloc, a library's exception): not out of the thread
          r.st = make_error(errc::internal, std::string("co-located step: ") + e.what());
        } catch (...) {
          r.st = make_error(errc::internal, "co-located step: an exception");
        }
        if (!r.st.ok()) {
          failed = true;
          break;
        }
      }
      sync.arrive_and_drop();
    };
    std::vector<std::thread> pool;
    pool.reserve(members);
    for (uint32_t k = 0; k < members; ++k) {
      try {
        pool.emplace_back(body, std::ref(*reps[k]), k);
      } catch (const std::exception& e) {
        // The threads started wait for members that never come: stand in
        // for them, and stop.
        failed = true;
        for (uint32_t j = k; j < members; ++j) sync.arrive_and_drop();
        for (auto& t : pool) t.join();
        return make_error(errc::out_of_memory, std::string("co-located step: cannot start a thread: ") + e.what());
      }
    }
    for (auto& t : pool) t.join();
    for (auto& r : reps) HF_RETURN_IF_ERROR(r->st);
    double slowest = 0;
    for (int i = 2; i < passes + 2; ++i) {
      double m = 0;
      for (auto& r : reps) m = std::max(m, r->times[std::size_t(i)]);
      slowest += m;
    }
    slowest /= double(passes);
    if (alone > 0) ratios.push_back({slowest / alone, slowest * 1e3});
  }
  if (ratios.empty()) return make_error(errc::internal, "co-located step: no pass timed");
  std::sort(ratios.begin(), ratios.end());
  const auto& median = ratios[ratios.size() / 2];
  if (together_ms) *together_ms = median.second;
  return std::max(1.0, median.first);
}

namespace {

// Pins the calling thread to `cpus` until it goes out of scope (then puts
// its old mask back). Threads it starts meanwhile keep the narrow mask.
class thread_pin {
public:
  explicit thread_pin(const std::vector<int>& cpus) {
    if (cpus.empty() || sched_getaffinity(0, sizeof old_, &old_) != 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : cpus)
      if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
    pinned_ = sched_setaffinity(0, sizeof set, &set) == 0;
  }
  ~thread_pin() {
    if (pinned_ && sched_setaffinity(0, sizeof old_, &old_) != 0)
      std::fprintf(stderr, "hetflow: could not give the profiling thread its CPUs back: %s\n", std::strerror(errno));
  }
  thread_pin(const thread_pin&) = delete;
  thread_pin& operator=(const thread_pin&) = delete;
  bool pinned() const noexcept { return pinned_; }

private:
  cpu_set_t old_{};
  bool pinned_ = false;
};

}  // namespace

expected<topology::profile_db> measured_profiles(topology::cluster& c, int64_t batch, const std::vector<int>& pin_kinds,
                                                 bool* kinds_pinned) {
  HF_ASSIGN_OR_RETURN(kernels::model_spec spec, train_model_spec(c));
  if (kinds_pinned) *kinds_pinned = false;
  // The kinds' own timing on `pin_kinds` (profiles_on_pinned_nodes), where
  // every measured cpu kind's threads fit there (a kind of more threads than
  // CPUs would run many times slower); the host ring and co-located steps
  // below time several threads at once and run unpinned.
  std::optional<thread_pin> pin;
  if (!pin_kinds.empty()) {
    bool fits = true;
    for (const auto& n : c.nodes)
      for (const auto& d : n.devices)
        if (d.kind == topology::device_kind::cpu && std::size_t(cpu_threads(n, d)) > pin_kinds.size()) fits = false;
    if (fits) {
      pin.emplace(pin_kinds);
      if (kinds_pinned) *kinds_pinned = pin->pinned();
    }
  }
  topology::profile_db db;
  db.batch = batch;
  db.source = "profiles measured here (" + spec.name + ", batch " + std::to_string(batch) + ")" +
              std::string(topology::links_assumed_note) + "100 Gb/s";
  // Nodes of one machine talk through shared memory; defaults otherwise.
  db.links.intra_node_gbps = 100;
  db.links.inter_node_gbps = 100;
  db.links.latency_us = 20;  // one-way tensor message through two actors (README, transport bench)
  std::map<int, std::string> kinds;  // threads (cpu) or -1 - index (cuda) -> kind
  for (auto& n : c.nodes)
    for (auto& d : n.devices) {
      const bool cuda = d.kind == topology::device_kind::cuda;
      if (cuda && !d.profile.empty()) continue;  // named in a profile file
      const int t = cpu_threads(n, d);
      const int key = cuda ? -1 - d.index : t;
      if (d.profile.empty()) d.profile = topology::measured_kind_name(d, t);
      if (kinds.count(key)) continue;
      kinds[key] = d.profile;
      // A cuda stage computes and steps its local weights on the device
      // (hetpipe's stage_core).
      auto built = kernels::build_model(spec, cuda ? kernels::device::cuda(d.index) : kernels::device::cpu(),
                                        {t, 1});
      if (!built && cuda)
        return make_error(errc::unsupported, "node '" + n.name + "' lists cuda device " + std::to_string(d.index) +
                                                 ", which cannot be measured here (" + built.error().message() +
                                                 "); give it a `profile` kind from a [job] profile_file");
      if (!built) return built.error();
      kernels::model& m = *built;
      kernels::profile_options po;
      po.batch = batch;
      const auto sample = sample_input(c, spec, batch);
      if (sample) po.input = &*sample;
      HF_ASSIGN_OR_RETURN(kernels::model_profile prof, kernels::profile_model(m, po));
      if (db.units.empty())
        for (const auto& u : prof.units) {
          topology::profile_unit pu;
          pu.name = u.name;
          pu.params_bytes = u.parameter_bytes;
          pu.activation_bytes = u.activation_bytes;
          pu.output_bytes = u.output_bytes;
          db.units.push_back(std::move(pu));
        }
      for (std::size_t i = 0; i < prof.units.size() && i < db.units.size(); ++i)
        db.units[i].devices[d.profile] = {prof.units[i].forward_s * 1e3, prof.units[i].backward_s * 1e3};
      db.devices[d.profile].memory_bytes = d.memory_bytes;
      HF_ASSIGN_OR_RETURN(const update_times ut, time_update(c, m));
      db.devices[d.profile].update_ms = ut.step_ms;
      db.devices[d.profile].wave_sum_ms = ut.sum_ms;
      const weight_passes wp = time_weight_passes(m);
      db.devices[d.profile].wave_copy_ms = wp.copy_ms;
      db.devices[d.profile].wave_add_ms = wp.add_ms;
      // A whole step over its units' medians and the update, where a cost
      // model prices whole steps (single, dp, and auto, which weighs them;
      // HetPipe's stages, ps and ralp price units: timing it would only
      // delay their start). On cpu kinds: a cuda step would need timing to
      // its end on the device. mlp on 1 thread, batch 64: profiled 1.68
      // ms, 1.86 ms a step inside a run (2026-11-29, 2-core VM: forward
      // +0.07, backward +0.04, the optimizer +0.06 ms, the batch's gather
      // 0.04).
      if (const std::string s = c.job.params.get_string("strategy", "single");
          !cuda && (s == "single" || s == "dp" || s == "auto")) {
        const double profiled = db.whole_step_ms(d.profile, batch);  // no step_factor yet: 1
        HF_ASSIGN_OR_RETURN(const double whole, time_whole_step(c, m, batch));
        if (profiled > 0 && whole > 0) db.devices[d.profile].step_factor = std::min(100.0, whole / profiled);
      }
    }
  pin.reset();
  if (db.units.empty())
    return make_error(errc::invalid_argument,
                      "[job] has no profile_file and the topology has no device whose profile could be measured "
                      "here: set profile_file to a JSON profile of the devices' kinds (README, \"HetPipe planner and "
                      "simulator\")");
  // dp's gradient sums between replicas of one host go through shared
  // memory (ring members' shm path): measured here rather than priced by the
  // assumed links above.
  const std::string strategy = c.job.params.get_string("strategy", "single");
  // An unknown dp node: no replicas here; the job's own check names it.
  const auto reps = topology::dp_replicas(c, c.job.params.get_strings("dp_nodes"));
  const uint32_t members = reps ? most_on_one_host(*reps) : 0;
  // (shm = "off": the ring sums by messages, priced by the links.)
  if ((strategy == "dp" || strategy == "auto") && members >= 2 && c.job.params.get_string("shm", "auto") == "auto") {
    auto ring = ring::measure_host_ring(members, db.params_bytes(0, db.units.size() - 1));
    if (ring) {
      db.links.host_ring_gbps = ring->gbps;
      db.links.host_ring_members = int(members);
      char buf[128];
      std::snprintf(buf, sizeof buf, "; host ring measured here: %.3f ms for %.2f MB, %u members", ring->ms,
                    double(ring->bytes) / 1e6, members);
      db.source += buf;
      // The replicas' compute side by side (cpu replicas; the first dp
      // replica's threads), where their copies fit in memory easily. Each
      // replica computes its share of the batch: `batch` already is one for
      // strategy dp (simulate measures dp at it), not for auto.
      const topology::dp_replica& first = reps->front();
      const topology::node_spec* node = c.find_node(first.node);
      const int64_t rows = strategy == "auto" ? std::max<int64_t>(1, batch / int64_t(reps->size())) : batch;
      const uint64_t copies = uint64_t(members) * topology::dp_replica_memory(db, rows);
      if (node != nullptr && first.spec.kind == topology::device_kind::cpu && copies <= (uint64_t{2} << 30)) {
        // The factor prices the replicas' step as they take it at once
        // (the slowest one's, with the sum's memory traffic between
        // backward and the step) over one replica's whole step as the
        // profile gives it (its units, the update, its kind's step_factor):
        // what co-located replicas take from each other, the wait for the
        // slowest each step, and the caches the sum leaves to the step and
        // the next forward. Without the sum's traffic mlp's dp on 2 x 1
        // thread was predicted 15-31% above the measured (2026-11-29).
        double together = 0;
        const uint64_t sweep = 2 * db.params_bytes(0, db.units.size() - 1);
        auto f = colocated_step_factor(c, spec, cpu_threads(*node, first.spec), members, rows, 5, 0.15, sweep,
                                       &together);
        const double profiled = db.whole_step_ms(first.spec.profile, rows);
        if (f && profiled > 0 && together > 0) {
          db.links.host_ring_step_factor = std::max(1.0, together / profiled);
          std::snprintf(buf, sizeof buf, "; replicas computing at once: x %.3f (%.3f ms a step, %.3f ms profiled)",
                        db.links.host_ring_step_factor, together, profiled);
          db.source += buf;
        } else {
          db.source += "; replicas computing at once not measured (" +
                       (f ? std::string("no step timed") : f.error().message()) + ")";
        }
      }
    } else {
      db.source += "; host ring not measured (" + ring.error().message() + "): assumed links";
    }
  }
  // HetPipe's cpu stages of one host compute at once: the whole model on
  // as many copies as the most crowded host has cpu devices, each with the
  // first such device's threads (3 rounds of 0.1 s phases: ~1 s for VGG-11
  // w0.25 on the 2-core VM), where the copies fit in memory easily.
  if (strategy == "hetpipe") {
    // host -> its cpu devices (node, device)
    std::map<std::string, std::vector<std::pair<const topology::node_spec*, const topology::device_spec*>>> cpus;
    for (const auto& n : c.nodes)
      for (const auto& d : n.devices)
        if (d.kind == topology::device_kind::cpu) cpus[n.host].push_back({&n, &d});
    const auto most = std::max_element(cpus.begin(), cpus.end(),
                                       [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
    if (most != cpus.end() && most->second.size() >= 2) {
      const auto stages = uint32_t(most->second.size());
      const auto [node, dev] = most->second.front();
      const uint64_t copies = uint64_t(stages) * topology::dp_replica_memory(db, batch);
      char buf[96];
      if (copies > (uint64_t{2} << 30)) {
        db.source += "; stages computing at once not measured (the copies would take more than 2 GiB)";
      } else if (auto f = colocated_step_factor(c, spec, cpu_threads(*node, *dev), stages, batch, 3, 0.1)) {
        db.links.host_stage_factor = *f;
        std::snprintf(buf, sizeof buf, "; stages computing at once: x %.3f (%u on one host)", *f, stages);
        db.source += buf;
      } else {
        db.source += "; stages computing at once not measured (" + f.error().message() + ")";
      }
    }
  }
  return db;
}

void apply_speeds(topology::cluster& c, topology::profile_db& db) {
  const std::string note = topology::apply_device_speeds(c, db);
  if (!note.empty()) db.source += "; devices' speed keys: " + note;
}

expected<topology::profile_db> profiles_at(topology::cluster& c, int64_t measure_batch) {
  const auto& p = c.job.params;
  auto db = p.contains("profile_file") ? topology::load_profile_db(p.get_string("profile_file"))
                                       : measured_profiles(c, measure_batch);
  if (db) apply_speeds(c, *db);
  return db;
}

}  // namespace hetflow::actors

namespace hetflow::actors {
namespace {

// A fixed chain of dependent integer multiply-adds: the same instructions on
// any CPU, so their time compares two CPUs' speed (what a hypervisor takes
// from one vCPU and not the other shows here as it does in the models'
// kernels). ~5 ms on a 3 GHz core.
uint64_t fixed_loop(uint64_t seed) {
  uint64_t x = seed | 1;
  for (int i = 0; i < 4'000'000; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    asm volatile("" : "+r"(x));  // kept a loop, and in place between the clock reads
  }
  return x;
}

// Seconds of fixed_loop on a thread pinned to `cpus`; < 0 when it cannot be pinned.
double loop_seconds_on(const std::vector<int>& cpus) {
  double out = -1;
  std::thread t([&] {
    const thread_pin pin(cpus);
    if (!pin.pinned()) return;
    static volatile uint64_t sink;
    sink = fixed_loop(1);  // on the CPU, warm
    const auto t0 = std::chrono::steady_clock::now();
    sink = fixed_loop(sink);
    out = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  t.join();
  return out;
}

}  // namespace

std::vector<double> node_cpu_speeds(const std::vector<std::vector<int>>& cpus, int rounds) {
  std::vector<std::vector<double>> t(cpus.size());
  for (int r = 0; r < rounds; ++r)
    for (std::size_t k = 0; k < cpus.size(); ++k)
      if (!cpus[k].empty()) t[k].push_back(loop_seconds_on(cpus[k]));
  std::vector<double> out(cpus.size(), 0.0);
  for (std::size_t k = 0; k < cpus.size(); ++k) {
    if (t[k].empty() || *std::min_element(t[k].begin(), t[k].end()) <= 0) continue;
    std::sort(t[k].begin(), t[k].end());
    out[k] = t[k][t[k].size() / 2];
  }
  return out;
}

std::string scale_node_kinds(topology::cluster& c, topology::profile_db& db, const std::vector<int>& nodes,
                             const std::vector<double>& factors, double threshold) {
  std::string note;
  for (std::size_t k = 0; k < nodes.size() && k < factors.size(); ++k) {
    const double f = factors[k];
    if (!(f > 0) || std::abs(f - 1.0) <= threshold) continue;
    auto& n = c.nodes[std::size_t(nodes[k])];
    bool scaled = false;
    for (auto& d : n.devices) {
      if (d.kind != topology::device_kind::cpu) continue;
      const std::string kind = topology::device_profile_kind(d, db);
      if (kind.empty() || !db.has_kind(kind)) continue;
      const std::string mine = kind + "@" + n.name;
      db.add_scaled_kind(kind, mine, f);
      d.profile = mine;
      scaled = true;
    }
    if (scaled) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "%s%s x %.2f", note.empty() ? "" : ", ", n.name.c_str(), f);
      note += buf;
    }
  }
  return note;
}

expected<topology::profile_db> profiles_on_pinned_nodes(topology::cluster& c, int64_t measure_batch,
                                                        const std::vector<int>& nodes,
                                                        const std::vector<std::vector<int>>& cpus) {
  const auto& p = c.job.params;
  std::size_t pinned = 0, first = cpus.size();
  for (std::size_t k = 0; k < cpus.size(); ++k)
    if (!cpus[k].empty()) {
      ++pinned;
      if (first == cpus.size()) first = k;
    }
  const std::string strategy = p.get_string("strategy", "single");
  if (p.contains("profile_file") || pinned < 2 || strategy == "hetpipe" || strategy == "auto")
    return profiles_at(c, measure_batch);
  // The kinds measured on the first pinned node's CPUs: the speeds' reference.
  bool on_first = false;
  auto db = measured_profiles(c, measure_batch, cpus[first], &on_first);
  if (!db) return db;
  apply_speeds(c, *db);  // before the nodes' factors, which multiply them
  if (!on_first) {
    db->source += "; node CPU speeds not measured (the kinds' threads do not fit on " +
                  c.nodes[std::size_t(nodes[first])].name + "'s CPUs, or it could not be pinned)";
    return db;
  }
  const std::vector<double> t = node_cpu_speeds(cpus, 5);
  if (!(t[first] > 0)) {
    db->source += "; node CPU speeds not measured (no thread could be pinned to " +
                  c.nodes[std::size_t(nodes[first])].name + "'s CPUs)";
    return db;
  }
  std::vector<double> factors(t.size(), 0.0);
  std::string all;
  for (std::size_t k = 0; k < t.size(); ++k) {
    if (cpus[k].empty()) continue;
    char buf[128];
    if (t[k] > 0) {
      factors[k] = t[k] / t[first];
      std::snprintf(buf, sizeof buf, "%s%s %.2f (CPUs %s)", all.empty() ? "" : ", ",
                    c.nodes[std::size_t(nodes[k])].name.c_str(), factors[k], topology::format_cpu_list(cpus[k]).c_str());
    } else {
      std::snprintf(buf, sizeof buf, "%s%s not timed (CPUs %s could not be pinned)", all.empty() ? "" : ", ",
                    c.nodes[std::size_t(nodes[k])].name.c_str(), topology::format_cpu_list(cpus[k]).c_str());
    }
    all += buf;
  }
  const std::string scaled = scale_node_kinds(c, *db, nodes, factors, node_speed_threshold);
  db->source += "; node CPU speeds (a fixed loop's time against the profiled node's): " + all +
                (scaled.empty() ? "; none off by more than 10%" : "; kinds scaled: " + scaled);
  return db;
}

}  // namespace hetflow::actors
