// resources: the cores and memory that are really free to this process, and
// the degree of parallelism chosen from them.
//
// Reads (under `root`, "/" on a real machine; a test passes a fake tree):
//   /proc/self/cgroup            which cgroup we are in (v1 and v2)
//   cgroup v2: cpu.max ("max 100000" | "QUOTA PERIOD"), memory.max, memory.current
//   cgroup v1: cpu.cfs_quota_us / cpu.cfs_period_us, memory.limit_in_bytes,
//              memory.usage_in_bytes
//   /proc/meminfo (MemTotal, MemAvailable), /proc/loadavg (1-minute load),
//   /proc/self/status (VmRSS), and sched_getaffinity for the usable cores
//   (only when root is "/").
// A cgroup file missing under the process's own path is looked up at the
// controller's root (containers often mount their own cgroup there).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hetflow::kernels::preprocess {

struct resource_snapshot {
  int cores = 1;                   // usable by this process (affinity)
  int machine_cores = 0;           // online on the machine (0: unknown, taken as `cores`)
  double cpu_quota = 0;            // cgroup CPU quota in cores; 0 = none
  double load1 = 0;                // 1-minute load average of the machine
  uint64_t mem_total = 0;          // /proc/meminfo MemTotal
  uint64_t mem_available = 0;      // /proc/meminfo MemAvailable
  uint64_t cgroup_mem_limit = 0;   // 0 = none
  uint64_t cgroup_mem_usage = 0;
  uint64_t rss = 0;                // this process's resident set

  // Memory we may still take: MemAvailable, capped by the cgroup's headroom.
  uint64_t free_memory() const noexcept;
  // Cores left after the other processes' load (our own `busy_here` threads
  // count in the load average and are added back).
  double free_cores(int busy_here) const noexcept;
  // What this process can count on, in cores, to cut a job's input across
  // nodes by: its usable cores (affinity, capped by the cgroup quota) less the
  // machine's load in proportion to them (the 1-minute load average is the
  // whole machine's), at least one core (or the usable cores when fewer),
  // at most `forced` when > 0 (the threads it will run), in quarter cores
  // (two processes that read one machine agree).
  double capacity_cores(int forced) const noexcept;
  std::string to_string() const;  // "2 cores (quota none), load 0.4, 20.1 GiB free, rss 80 MiB"
};

resource_snapshot probe_resources(const std::string& root = "/");

// This thread's speed at pass 1's kind of work, in rows per second of wall
// time: parsing a fixed block of synthetic Criteo rows (the same bytes on
// every machine, made once per process) and counting their 26 columns in
// open-addressing tables as count_shard does, again and again for
// `seconds` (after one untimed pass). What one core of this node gives
// now: an older or slower CPU reads lower, and so does a core that other
// work (another process, a hypervisor's other guests) takes turns on - as
// long as `seconds` spans several of the scheduler's slices of that work
// (tens of ms: a 2 ms window read full speed or a third of it beside a
// busy loop on the same core). The preprocess job's split by speed
// ([job] split_by = "speed") weighs each node's cores by it.
double pass1_rows_per_s(double seconds = 0.03);

// The measured split's weights: node i's milli-cores, times its rows/s over
// the fastest node's when `rows_per_s` is given (split_by = "speed"; empty:
// the cores alone). At least 1 each. A node whose cores (or, by speed, its
// speed) are unknown (0: lost before it said) weighs the mean of the others
// (1000 when none is known).
std::vector<uint64_t> split_weights(const std::vector<uint64_t>& milli_cores, const std::vector<double>& rows_per_s);

// The degree of parallelism: `forced` (> 0) wins; otherwise the free cores
// (rounded, at least 1), lowered until `per_worker_bytes` each fit in
// `memory_budget` (0 = no memory limit), and at most `max_workers`.
int choose_parallelism(const resource_snapshot& r, int forced, int busy_here,
                       uint64_t per_worker_bytes, uint64_t memory_budget, int max_workers);

uint64_t current_rss() noexcept;

// The degree of parallelism of a long job, chosen again from the resources at
// most every `every_s` seconds (choose_parallelism, counting its own current
// workers as busy here); `forced` > 0 pins it. `root` and `max_workers` (0 =
// the machine's cores) are for tests (a fake /proc and /sys tree).
class parallelism_governor {
public:
  parallelism_governor(int forced, uint64_t per_worker_bytes, double every_s = 0.5, std::string root = "/",
                       int max_workers = 0);
  int current() const noexcept { return dop_; }
  int update();  // the degree to use now
  int min_seen() const noexcept { return min_; }
  int max_seen() const noexcept { return max_; }

private:
  int choose(int busy);
  int forced_;
  uint64_t per_worker_;
  double every_s_;
  std::string root_;
  int max_workers_;
  int dop_ = 1, min_ = 1, max_ = 1;
  double last_ = 0;  // steady-clock seconds of the last probe
};

}  // namespace hetflow::kernels::preprocess
