#include "apps/profile_command.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "actors/registry.hpp"
#include "kernels/cuda/cuda_loader.hpp"
#include "kernels/model.hpp"
#include "kernels/profile.hpp"
#include "kernels/zoo.hpp"
#include "topology/profile_db.hpp"
#include "topology/parser.hpp"

namespace hetflow::apps {

std::optional<topology::cluster> load_or_report(const std::string& file, const actors::registry& reg) {
  auto parsed = topology::load_topology(file, reg.catalog());
  if (!parsed.ok()) {
    for (auto& d : parsed.errors) std::fprintf(stderr, "%s\n", topology::format(d).c_str());
    return std::nullopt;
  }
  return std::move(*parsed.model);
}

namespace {

constexpr const char* profile_usage =
    "usage: hetflow profile FILE [--batch B] [--out PROFILE.json [--as NAME] [--repeat N]]\n"
    "       hetflow profile --merge A.json B.json ... --out PROFILE.json\n";

int usage(const char* why, const std::string& arg = {}) {
  std::fprintf(stderr, "hetflow profile: %s%s\n%s", why, arg.c_str(), profile_usage);
  return 2;
}

bool write_text(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::error_code ec;
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text << "\n";
    if (!out.flush()) {
      std::filesystem::remove(tmp, ec);
      return false;
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
  return !ec;
}

void print_kinds(const topology::profile_db& db) {
  for (const auto& [kind, d] : db.devices) {
    double f = 0, b = 0;
    for (const auto& u : db.units) {
      auto it = u.devices.find(kind);
      if (it == u.devices.end()) continue;
      f += it->second.fwd_ms;
      b += it->second.bwd_ms;
    }
    std::printf("  %-24s fwd %9.3f ms  bwd %9.3f ms  optimizer step %8.3f ms  weights copy %.3f / sum %.3f / add %.3f ms  memory %s\n",
                kind.c_str(), f, b, d.update_ms, d.wave_copy_ms, d.wave_sum_ms, d.wave_add_ms,
                d.memory_bytes ? (std::to_string(d.memory_bytes) + " B").c_str() : "(the topology's)");
  }
}

// --merge A B ... --out P
int merge_command(const std::vector<std::string>& files, const std::string& out) {
  std::vector<topology::profile_db> dbs;
  for (const auto& f : files) {
    auto db = topology::load_profile_db(f);
    if (!db) {
      std::fprintf(stderr, "hetflow profile: %s\n", db.error().message().c_str());
      return 2;
    }
    dbs.push_back(std::move(*db));
  }
  auto merged = topology::merge_profile_dbs(dbs);
  if (!merged) {
    std::fprintf(stderr, "hetflow profile: %s\n", merged.error().message().c_str());
    return 2;
  }
  if (!write_text(out, topology::to_json(*merged))) {
    std::fprintf(stderr, "hetflow profile: cannot write %s\n", out.c_str());
    return 1;
  }
  std::printf("%s: %zu units at batch %lld, %zu device kinds (%s)\n", out.c_str(), merged->units.size(),
              static_cast<long long>(merged->batch), merged->devices.size(), merged->source.c_str());
  print_kinds(*merged);
  return 0;
}

// The median of xs (xs not empty).
double median_of(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  const std::size_t n = xs.size();
  return n % 2 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

// runs[0] with every time the median over the runs (same units and kinds:
// one machine measured again).
topology::profile_db median_profile(std::vector<topology::profile_db> runs) {
  topology::profile_db out = runs[0];
  for (std::size_t i = 0; i < out.units.size(); ++i)
    for (auto& [kind, cost] : out.units[i].devices) {
      std::vector<double> f, b;
      for (const auto& r : runs) {
        const auto& c = r.units[i].devices.at(kind);
        f.push_back(c.fwd_ms);
        b.push_back(c.bwd_ms);
      }
      cost.fwd_ms = median_of(f);
      cost.bwd_ms = median_of(b);
    }
  for (auto& [kind, d] : out.devices) {
    std::vector<double> u, wc, ws, wa, sf;
    for (const auto& r : runs) {
      u.push_back(r.devices.at(kind).update_ms);
      wc.push_back(r.devices.at(kind).wave_copy_ms);
      ws.push_back(r.devices.at(kind).wave_sum_ms);
      wa.push_back(r.devices.at(kind).wave_add_ms);
      if (r.devices.at(kind).step_factor > 0) sf.push_back(r.devices.at(kind).step_factor);
    }
    d.update_ms = median_of(u);
    d.wave_copy_ms = median_of(wc);
    d.wave_sum_ms = median_of(ws);
    d.wave_add_ms = median_of(wa);
    d.step_factor = sf.empty() ? 0.0 : median_of(sf);
  }
  // dp's host ring and co-located step, HetPipe's co-located stages: over
  // the runs that measured them (0 = not measured).
  std::vector<double> ring, latency, factor, stages;
  for (const auto& r : runs) {
    if (r.links.host_ring_gbps > 0) {
      ring.push_back(r.links.host_ring_gbps);
      latency.push_back(r.links.host_ring_latency_us);
      out.links.host_ring_members = r.links.host_ring_members;
    }
    if (r.links.host_ring_step_factor > 0) factor.push_back(r.links.host_ring_step_factor);
    if (r.links.host_stage_factor > 0) stages.push_back(r.links.host_stage_factor);
  }
  out.links.host_ring_gbps = ring.empty() ? 0.0 : median_of(ring);
  out.links.host_ring_latency_us = latency.empty() ? 0.0 : median_of(latency);
  if (ring.empty()) out.links.host_ring_members = 0;
  out.links.host_ring_step_factor = factor.empty() ? 0.0 : median_of(factor);
  out.links.host_stage_factor = stages.empty() ? 0.0 : median_of(stages);
  // The first run's own ring numbers ("; host ring measured here: ...") are
  // not what the file holds.
  out.source = out.source.substr(0, out.source.find(';')) + ", the median of " + std::to_string(runs.size()) +
               " measurements";
  return out;
}

// FILE --out P [--as NAME] [--repeat N]: what `hetflow run` measures for
// the job (each device kind of the topology this machine can run), as a
// profile_file.
int write_measured(const topology::cluster& c, const std::string& file, int64_t batch, const std::string& out,
                   const std::string& as, int repeat) {
  if (c.job.params.contains("profile_file"))
    std::printf("note: %s names a profile_file; measuring here anyway\n", file.c_str());
  // cuda devices this machine cannot run (another machine's GPUs): left
  // out, said once; that machine measures them with a file of its own.
  topology::cluster here = c;
  const auto cuda = kernels::probe_cuda();
  for (auto& n : here.nodes) {
    std::vector<topology::device_spec> kept;
    for (auto& d : n.devices) {
      bool present = d.kind != topology::device_kind::cuda;
      for (const auto& g : cuda.devices) present = present || g.index == d.index;
      if (present) {
        kept.push_back(d);
        continue;
      }
      std::printf("note: node %s cuda:%d is not on this machine (%s): not in %s\n", n.name.c_str(), d.index,
                  cuda.devices.empty() ? cuda.why_none.c_str() : "no such index", out.c_str());
    }
    n.devices = std::move(kept);
  }
  std::vector<topology::profile_db> runs;
  for (int k = 0; k < repeat; ++k) {
    topology::cluster copy = here;  // measured_profiles names the devices' kinds in it
    auto m = actors::measured_profiles(copy, batch > 0 ? batch : c.job.params.get_int("batch_size", 64));
    if (!m) {
      std::fprintf(stderr, "hetflow profile: %s\n", m.error().message().c_str());
      return 2;
    }
    runs.push_back(std::move(*m));
  }
  topology::profile_db db = repeat > 1 ? median_profile(std::move(runs)) : std::move(runs[0]);
  if (!as.empty()) topology::prefix_kinds(db, as);
  if (!write_text(out, topology::to_json(db))) {
    std::fprintf(stderr, "hetflow profile: cannot write %s\n", out.c_str());
    return 1;
  }
  std::printf("%s: %zu units at batch %lld (%s); device kinds:\n", out.c_str(), db.units.size(),
              static_cast<long long>(db.batch), db.source.c_str());
  print_kinds(db);
  std::printf("name a kind on a device (devices = [ { kind = \"cpu\", threads = N, profile = \"KIND\" } ]) and "
              "the file in [job] profile_file; merge several machines' files with hetflow profile --merge\n");
  return 0;
}

}  // namespace

int profile_command(const std::vector<std::string>& args, const actors::registry& reg) {
  std::string file, out, as;
  int64_t batch = 0;
  int repeat = 0;
  bool merge = false;
  std::vector<std::string> merge_files;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--batch" && i + 1 < args.size()) {
      batch = std::strtoll(args[++i].c_str(), nullptr, 10);
      if (batch <= 0) return usage("--batch wants a positive integer");
    } else if (args[i] == "--repeat" && i + 1 < args.size()) {
      const std::string v = args[++i];
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != 0 || n <= 0 || n > 100) return usage("--repeat wants a count from 1 to 100: ", v);
      repeat = int(n);
    } else if (args[i] == "--out" && i + 1 < args.size()) {
      out = args[++i];
    } else if (args[i] == "--as" && i + 1 < args.size()) {
      as = args[++i];
      for (char ch : as)
        if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '.' && ch != '-')
          return usage("--as wants a name of letters, digits, '_', '.' and '-': ", as);
      if (as.empty()) return usage("--as wants a name");
    } else if (args[i] == "--merge") {
      merge = true;
    } else if (merge && !args[i].empty() && args[i][0] != '-') {
      merge_files.push_back(args[i]);
    } else if (file.empty() && !args[i].empty() && args[i][0] != '-') {
      file = args[i];
    } else {
      return usage("unexpected argument ", "'" + args[i] + "'");
    }
  }
  if (merge) {
    if (!file.empty()) return usage("--merge joins profile files and measures nothing: drop ", file);
    if (merge_files.size() < 2) return usage("--merge wants at least two profile files");
    if (out.empty()) return usage("--merge wants --out PROFILE.json");
    if (batch > 0 || !as.empty() || repeat > 0)
      return usage("--merge takes no --batch, --as or --repeat (profiles are merged as measured)");
    return merge_command(merge_files, out);
  }
  if (file.empty()) return usage("missing FILE");
  if (!as.empty() && out.empty()) return usage("--as names the kinds of --out's file: give --out");
  if (repeat > 0 && out.empty()) return usage("--repeat measures --out's file: give --out");
  auto loaded = load_or_report(file, reg);
  if (!loaded) return 2;
  const auto& c = *loaded;
  if (c.job.kind != "train") {
    std::fprintf(stderr, "hetflow profile: %s runs a '%s' job; profiles are for 'train' jobs\n",
                 file.c_str(), c.job.kind.c_str());
    return 2;
  }
  if (!out.empty()) return write_measured(c, file, batch, out, as, repeat > 0 ? repeat : 1);
  const auto& p = c.job.params;
  auto spec = train_model_spec(c);
  if (!spec) {
    std::fprintf(stderr, "hetflow profile: %s\n", spec.error().to_string().c_str());
    return 2;
  }
  kernels::profile_options po;
  po.batch = batch > 0 ? batch : p.get_int("batch_size", 64);

  // One profile per distinct device of this machine's nodes.
  std::set<std::pair<int, int>> seen;  // (kind, threads-or-index)
  int failures = 0;
  for (const auto& node : c.nodes) {
    for (const auto& d : node.devices) {
      const bool cuda = d.kind == topology::device_kind::cuda;
      if (!seen.insert({cuda ? 1 : 0, cuda ? d.index : d.threads}).second) continue;
      auto where = cuda ? kernels::device::cuda(d.index) : kernels::device::cpu();
      auto m = kernels::build_model(*spec, where, {cuda ? 0 : d.threads, 1});
      if (!m) {
        if (cuda) {  // a GPU this machine lacks: say why, profile the rest
          std::printf("node %s cuda:%d: not profiled: %s\n", node.name.c_str(), d.index,
                      m.error().to_string().c_str());
          continue;
        }
        std::fprintf(stderr, "hetflow profile: %s\n", m.error().to_string().c_str());
        ++failures;
        continue;
      }
      // The job's first samples where its dataset gives them (as `hetflow
      // run` and `simulate` profile), else random inputs.
      const auto sample = actors::sample_input(c, *spec, po.batch);
      po.input = sample ? &*sample : nullptr;
      auto prof = kernels::profile_model(*m, po);
      if (!prof) {
        std::fprintf(stderr, "hetflow profile: %s\n", prof.error().to_string().c_str());
        ++failures;
        continue;
      }
      if (cuda)
        std::printf("%s on %s, batch %lld\n", prof->model.c_str(), prof->where.c_str(),
                    static_cast<long long>(prof->batch));
      else
        std::printf("%s on cpu (%d threads), batch %lld\n", prof->model.c_str(), prof->threads,
                    static_cast<long long>(prof->batch));
      std::printf("  %-3s %-18s %10s %10s %12s %14s %12s\n", "#", "unit", "fwd ms", "bwd ms",
                  "params B", "activations B", "output B");
      double f = 0, b = 0;
      uint64_t params = 0;
      for (std::size_t i = 0; i < prof->units.size(); ++i) {
        const auto& u = prof->units[i];
        std::printf("  %-3zu %-18s %10.3f %10.3f %12llu %14llu %12llu\n", i, u.name.c_str(),
                    u.forward_s * 1e3, u.backward_s * 1e3,
                    static_cast<unsigned long long>(u.parameter_bytes),
                    static_cast<unsigned long long>(u.activation_bytes),
                    static_cast<unsigned long long>(u.output_bytes));
        f += u.forward_s;
        b += u.backward_s;
        params += u.parameter_bytes;
      }
      std::printf("  total: fwd %.3f ms, bwd %.3f ms, %llu parameter bytes; %.0f samples/s if "
                  "units ran back to back\n",
                  f * 1e3, b * 1e3, static_cast<unsigned long long>(params),
                  (f + b) > 0 ? static_cast<double>(prof->batch) / (f + b) : 0.0);
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace hetflow::apps
