#include "kernels/cpu/thread_slice.hpp"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

}  // namespace hetflow::kernels::cpu
