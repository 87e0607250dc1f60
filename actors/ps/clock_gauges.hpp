// Clock gauges of a parameter server (PS shard or RALP server) and its
// workers on /metrics and in the shell's `clocks`: what the clock table
// says right now. Call after anything that moves a clock.
#pragma once

#include <algorithm>
#include <string>

#include "actors/metrics.hpp"
#include "actors/ps/ps_clock.hpp"

namespace hetflow::ps {

inline void publish_server_clocks(const std::string& me, const clock_table& t) {
  const actors::metrics::labels l{{"actor", me}};
  int64_t lo = -1, hi = -1;
  for (int64_t c : t.clocks()) {
    lo = lo < 0 ? c : std::min(lo, c);
    hi = std::max(hi, c);
  }
  const int s = t.slowest();
  actors::metrics::set_gauge("hetflow_ps_global_clock",
                     "A PS server's global clock: the lowest clock of its unfinished workers (every update below it "
                     "is in)",
                     l, s < 0 ? double(hi) : double(t.clock(s)));
  actors::metrics::set_gauge("hetflow_ps_slowest_clock", "The slowest worker's clock as this PS server counts it", l,
                     double(std::max<int64_t>(lo, 0)));
  actors::metrics::set_gauge("hetflow_ps_fastest_clock", "The fastest worker's clock as this PS server counts it", l,
                     double(std::max<int64_t>(hi, 0)));
  actors::metrics::set_gauge("hetflow_ps_clock_spread",
                     "Fastest minus slowest worker clock: the staleness the workers run at right now", l,
                     double(std::max<int64_t>(hi - lo, 0)));
  const auto& m = t.model();
  actors::metrics::set_gauge("hetflow_ps_staleness_bound",
                     "The consistency model's bound on the spread (bsp 0, ssp its staleness, asp -1: none)", l,
                     m.kind == consistency::asp ? -1.0 : double(m.kind == consistency::ssp ? m.staleness : 0));
}

inline void publish_worker_clock(const std::string& me, int64_t clock) {
  actors::metrics::set_gauge("hetflow_ps_clock", "A PS or RALP worker's local clock (updates pushed)", {{"actor", me}},
                     double(clock));
}

}  // namespace hetflow::ps
