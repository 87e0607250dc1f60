// ps_worker: one parameter-server worker of the train job (strategy "ps"):
// a blocking actor (its own thread) running the worker's training loop,
//
//   [--resume: ask every shard for its checkpoints, restore the newest they
//    all have, start at its restored clock]
//   for each of its steps (steps j of every epoch with j % workers == rank):
//     pull (clock c) from every shard -> weights into the model
//     forward, loss, backward on the step's batch
//     push (tag c, the step's learning rate, each shard's gradients)
//   done (its clock) -> every shard; worker 0: final pull, evaluate, bye
//
// one outstanding request at a time; every wait is bounded (ps_timeout +
// 10 s for a shard's answer; the shard answers a too-long wait itself,
// naming the slowest worker; stream_timeout for a streamed batch) and polls
// node_services::stopping().
//
// The step's batch comes from memory (input = "memory": the whole training
// set loaded on the worker's node) or from its stream shards (input =
// "stream": builtin/stream_job.hpp; batches and PS replies share the
// mailbox, see shard_link in ps_worker.cpp). With --resume and streamed
// input the worker takes and drops the batches of the steps before its
// restored clock, as the shards replay every epoch from its start.
#pragma once

namespace hetflow::actors {
class registry;
}

namespace hetflow::actors::ps_job {

// Registers the actor type "ps_worker" (args: rank, device).
void add_ps_worker(registry& reg);

}  // namespace hetflow::actors::ps_job
