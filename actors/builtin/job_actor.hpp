// What every job actor does the same way: who it is, the node services, the
// start gate (messages before start_atom stay in the mailbox), failing
// (report once, quit), and decoding wire messages with the node's limits.
// Include from .cpp files only (pulls caf/all.hpp).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "actors/caf_types.hpp"
#include "actors/node_services.hpp"
#include "actors/registry.hpp"

namespace hetflow::actors::builtin {

// Base of a job actor's state.
struct job_actor_state {
  std::shared_ptr<node_services> svc;
  std::string me;
};

// Call first in the actor's function: fills the base state and holds every
// message but start_atom until the job starts.
template <class State>
void init_job_actor(caf::stateful_actor<State>* self, const actor_env& env) {
  self->state.svc = env.services;
  self->state.me = env.spec.name;
  self->set_default_handler(caf::skip);
}

// Call in the start_atom handler: from now on, unexpected messages are
// reported and dropped, and `handlers` run.
template <class Self, class... Handlers>
void become_running(Self* self, Handlers... handlers) {
  self->set_default_handler(caf::print_and_drop);
  self->become(std::move(handlers)...);
}

template <class State>
void fail_job_actor(caf::stateful_actor<State>* self, const std::string& why) {
  self->state.svc->report_done(self->state.me, false, why, {});
  self->quit();
}

// A blocking job actor's start gate: waits for start_atom (other messages
// stay in the mailbox); false when the node stops first.
inline bool await_start(caf::blocking_actor* self, const node_services& svc) {
  bool started = false;
  while (!started) {
    self->receive([&](start_atom) { started = true; }, caf::after(std::chrono::milliseconds(200)) >> [] {});
    if (!started && svc.stopping().load()) return false;
  }
  return true;
}

// Decodes `buf` from node `from`; on error fails the actor and returns nothing.
template <class State>
std::optional<schemas::decoded_message> decode_or_fail(caf::stateful_actor<State>* self,
                                                       const std::string& from,
                                                       const wire_buffer_ref& buf) {
  auto msg = schemas::decode_message(buf, self->state.svc->read_limits(), "node '" + from + "'");
  if (!msg) {
    fail_job_actor(self, msg.error().to_string());
    return std::nullopt;
  }
  return std::move(*msg);
}

}  // namespace hetflow::actors::builtin
