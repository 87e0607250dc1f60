// metrics: a node's Prometheus endpoint. With `metrics_port = P` in
// [cluster], node i serves GET /metrics on its own host at port P + i (the
// head at P), in the Prometheus text format 0.0.4, until it exits.
//
//   # HELP hetflow_data_plane_bytes_sent_total Bytes this node sent over the data plane.
//   # TYPE hetflow_data_plane_bytes_sent_total counter
//   hetflow_data_plane_bytes_sent_total{cluster="c",node="n0"} 1048576
//
// Values come from two places: gauges that actors set as they go (set();
// progress of training and pre-processing, which actors run) and a
// collector the node runs at each scrape (data plane counters, uptime,
// resident memory). Labels `cluster` and `node` are added to every sample.
//
// The server is one thread: it accepts one connection at a time, reads at
// most 8 KiB of request head within 2 s, answers and closes (HTTP/1.0
// semantics, Connection: close). GET /metrics -> 200; any other path -> 404;
// any other method -> 405. Never blocks the node: the collector and set()
// take one mutex for microseconds.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "schemas/error.hpp"

namespace hetflow::actors::metrics {

enum class kind { gauge, counter };
using labels = std::vector<std::pair<std::string, std::string>>;

// Sets (creates) a sample. `name` must match [a-zA-Z_:][a-zA-Z0-9_:]*; the
// first call for a name fixes its help and kind. Thread-safe.
void set(std::string_view name, std::string_view help, kind k, const labels& l, double value);
inline void set_gauge(std::string_view name, std::string_view help, const labels& l, double value) {
  set(name, help, kind::gauge, l, value);
}

// Replaces every sample of a family at once (a family whose label sets come
// and go, such as the open waits): afterwards it holds exactly `samples`.
void replace(std::string_view name, std::string_view help, kind k,
             const std::vector<std::pair<labels, double>>& samples);

// The exposition text of every sample, with `common` labels first on each.
std::string render(const labels& common);

// Forgets every sample (tests).
void reset();

// Escapes a label value (backslash, double quote, newline).
std::string escape_label(std::string_view v);

class http_server {
public:
  // Listens on host:port (host as in the topology: a name or an address;
  // port 0: any free port, see port())
  // and serves until stop() or destruction. `collect` runs before each
  // render (on the server thread). Errors: the address cannot be resolved,
  // the port is taken.
  static expected<std::unique_ptr<http_server>> start(const std::string& host, int port, labels common,
                                                      std::function<void()> collect);
  ~http_server();
  void stop();
  int port() const noexcept;

  struct impl;

private:
  explicit http_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace hetflow::actors::metrics
