// control_board: what a shell may ask of a running actor besides kill, per
// process (no CAF): whether an actor honours pause, and whether it is paused
// right now. An actor that honours pause calls allow_pause(me) when it
// starts and checks paused(me) where it may stop (a HetPipe stage: before
// each minibatch); the node actor sets the flag for `hetflow shell`'s
// `pause ACTOR` / `resume ACTOR`.
//
// Thread affinity: any thread (one mutex).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace hetflow::actors::control {

void allow_pause(const std::string& actor);
void forget(const std::string& actor);  // at the actor's end: no longer pausable, not paused
bool pausable(const std::string& actor);
void set_paused(const std::string& actor, bool paused);
bool paused(const std::string& actor);

// `set staleness D` for this process's job (HetPipe shards poll it); -1:
// none asked.
void set_staleness(int64_t d);
int64_t staleness();

// `hetflow shell`'s checkpoint: a request for one more checkpoint at clock
// `label`, which this process's PS shards take at their next tick (at most
// 250 ms); each records its answer under the request's generation.
struct checkpoint_request {
  int64_t generation = 0;  // 0: none asked yet
  int64_t label = -1;
};
int64_t request_checkpoint(int64_t label);  // the new request's generation
checkpoint_request checkpoint_requested();
// The newest request if its generation is not `seen` (the one its caller
// took last), which it then becomes: each request is taken once.
std::optional<checkpoint_request> take_new_checkpoint_request(int64_t& seen);
struct checkpoint_answer {
  bool ok = false;
  std::string text;
};
void answer_checkpoint(const std::string& shard, int64_t generation, bool ok, std::string text);
// The answers given to request `generation` so far, by shard.
std::map<std::string, checkpoint_answer> checkpoint_answers(int64_t generation);

}  // namespace hetflow::actors::control
