#include "kernels/cpu/omp_policy.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace hetflow::kernels::cpu {
namespace {

// The environment libgomp read when this process was loaded (before main
// and before any setenv here).
std::string policy_from_environment() {
  const char* w = std::getenv("OMP_WAIT_POLICY");
  const char* s = std::getenv("GOMP_SPINCOUNT");
  if (w != nullptr) return s != nullptr ? std::string(w) + ", GOMP_SPINCOUNT=" + s : std::string(w);
  if (s != nullptr) return std::string("default, GOMP_SPINCOUNT=") + s;
  return "default";
}
const std::string at_start = policy_from_environment();

// Neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set.
bool omp_wait_policy_unset() {
  return std::getenv("OMP_WAIT_POLICY") == nullptr && std::getenv("GOMP_SPINCOUNT") == nullptr;
}

}  // namespace

const std::string& omp_wait_policy_in_effect() { return at_start; }

std::string reexec_with_passive_omp_wait(char** argv) {
  if (!omp_wait_policy_unset()) return {};
  if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0)
    return std::string("cannot set OMP_WAIT_POLICY: ") + std::strerror(errno);
  std::fflush(nullptr);
  execv("/proc/self/exe", argv);
  // Still here: no /proc, or the binary is gone. Go on as loaded (the
  // variable stays set for the processes this one starts, as in
  // set_passive_omp_wait_for_children; omp_wait_policy_in_effect() still
  // says what libgomp read).
  return std::string("cannot exec /proc/self/exe: ") + std::strerror(errno);
}

void set_passive_omp_wait_for_children() {
  if (omp_wait_policy_unset()) setenv("OMP_WAIT_POLICY", "passive", 1);
}

}  // namespace hetflow::kernels::cpu
