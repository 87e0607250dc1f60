// ps_clock: the clocks and consistency models of the parameter servers, in
// plain C++ (no CAF, no kernels): a ps_shard owns one clock_table, a test can
// drive one with no actor system.
//
// Clocks. Worker w's local clock c_w is the number of its updates (pushes)
// the table has received *in order* (a push tagged t is w's (t+1)-th
// update; pushes that arrive early are held until t == c_w, so reordering
// on the wire cannot skip one). The global clock g is the minimum of c_w over
// the workers that have not finished (a finished worker no longer holds the
// others back; when every worker has finished g is `infinite`).
//
// Consistency (Petuum's SSP rule). A worker at clock c (about to compute its
// update tagged c) may read weights once
//
//     bsp       g >= c                 (every update of clocks < c is in)
//     ssp(s)    g >= c - s             (every update of clocks <= c - s - 1 is in)
//     asp       always
//
// so BSP is SSP(0), and a worker at clock c never computes with weights that
// miss an update from clock c - s - 1 or older of any worker (DESIGN.md's
// bound; ours also includes clock c - s - 1 itself). The shard makes the
// weights it serves contain every update the table has counted by the time
// it answers (ps_shard_core applies before it releases), so the bound on g
// is a bound on the weights.
//
// Pulls that may not be answered yet wait in the table; tick()/finish()
// return the ones the new global clock releases. slowest() names the worker
// holding the minimum: what a timed-out pull's error message names.
//
// WSP (HetPipe, issue 7) reuses this table unchanged: a "worker" is a
// virtual worker, its clock counts waves (one aggregated push per wave per
// stage, tagged with the wave number), and the bound is ssp(D): a virtual
// worker at wave c may start a wave's minibatches with weights once g >= c - D.
// The local staleness inside a wave (Nm - 1) is the pipeline's business,
// not the table's.
//
// Thread affinity: none; not thread-safe (one owner: the shard actor).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "schemas/error.hpp"

namespace hetflow::ps {

enum class consistency : uint8_t { bsp, ssp, asp };

struct consistency_model {
  consistency kind = consistency::bsp;
  int64_t staleness = 0;  // ssp only (bsp: 0; asp: unbounded)

  static consistency_model bsp() { return {consistency::bsp, 0}; }
  static consistency_model ssp(int64_t s) { return {consistency::ssp, s}; }
  static consistency_model asp() { return {consistency::asp, 0}; }

  // The global clock a reader at clock c needs (bsp: c, ssp: c - s, asp:
  // the lowest value).
  int64_t required_global(int64_t c) const noexcept;
  bool may_read(int64_t worker_clock, int64_t global) const noexcept {
    return global >= required_global(worker_clock);
  }
  std::string to_string() const;  // "bsp", "ssp(3)", "asp"
};

// "bsp", "ssp", "asp" + staleness; errc::invalid_argument otherwise.
expected<consistency_model> parse_consistency(const std::string& name, int64_t staleness);

inline constexpr int64_t infinite_clock = std::numeric_limits<int64_t>::max();

// A pull waiting for the global clock. `id` is the caller's (e.g. a request
// number); the table only keeps and returns it.
struct pull_ticket {
  int worker = 0;
  int64_t clock = 0;
  uint64_t id = 0;
};

class clock_table {
public:
  clock_table(int workers, consistency_model model);

  int workers() const noexcept { return int(clocks_.size()); }
  const consistency_model& model() const noexcept { return model_; }
  // A new bound from now on (`hetflow shell`'s `set staleness`): waiting
  // pulls it allows come out of the next released().
  void set_model(consistency_model m) noexcept { model_ = m; }

  // Sets every local clock (a restore from a checkpoint). Clears held pushes.
  void restore(const std::vector<int64_t>& clocks);

  // Worker w's push tagged `tag` arrived. Returns the tags of w's pushes that
  // are now in order (tag itself and any held ones after it), in order; the
  // local clock has moved past them. errc::invalid_argument for a tag below
  // the local clock or already held (a duplicate), or a worker out of range.
  expected<std::vector<int64_t>> on_push(int w, int64_t tag);

  // Worker w will push exactly `final_clock` updates in all: once its local
  // clock gets there it stops counting for the minimum.
  status finish(int w, int64_t final_clock);

  // A pull: true when it may be answered now (and it is not stored);
  // false when it waits (stored until released() gives it back or the
  // caller takes it with take_waiting()).
  bool request(const pull_ticket& t);
  // Waiting pulls that the current global clock allows; removed from the table.
  std::vector<pull_ticket> released();
  // Every waiting pull (e.g. to fail them at shutdown); removed.
  std::vector<pull_ticket> take_waiting();
  const std::vector<pull_ticket>& waiting() const noexcept { return waiting_; }

  int64_t clock(int w) const { return clocks_.at(std::size_t(w)); }
  const std::vector<int64_t>& clocks() const noexcept { return clocks_; }
  bool finished(int w) const;
  bool all_finished() const;
  // min over unfinished workers; infinite_clock when all have finished.
  int64_t global() const;
  // The unfinished worker with the lowest clock (the lowest index among
  // equals); -1 when all have finished.
  int slowest() const;

private:
  consistency_model model_;
  std::vector<int64_t> clocks_;
  std::vector<int64_t> final_;                 // -1: not announced
  std::vector<std::map<int64_t, bool>> held_;  // early pushes per worker
  std::vector<pull_ticket> waiting_;
};

}  // namespace hetflow::ps
