#include "kernels/cpu/thread_slice.hpp"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

namespace hetflow::kernels::cpu {
namespace {

// include/uapi/linux/sched/types.h (SCHED_ATTR_SIZE_VER0: 48 bytes); glibc
// 2.36 has no wrapper.
struct sched_attr_v0 {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime;
  uint64_t sched_deadline;
  uint64_t sched_period;
};
static_assert(sizeof(sched_attr_v0) == 48);

}  // namespace

std::string set_thread_slice_us(uint32_t us) {
#if defined(SYS_sched_setattr) && defined(SYS_sched_getattr)
  sched_attr_v0 a{};
  if (syscall(SYS_sched_getattr, 0, &a, sizeof a, 0) != 0)
    return std::string("sched_getattr: ") + std::strerror(errno);
  // Only the fair classes have slices; a real-time thread is left alone.
  if (a.sched_policy != SCHED_OTHER && a.sched_policy != SCHED_BATCH) return {};
  a.size = sizeof a;
  a.sched_flags = 0;
  a.sched_runtime = uint64_t{us} * 1000;
  a.sched_deadline = a.sched_period = 0;
  if (syscall(SYS_sched_setattr, 0, &a, 0) != 0) return std::string("sched_setattr: ") + std::strerror(errno);
  return {};
#else
  (void)us;
  return "sched_setattr: not available";
#endif
}

uint32_t thread_slice_us() {
#if defined(SYS_sched_getattr)
  sched_attr_v0 a{};
  if (syscall(SYS_sched_getattr, 0, &a, sizeof a, 0) != 0) return 0;
  if (a.sched_policy != SCHED_OTHER && a.sched_policy != SCHED_BATCH) return 0;
  return static_cast<uint32_t>(a.sched_runtime / 1000);
#else
  return 0;
#endif
}

process_slices process_thread_slices() {
  process_slices r;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream in(task.path() / "sched");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("se.slice", 0) != 0) continue;
      const auto colon = line.find(':');
      if (colon == std::string::npos) break;
      const auto us = static_cast<uint32_t>(std::strtoull(line.c_str() + colon + 1, nullptr, 10) / 1000);
      r.min_us = r.threads == 0 ? us : std::min(r.min_us, us);
      r.max_us = std::max(r.max_us, us);
      ++r.threads;
      break;
    }
  }
  return r;
}

}  // namespace hetflow::kernels::cpu
