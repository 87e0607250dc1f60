// shell_client: the CAF side of `hetflow shell` (the rest of the client,
// apps/shell_command.cpp, uses no CAF). Connects to nodes' gates, proves the
// cluster secret (shell_service.hpp draws the exchange) and sends the
// shell's requests, each with a deadline: nothing here waits without one.
//
// One actor system per client; connections are kept per host:port and made
// again once when a request finds one broken. Not thread-safe: one caller.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "schemas/error.hpp"

namespace hetflow::actors {

struct shell_client_options {
  std::string secret;        // the cluster secret; empty: none (a node with one refuses us)
  std::string name;          // how nodes log this client ("shell@HOST:PID")
  double timeout_s = 5.0;    // each connect and each request
  double heartbeat_s = 0.2;  // CAF heartbeats: a node drops connections silent past its connection_timeout
};

struct shell_reply {
  bool ok = false;    // false: the node answered with an error (`body` says what)
  std::string body;   // JSON for "state"; text for kill and errors
  std::string node;   // the node's name, as it said in its welcome
};

class shell_client {
public:
  explicit shell_client(shell_client_options o);
  ~shell_client();
  shell_client(const shell_client&) = delete;
  shell_client& operator=(const shell_client&) = delete;

  // Errors (peer_down, peer_refused, timeout): nobody listens at host:port, no hetflow
  // node answers there in time, the node refused the shell (the message
  // says why), the connection broke, a request timed out.
  expected<shell_reply> state(const std::string& host, int port);
  expected<shell_reply> kill(const std::string& host, int port, const std::string& actor);
  // pause (true) or resume (false) an actor that honours it.
  expected<shell_reply> pause(const std::string& host, int port, const std::string& actor, bool pause);
  // `set staleness D` on one node.
  expected<shell_reply> set_staleness(const std::string& host, int port, int64_t d);
  // One more checkpoint at clock `label` on the node's PS shards.
  expected<shell_reply> checkpoint(const std::string& host, int port, int64_t label);
  // The same on several nodes at once: every request is sent before any
  // answer is awaited, so the nodes take it within a few milliseconds of
  // each other. One result per node, in order.
  std::vector<expected<shell_reply>> checkpoint_all(const std::vector<std::pair<std::string, int>>& nodes,
                                                    int64_t label);

  struct impl;

private:
  std::unique_ptr<impl> impl_;
};

}  // namespace hetflow::actors
