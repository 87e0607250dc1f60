#include "kernels/preprocess/resources.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "kernels/preprocess/hex_key.hpp"
#include "kernels/preprocess/line_parser.hpp"
#include "kernels/preprocess/synthetic_criteo.hpp"

namespace hetflow::kernels::preprocess {
namespace {

bool read_file(const std::string& path, std::string& out) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

// A number at the start of the file; false for "max" or a missing file.
bool read_number(const std::string& path, double& v) {
  std::string s;
  if (!read_file(path, s)) return false;
  char* end = nullptr;
  v = std::strtod(s.c_str(), &end);
  return end != s.c_str();
}

uint64_t meminfo_field(const std::string& text, const char* key) {
  auto at = text.find(key);
  if (at == std::string::npos) return 0;
  return std::strtoull(text.c_str() + at + std::char_traits<char>::length(key), nullptr, 10) * 1024;
}

struct cgroup_paths {
  std::string v2;                  // relative path of the unified hierarchy
  std::string v1_cpu, v1_memory;   // relative paths per controller
  bool has_v2 = false, has_v1_cpu = false, has_v1_memory = false;
};

cgroup_paths read_cgroup(const std::string& root) {
  cgroup_paths p;
  std::ifstream in(root + "proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string ctl = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (ctl.empty()) {
      p.v2 = path;
      p.has_v2 = true;
    }
    std::stringstream ss(ctl);
    std::string c;
    while (std::getline(ss, c, ',')) {
      if (c == "cpu") {
        p.v1_cpu = path;
        p.has_v1_cpu = true;
      } else if (c == "memory") {
        p.v1_memory = path;
        p.has_v1_memory = true;
      }
    }
  }
  return p;
}

// `dir/rel/file`, else `dir/file`.
std::string cg_file(const std::string& dir, const std::string& rel, const std::string& file) {
  std::string a = dir + rel + "/" + file;
  if (std::ifstream(a)) return a;
  return dir + "/" + file;
}

}  // namespace

uint64_t resource_snapshot::free_memory() const noexcept {
  uint64_t f = mem_available;
  if (cgroup_mem_limit > 0) {
    uint64_t head = cgroup_mem_limit > cgroup_mem_usage ? cgroup_mem_limit - cgroup_mem_usage : 0;
    f = std::min(f == 0 ? head : f, head);
  }
  return f;
}

double resource_snapshot::free_cores(int busy_here) const noexcept {
  double cap = cores;
  if (cpu_quota > 0) cap = std::min(cap, cpu_quota);
  double others = std::max(0.0, load1 - std::max(0, busy_here));
  return std::max(1.0, cap - others);
}

double resource_snapshot::capacity_cores(int forced) const noexcept {
  double cap = cores;
  if (cpu_quota > 0) cap = std::min(cap, cpu_quota);
  const double machine = std::max(cap, static_cast<double>(machine_cores > 0 ? machine_cores : cores));
  double c = std::max(std::min(cap, 1.0), cap - load1 * cap / machine);
  if (forced > 0) c = std::min(c, static_cast<double>(forced));
  const double q = std::round(c * 4) / 4;
  return q > 0 ? q : c;  // below a quarter core: as it is
}

std::string resource_snapshot::to_string() const {
  char buf[256];
  char quota[32] = "none";
  if (cpu_quota > 0) std::snprintf(quota, sizeof quota, "%.2f", cpu_quota);
  std::snprintf(buf, sizeof buf, "%d cores (quota %s), load %.2f, %.1f GiB free, rss %.0f MiB", cores,
                quota, load1, static_cast<double>(free_memory()) / (1u << 30),
                static_cast<double>(rss) / (1u << 20));
  return buf;
}

resource_snapshot probe_resources(const std::string& root_in) {
  std::string root = root_in.empty() ? std::string("/") : root_in;
  if (root.back() != '/') root += '/';
  resource_snapshot r;
  r.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  r.machine_cores = r.cores;
  if (root == "/") {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) r.cores = std::max(1, CPU_COUNT(&set));
  } else {
    double n;
    if (read_number(root + "cores", n)) r.cores = std::max(1, static_cast<int>(n));  // fake trees
    r.machine_cores = read_number(root + "machine_cores", n) ? std::max(1, static_cast<int>(n)) : r.cores;
  }
  std::string text;
  if (read_file(root + "proc/meminfo", text)) {
    r.mem_total = meminfo_field(text, "MemTotal:");
    r.mem_available = meminfo_field(text, "MemAvailable:");
  }
  double v;
  if (read_number(root + "proc/loadavg", v)) r.load1 = v;
  if (read_file(root + "proc/self/status", text)) r.rss = meminfo_field(text, "VmRSS:");

  auto cg = read_cgroup(root);
  std::string base = root + "sys/fs/cgroup";
  std::string s;
  if (cg.has_v2 && read_file(cg_file(base, cg.v2, "cpu.max"), s)) {
    std::stringstream ss(s);
    std::string quota;
    double period = 100000;
    ss >> quota >> period;
    if (quota != "max" && period > 0) r.cpu_quota = std::strtod(quota.c_str(), nullptr) / period;
  } else if (cg.has_v1_cpu) {
    std::string dir = base + "/cpu";
    double q, p;
    if (read_number(cg_file(dir, cg.v1_cpu, "cpu.cfs_quota_us"), q) &&
        read_number(cg_file(dir, cg.v1_cpu, "cpu.cfs_period_us"), p) && q > 0 && p > 0)
      r.cpu_quota = q / p;
  }
  if (cg.has_v2 && read_number(cg_file(base, cg.v2, "memory.max"), v)) {
    r.cgroup_mem_limit = static_cast<uint64_t>(v);
    if (read_number(cg_file(base, cg.v2, "memory.current"), v)) r.cgroup_mem_usage = static_cast<uint64_t>(v);
  } else if (cg.has_v1_memory) {
    std::string dir = base + "/memory";
    if (read_number(cg_file(dir, cg.v1_memory, "memory.limit_in_bytes"), v) && v < 9.0e18) {
      // v1 reports "no limit" as a huge page-aligned number.
      r.cgroup_mem_limit = static_cast<uint64_t>(v);
      if (read_number(cg_file(dir, cg.v1_memory, "memory.usage_in_bytes"), v))
        r.cgroup_mem_usage = static_cast<uint64_t>(v);
    }
  }
  if (r.cgroup_mem_limit >= r.mem_total && r.mem_total > 0) r.cgroup_mem_limit = 0;  // not binding
  return r;
}

int choose_parallelism(const resource_snapshot& r, int forced, int busy_here,
                       uint64_t per_worker_bytes, uint64_t memory_budget, int max_workers) {
  max_workers = std::max(1, max_workers);
  if (forced > 0) return std::min(forced, max_workers);
  int dop = static_cast<int>(std::lround(r.free_cores(busy_here)));
  dop = std::clamp(dop, 1, max_workers);
  if (per_worker_bytes > 0) {
    uint64_t budget = r.free_memory();
    if (memory_budget > 0) budget = budget == 0 ? memory_budget : std::min(budget, memory_budget);
    if (budget > 0) dop = std::min<int>(dop, std::max<uint64_t>(1, budget / per_worker_bytes));
  }
  return std::max(1, dop);
}

namespace {
double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

parallelism_governor::parallelism_governor(int forced, uint64_t per_worker_bytes, double every_s, std::string root,
                                           int max_workers)
    : forced_(forced), per_worker_(per_worker_bytes), every_s_(every_s), root_(std::move(root)),
      max_workers_(max_workers > 0 ? max_workers : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))) {
  dop_ = min_ = max_ = choose(0);
}

int parallelism_governor::update() {
  if (forced_ > 0 || steady_seconds() - last_ < every_s_) return dop_;
  dop_ = choose(dop_);
  min_ = std::min(min_, dop_);
  max_ = std::max(max_, dop_);
  return dop_;
}

int parallelism_governor::choose(int busy) {
  last_ = steady_seconds();
  if (forced_ > 0) return std::min(forced_, max_workers_);
  return choose_parallelism(probe_resources(root_), forced_, busy, per_worker_, 0, max_workers_);
}

uint64_t current_rss() noexcept {
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

double pass1_rows_per_s(double seconds) {
  // 64 distinct rows repeated 16 times (~250 KB: in the L2 or L3 cache
  // after the first pass; made in well under a millisecond), then
  // fast_parse_read_bound bytes of slack past the last line.
  constexpr std::size_t max_field = 256;
  static const std::string block = [] {
    std::string one;
    for (uint64_t r = 0; r < 64; ++r) synthetic_criteo_line(20261206, r, one);
    std::string b;
    for (int k = 0; k < 16; ++k) b += one;
    b.append(fast_parse_read_bound(max_field), '\0');
    return b;
  }();
  const std::size_t text_bytes = block.size() - fast_parse_read_bound(max_field);
  std::vector<hex_table> tables(sparse_columns);
  parsed_line pl;
  uint32_t fresh = 0;
  auto pass = [&] {
    uint64_t rows = 0, sum = 0;
    for (const char* p = block.data(); p < block.data() + text_bytes;) {
      const char* next = parse_criteo_line_fast(p, max_field, pl);
      if (next == nullptr) break;  // (never: the block is good text)
      for (int c = 0; c < sparse_columns; ++c) {
        uint32_t v = 0;
        bool inserted = false;
        if (hex8_value(pl.sparse[c], v)) sum += tables[std::size_t(c)].count(v, fresh, inserted);
        fresh += inserted;
      }
      for (int j = 0; j < dense_columns; ++j) sum += static_cast<uint64_t>(pl.dense[j]);
      ++rows;
      p = next;
    }
    __asm__ volatile("" : : "r"(sum));  // the sums (and so the parse) are not dropped
    return rows;
  };
  (void)pass();  // untimed: the block into the caches, the tables filled
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t rows = 0;
  double s = 0;
  do {
    rows += pass();
    s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (s < seconds);
  return s > 0 ? static_cast<double>(rows) / s : 0;
}

std::vector<uint64_t> split_weights(const std::vector<uint64_t>& milli_cores, const std::vector<double>& rows_per_s) {
  const std::size_t n = milli_cores.size();
  const bool by_cores = rows_per_s.empty();
  auto rate = [&](std::size_t i) {
    if (by_cores) return 1.0;
    return i < rows_per_s.size() && rows_per_s[i] > 0 ? rows_per_s[i] : 0.0;
  };
  double fastest = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (milli_cores[i] > 0) fastest = std::max(fastest, rate(i));
  std::vector<uint64_t> w(n, 0);
  uint64_t sum = 0, known = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (milli_cores[i] == 0 || rate(i) == 0) continue;
    w[i] = std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(double(milli_cores[i]) * rate(i) / fastest)));
    sum += w[i];
    ++known;
  }
  for (auto& x : w)
    if (x == 0) x = known ? std::max<uint64_t>(1, sum / known) : 1000;
  return w;
}

}  // namespace hetflow::kernels::preprocess
