// ps_shard_core: the state machine of one parameter-server shard, in plain
// C++ (the ps_shard actor wraps it; tests drive it directly).
//
// It holds a slice of the model's parameters (ps_placement), the optimizer
// state for them (kernels::optimizer: SGD momentum, Adam, weight decay), and
// a clock_table. Each push is one optimizer step with the pushing worker's
// gradient and learning rate. When a push is applied:
//
//   - a worker's pushes are applied in tag order (held until the previous
//     one came), so the weights always contain a prefix of each worker's
//     updates and `applied_clocks()` is a data position;
//   - bsp: pushes are applied in (tag, worker) order once every worker has
//     pushed that tag (tag < global clock), so the result does not depend on
//     arrival order: a run is reproducible, and one worker equals
//     single-device training;
//   - ssp/asp: on arrival (in tag order per worker), except
//   - with checkpoints every N clocks: a push tagged >= the next checkpoint
//     label K waits until the global clock reaches K and checkpoint K is
//     written, so checkpoint K holds exactly the updates of clocks < K of
//     every worker on every shard (a consistent cut across shards). This
//     never delays a pull: a pull the bound allows needs only tags < global.
//
// Pulls that the consistency model does not allow yet wait in the clock
// table; push() and done() return the ones they release, after applying, so
// the answer sees every update the table counted.
//
// Thread affinity: one owner thread (the shard actor). The optimizer uses
// oneTBB inside.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "actors/ps/ps_checkpoint.hpp"
#include "actors/ps/ps_clock.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/unit.hpp"
#include "schemas/error.hpp"

namespace hetflow::ps {

struct shard_config {
  std::string name = "ps0";
  int shard = 0, shards = 1, workers = 1;
  consistency_model model;
  kernels::optimizer_config optimizer;
  int64_t checkpoint_every = 0;  // clocks between checkpoints; 0: none
  std::string checkpoint_dir;    // a directory store there when `store` is null
  // Where checkpoints go; null and no checkpoint_dir: no checkpoints (not
  // even the final one).
  std::shared_ptr<checkpoint_store> store;
};

class shard_core {
public:
  // `params`: this shard's parameters with their initial values (grads
  // empty): dense ones first, then the sparse ones (`sparse` set: rows of
  // embedding tables, updated by rows; see ps_placement).
  static expected<std::unique_ptr<shard_core>> make(shard_config cfg, std::vector<kernels::parameter> params);

  const shard_config& config() const noexcept { return cfg_; }
  const std::vector<kernels::parameter>& params() const noexcept { return params_; }
  std::size_t dense_count() const noexcept { return dense_; }    // params()[0, dense_count())
  std::size_t sparse_count() const noexcept { return params_.size() - dense_; }
  const clock_table& clocks() const noexcept { return table_; }
  // Pushes of each worker contained in the weights.
  const std::vector<int64_t>& applied_clocks() const noexcept { return applied_; }

  // Worker w's gradients for its update tagged `tag`, one tensor per
  // parameter of this shard in order (shapes checked; taken by move), and the
  // learning rate to apply them with. Appends the pulls it releases.
  // `sparse`: one gradient per sparse parameter (rows strictly increasing,
  // in range; values (rows, dim)); the rows not listed have zero gradient
  // and, as in single-device training, their optimizer state is untouched.
  status push(int w, int64_t tag, double lr, std::vector<kernels::tensor> grads,
              std::vector<kernels::sparse_rows> sparse, std::vector<pull_ticket>& ready);
  status push(int w, int64_t tag, double lr, std::vector<kernels::tensor> grads, std::vector<pull_ticket>& ready) {
    return push(w, tag, lr, std::move(grads), {}, ready);
  }
  // Worker w pushed `final_clock` updates in all.
  status done(int w, int64_t final_clock, std::vector<pull_ticket>& ready);
  // One more checkpoint, at clock `label` (`hetflow shell`'s checkpoint),
  // made like the periodic ones: pushes tagged >= label wait until the
  // global clock reaches it, then the cut is written. Every shard asked for
  // the same label writes the same cut, so --resume can use it once every
  // shard has it. errc::invalid_argument (saying why) when this shard cannot
  // cut there any more: no checkpoint_dir, a push tagged >= label applied
  // already, a label not after the last checkpoint, or the workers done.
  // Appends the pulls it releases (it may write at once).
  status request_checkpoint(int64_t label, std::vector<pull_ticket>& ready);
  // Requested labels not written yet.
  const std::set<int64_t>& requested_checkpoints() const noexcept { return requested_; }
  // True: answer now; false: it waits (released by a later push/done).
  bool pull(const pull_ticket& t) { return table_.request(t); }

  // Restores checkpoint `label` from the store (weights, optimizer
  // state, clocks). Only before any push.
  status restore(int64_t label);
  // Labels of this shard's checkpoints that read back whole (structure and
  // data checksum); the others are described in `problems` (a corrupt file
  // is passed over, so --resume falls back to an older complete one).
  std::vector<int64_t> checkpoints_on_disk(std::vector<std::string>* problems = nullptr) const;
  int64_t checkpoints_written() const noexcept { return written_; }
  int64_t last_checkpoint() const noexcept { return last_label_; }
  int64_t updates_applied() const noexcept { return updates_; }

private:
  shard_core(shard_config cfg, std::vector<kernels::parameter> params, std::unique_ptr<kernels::optimizer> opt);
  status drain();
  struct pending;
  status apply(int w, pending& p);
  status checkpoint(int64_t label, const std::vector<int64_t>& clocks);

  struct pending {
    double lr = 0;
    std::vector<kernels::tensor> grads;
    std::vector<kernels::sparse_rows> sparse;
  };
  shard_config cfg_;
  std::vector<kernels::parameter> params_;
  std::vector<kernels::parameter*> ptrs_;
  std::size_t dense_ = 0;
  std::unique_ptr<kernels::optimizer> opt_;
  clock_table table_;
  std::vector<int64_t> applied_;
  std::map<std::pair<int64_t, int>, pending> pending_;  // by (tag, worker)
  int64_t next_checkpoint_ = 0;  // the next periodic label (checkpoint_every)
  std::set<int64_t> requested_;   // request_checkpoint's labels, not written yet
  bool final_written_ = false;
  int64_t written_ = 0, last_label_ = -1, updates_ = 0;
};

}  // namespace hetflow::ps
