// control_board: what a shell may ask of a running actor besides kill, per
// process (no CAF): whether an actor honours pause, and whether it is paused
// right now. An actor that honours pause calls allow_pause(me) when it
// starts and checks paused(me) where it may stop (a HetPipe stage: before
// each minibatch); the node actor sets the flag for `hetflow shell`'s
// `pause ACTOR` / `resume ACTOR`.
//
// Thread affinity: any thread (one mutex).
#pragma once

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

}  // namespace hetflow::actors::control
