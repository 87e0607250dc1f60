#include "apps/profile_command.hpp"

#include <cstdio>
#include <cstdlib>
#include <set>

#include "actors/registry.hpp"
#include "kernels/model.hpp"
#include "kernels/profile.hpp"
#include "kernels/zoo.hpp"
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

int profile_command(const std::vector<std::string>& args, const actors::registry& reg) {
  std::string file;
  int64_t batch = 0;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--batch" && i + 1 < args.size()) {
      batch = std::strtoll(args[++i].c_str(), nullptr, 10);
      if (batch <= 0) {
        std::fprintf(stderr, "hetflow profile: --batch wants a positive integer\n");
        return 2;
      }
    } else if (file.empty() && !args[i].empty() && args[i][0] != '-') {
      file = args[i];
    } else {
      std::fprintf(stderr, "hetflow profile: unexpected argument '%s'\nusage: hetflow profile FILE [--batch B]\n",
                   args[i].c_str());
      return 2;
    }
  }
  if (file.empty()) {
    std::fprintf(stderr, "usage: hetflow profile FILE [--batch B]\n");
    return 2;
  }
  auto loaded = load_or_report(file, reg);
  if (!loaded) return 2;
  const auto& c = *loaded;
  if (c.job.kind != "train") {
    std::fprintf(stderr, "hetflow profile: %s runs a '%s' job; profiles are for 'train' jobs\n",
                 file.c_str(), c.job.kind.c_str());
    return 2;
  }
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
