// kernels_profile: per-unit forward/backward times of a zoo model on the cpu
// (what the planner's profiles contain), for finding hot spots.
//
//   kernels_profile --model lenet5 --batch 64 --threads 1 [--input 1x28x28] [--width 1]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/profile.hpp"
#include "kernels/zoo.hpp"

using namespace hetflow::kernels;

int main(int argc, char** argv) {
  std::string name = "lenet5";
  zoo_options zo;
  profile_options po;
  po.iterations = 50;
  po.warmup = 5;
  int threads = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    const char* v = argv[i + 1];
    if (a == "--model") name = v;
    else if (a == "--batch") po.batch = std::atoll(v);
    else if (a == "--threads") threads = std::atoi(v);
    else if (a == "--width") zo.width = std::atof(v);
    else if (a == "--iterations") po.iterations = std::atoi(v);
    else if (a == "--input") {
      long c, h, w;
      if (std::sscanf(v, "%ldx%ldx%ld", &c, &h, &w) != 3) return 2;
      zo.input = shape{c, h, w};
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  auto spec = make_model_spec(name, zo);
  if (!spec) {
    std::fprintf(stderr, "%s\n", spec.error().to_string().c_str());
    return 1;
  }
  auto m = build_model(*spec, device::cpu(), {threads, 1});
  if (!m) {
    std::fprintf(stderr, "%s\n", m.error().to_string().c_str());
    return 1;
  }
  auto prof = profile_model(*m, po);
  if (!prof) {
    std::fprintf(stderr, "%s\n", prof.error().to_string().c_str());
    return 1;
  }
  double tf = 0, tb = 0;
  std::printf("%-24s %-16s %10s %10s %12s %12s\n", "unit", "kind", "fwd us", "bwd us", "param B", "act B");
  for (const auto& u : prof->units) {
    std::printf("%-24s %-16s %10.1f %10.1f %12llu %12llu\n", u.name.c_str(), to_string(u.kind), u.forward_s * 1e6,
                u.backward_s * 1e6, (unsigned long long)u.parameter_bytes, (unsigned long long)u.activation_bytes);
    tf += u.forward_s;
    tb += u.backward_s;
  }
  std::printf("total fwd %.1f us, bwd %.1f us, batch %lld, threads %d -> %.0f samples/s (no optimizer)\n", tf * 1e6,
              tb * 1e6, (long long)po.batch, prof->threads, double(po.batch) / (tf + tb));
  return 0;
}
