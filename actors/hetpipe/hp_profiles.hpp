// HetPipe's profiles on a cluster of several machines (no profile_file).
//
// The head measures the devices of its own host, as `hetflow plan` does, and
// asks one node of every other host (its hp_ps actor, which answers while it
// waits for its role) to measure that host's devices: each node measures
// what `hetflow profile --out` would for the devices of the nodes on its
// host, and the head merges the answers (topology::merge_profile_dbs), each
// host's kinds named "HOST-cpu-tN" / "HOST-cudaI". So the planner sees every
// machine's own speed instead of assuming every machine is like the head's.
//
//   hphead                               hpps<n> (first node of another host)
//     -- kind_profile (text "") --------->   measures its host's devices
//     <-- kind_profile (text: answer) ----   or kind_error naming why
//
// The answer's text: one line "node device kind" per device measured, an
// empty line, then the profile file's JSON.
#pragma once

#include <string>

#include "actors/hetpipe/hp_inbox.hpp"
#include "schemas/error.hpp"
#include "topology/cluster.hpp"
#include "topology/profile_db.hpp"

namespace hetflow::actors::hp_job {

// (measure_host_profiles, the answer, is declared in hp_job.hpp.)

// The head: the job's profiles when there is no profile_file: measured here
// for this host's devices and asked of one node per other host; sets every
// device's `profile` in `c` to its kind. `source` says where they came from.
// Hosts are told apart by the nodes' `host` strings (the test-only
// environment variable HETFLOW_DRILL_REMOTE_PROFILE=1 treats every node but
// the head's as another host).
expected<topology::profile_db> cluster_profiles(inbox& ib, topology::cluster& c, int64_t batch);

}  // namespace hetflow::actors::hp_job
