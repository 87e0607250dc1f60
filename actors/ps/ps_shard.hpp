// ps_shard: one parameter-server shard of the train job (strategy "ps"): a
// detached event-based actor around a ps::shard_core (ps_shard_core.hpp:
// parameters, optimizer, clock table, checkpoints), speaking
// ps_protocol.hpp with the ps_worker actors. A tick every 250 ms fails pulls
// that waited longer than `ps_timeout`, naming the slowest worker (the one
// holding the global clock back), and stops the job. It reports and quits
// when worker 0 says bye (after the final pull).
#pragma once

namespace hetflow::actors {
class registry;
}

namespace hetflow::actors::ps_job {

// Registers the actor type "ps_shard" (args: shard).
void add_ps_shard(registry& reg);

}  // namespace hetflow::actors::ps_job
