#include "actors/builtin/preprocess.hpp"
#include "actors/builtin/skeleton.hpp"
#include "actors/builtin/stream_job.hpp"
#include "actors/registry.hpp"
#include "actors/ring/ring_member.hpp"
#include "actors/ps/ps_job.hpp"
#include "actors/hetpipe/hp_job.hpp"
#include "actors/ralp/ralp_job.hpp"

namespace hetflow::actors::builtin {
void add_allreduce_bench(registry& reg);  // allreduce_bench.cpp: ring_check, allreduce_bench
}

namespace hetflow::actors {

void add_builtin_types(registry& reg) {
  builtin::add_skeleton(reg);
  builtin::add_transport_bench(reg);
  builtin::add_train(reg);
  builtin::add_preprocess(reg);
  builtin::add_stream_shard(reg);
  ring::add_ring_member(reg);
  builtin::add_allreduce_bench(reg);
  ps_job::add_types(reg);
  ralp_job::add_types(reg);
  hp_job::add_types(reg);
}

}  // namespace hetflow::actors
