#include "kernels/cpu/omp_policy.hpp"

#include <unistd.h>

#include <cstdlib>

namespace hetflow::kernels::cpu {

bool omp_wait_policy_unset() {
  return std::getenv("OMP_WAIT_POLICY") == nullptr && std::getenv("GOMP_SPINCOUNT") == nullptr;
}

void reexec_with_passive_omp_wait(char** argv, const char** why) {
  if (why) *why = nullptr;
  if (!omp_wait_policy_unset()) return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv);
  // Still here: no /proc, or the binary is gone. Go on as loaded; the
  // variable stays set for the children, as in set_passive_omp_wait_for_children.
  if (why) *why = "cannot exec /proc/self/exe";
}

void set_passive_omp_wait_for_children() {
  if (omp_wait_policy_unset()) setenv("OMP_WAIT_POLICY", "passive", 1);
}

}  // namespace hetflow::kernels::cpu
