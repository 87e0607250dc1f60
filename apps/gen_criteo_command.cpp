// `hetflow gen-criteo --rows N --seed S --out FILE [--threads T]`: writes
// deterministic synthetic Criteo-format text (kernels/preprocess/
// synthetic_criteo.hpp): the same bytes for the same rows and seed.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/preprocess/synthetic_criteo.hpp"

namespace hetflow::apps {
namespace {

constexpr const char* gen_usage =
    "usage: hetflow gen-criteo --rows N --out FILE [--seed S] [--threads T]\n"
    "  writes N lines of synthetic Criteo data (label, I1..I13, C1..C26; Zipf-like\n"
    "  categoricals, missing values, negative integers); same --rows/--seed, same bytes\n";

bool parse_u64(const std::string& s, uint64_t& v) {
  if (s.empty() || s[0] == '-') return false;
  char* end = nullptr;
  errno = 0;
  v = std::strtoull(s.c_str(), &end, 10);
  return errno == 0 && end && *end == '\0';
}

}  // namespace

int gen_criteo_command(const std::vector<std::string>& args) {
  kernels::preprocess::synthetic_options opt;
  std::string out;
  bool have_rows = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::fputs(gen_usage, stdout);
      return 0;
    }
    if (i + 1 >= args.size()) {
      std::fprintf(stderr, "hetflow gen-criteo: %s needs a value\n%s", a.c_str(), gen_usage);
      return 2;
    }
    const std::string& v = args[++i];
    uint64_t n = 0;
    if (a == "--out") {
      out = v;
    } else if ((a == "--rows" || a == "--seed" || a == "--threads") && parse_u64(v, n)) {
      if (a == "--rows") {
        opt.rows = n;
        have_rows = true;
      } else if (a == "--seed") {
        opt.seed = n;
      } else {
        opt.threads = static_cast<int>(std::min<uint64_t>(n, 4096));
      }
    } else if (a == "--rows" || a == "--seed" || a == "--threads") {
      std::fprintf(stderr, "hetflow gen-criteo: %s wants a non-negative integer, got '%s'\n", a.c_str(),
                   v.c_str());
      return 2;
    } else {
      std::fprintf(stderr, "hetflow gen-criteo: unknown option '%s'\n%s", a.c_str(), gen_usage);
      return 2;
    }
  }
  if (!have_rows || out.empty()) {
    std::fprintf(stderr, "hetflow gen-criteo: --rows and --out are required\n%s", gen_usage);
    return 2;
  }
  auto t0 = std::chrono::steady_clock::now();
  auto s = kernels::preprocess::write_synthetic_criteo(out, opt);
  if (!s.ok()) {
    std::fprintf(stderr, "hetflow gen-criteo: %s\n", s.message().c_str());
    return 1;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "hetflow gen-criteo: wrote %llu rows (seed %llu) to %s in %.2f s\n",
               static_cast<unsigned long long>(opt.rows), static_cast<unsigned long long>(opt.seed),
               out.c_str(), secs);
  return 0;
}

}  // namespace hetflow::apps
