// CAF-side declarations shared by actor implementations: atoms and the
// local-only message types. Include from .cpp files only (pulls caf/all.hpp).
//
// Wire rule: only CAF built-in types cross the network (std::string,
// std::vector<char>, std::vector<std::string>, std::vector<caf::actor>,
// integers, bool, atoms). wire_buffer_ref is local-only: it carries tensors
// between actors of one node by reference.
#pragma once

#include <caf/all.hpp>

#include "schemas/wire_buffer.hpp"

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(hetflow::wire_buffer_ref)

namespace hetflow::actors {

// Node protocol.
using hello_atom = caf::atom_constant<caf::atom("hello")>;
using challenge_atom = caf::atom_constant<caf::atom("challenge")>;  // ask a node for its nonce
using joined_atom = caf::atom_constant<caf::atom("joined")>;
using ready_atom = caf::atom_constant<caf::atom("ready")>;
using start_atom = caf::atom_constant<caf::atom("start")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;
using interrupt_atom = caf::atom_constant<caf::atom("interrupt")>;
using dp_atom = caf::atom_constant<caf::atom("dp")>;      // CAF data-plane bytes
using dperr_atom = caf::atom_constant<caf::atom("dperr")>;  // data-plane failure
using dperrlate_atom = caf::atom_constant<caf::atom("dperrlate")>;  // ... still unexplained after the grace
using grace_atom = caf::atom_constant<caf::atom("grace")>;
using left_atom = caf::atom_constant<caf::atom("left")>;  // a peer exited cleanly

// Actor protocol.
using wire_atom = caf::atom_constant<caf::atom("wire")>;  // (wire_atom, from_node, wire_buffer_ref)
using credit_atom = caf::atom_constant<caf::atom("credit")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using result_atom = caf::atom_constant<caf::atom("result")>;

}  // namespace hetflow::actors
