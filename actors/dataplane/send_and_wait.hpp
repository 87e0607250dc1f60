// send_and_wait: a data_plane send whose caller waits, at most `linger`, for
// the send's completion (node_services::send_wire's linger). For a thread
// that computes right after a send the next node waits for (a pipeline
// stage's activations): blocked, it leaves its core to the data plane's
// progress thread, which on a node with as many busy threads as cores
// otherwise waited for the end of the sender's time slice and held the
// message up to 2.5 ms (bench/RESULTS.md, HetPipe).
#pragma once

#include <chrono>

#include "actors/dataplane/data_plane.hpp"

namespace hetflow::dataplane {

// dp.send(peer, channel, msg, done), then, if it was accepted and linger > 0,
// waits until `done` has run (as dp runs it: at once, on dp's thread, or
// never) or linger has passed, whichever is first. Returns send()'s status.
// Never from dp's own thread with a linger: `done` runs there, so the call
// would wait the whole linger.
status send_and_wait(data_plane& dp, peer_id peer, channel_id channel, wire_buffer_ref msg, send_completion done,
                     std::chrono::microseconds linger);

}  // namespace hetflow::dataplane
