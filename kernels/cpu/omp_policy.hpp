// The OpenMP wait policy hetflow's processes compute under.
//
// oneDNN in Debian runs its primitives on libgomp, whose workers by default
// spin for a while at every barrier. Beside oneTBB's workers, CAF's
// scheduler, the data plane and a HetPipe stage's push thread they take the
// cores those need: DLRM at small sizes trained 6x slower (bench/RESULTS.md,
// DLRM), LeNet-5 and VGG-11 on 2 threads 4-34% slower (2026-11-28). So the
// processes that compute (`hetflow node`, and `profile`, `plan`, `simulate`,
// which measure what the nodes will run) use OMP_WAIT_POLICY=passive unless
// the environment already sets OMP_WAIT_POLICY or GOMP_SPINCOUNT.
//
// libgomp reads its environment when it is loaded, before main: the policy
// can only be changed by starting the program again with it set.
#pragma once

#include <string>

namespace hetflow::kernels::cpu {

// What libgomp read when this process was loaded: OMP_WAIT_POLICY's value
// (with ", GOMP_SPINCOUNT=N" when that is set too), or "default" (or
// "default, GOMP_SPINCOUNT=N"). Not changed by the setenv calls below.
const std::string& omp_wait_policy_in_effect();

// When neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set: sets
// OMP_WAIT_POLICY=passive and execs this program again (/proc/self/exe) with
// the same arguments; it does not return then. Returns "" when there is
// nothing to do, else why the exec failed (the process goes on with
// libgomp's default).
std::string reexec_with_passive_omp_wait(char** argv);

// Sets OMP_WAIT_POLICY=passive in this process's environment when neither
// variable is set, for the processes it starts (hetflow run's nodes); this
// process's own libgomp keeps what it read at load.
void set_passive_omp_wait_for_children();

}  // namespace hetflow::kernels::cpu
