// ralp_server_core: the state machine of the RALP server (strategy "ralp"),
// in plain C++ (the ralp_server actor wraps it; tests drive it directly).
//
// It owns the whole model (built from the job's seed, as every worker builds
// it) and splits it at `cut`:
//
//   units [0, cut)    lower: data parallel. The server is their parameter
//                     server: it holds their weights and optimizer state,
//                     workers pull the weights and push gradients.
//   units [cut, end)  upper: run HERE, next to their weights, for every
//                     worker's batch; the weights never cross the network.
//
// Clocks (BSP, as the PS's ps_shard_core with consistency bsp): worker w's
// clock is its lower pushes so far; its steps are those j of every epoch with
// j % W == w, so workers may do different numbers of steps in all (hello()
// says how many; a worker past its last clock no longer holds others back).
//
//   upper, clock c:  once every worker that has a step at clock c sent its
//                    clock-c activations, forward + loss + backward for each
//                    of them in worker order with the SAME upper weights
//                    (version c), then one optimizer step per worker
//                    gradient in worker order, each with that worker's
//                    learning rate. Returns each worker's dL/d(activations).
//   lower, clock c:  a pull at clock c is answered once every worker's
//                    pushes of clocks < c are applied; the pushes of clock c
//                    are applied in worker order once every worker (with a
//                    step at c) pushed it.
//
// So RALP with W workers computes what strategy "ps" with bsp and W workers
// computes (and, with 1 worker, single-device training), up to float
// rounding of the split optimizer (elementwise rules: identical).
//
// Thread affinity: one owner thread. activations() runs the model inside
// its device context (model::context().run): do not call it from inside
// another context's run().
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "actors/ps/ps_checkpoint.hpp"
#include "actors/ps/ps_clock.hpp"
#include "kernels/loss.hpp"
#include "kernels/model.hpp"
#include "kernels/optimizer.hpp"
#include "schemas/error.hpp"

namespace hetflow::ralp {

struct server_config {
  std::string name = "ralp0";  // for messages
  int workers = 1;
  std::size_t cut = 0;         // units [cut, end) run on the server; cut == units: none (plain PS)
  kernels::optimizer_config optimizer;
};

// One worker's upper pass at one clock.
struct upper_result {
  int worker = 0;
  int64_t clock = 0;
  kernels::tensor act_grad;  // dL/d(activations), the shape of the activations sent
  kernels::loss_result loss;
};

// The parameters of units [first, last) of m, in model order.
std::vector<kernels::parameter*> unit_parameters(kernels::model& m, std::size_t first, std::size_t last);

class server_core {
public:
  // `m`: the whole model with its initial weights. errc::invalid_argument for
  // a cut outside [1, units] or a model with sparse parameters.
  static expected<std::unique_ptr<server_core>> make(server_config cfg, kernels::model m);

  const server_config& config() const noexcept { return cfg_; }
  std::size_t cut() const noexcept { return cfg_.cut; }
  bool has_upper() const noexcept { return cfg_.cut < model_.size(); }
  kernels::model& model() noexcept { return model_; }
  const std::vector<kernels::parameter*>& lower_params() const noexcept { return lower_; }
  const std::vector<kernels::parameter*>& upper_params() const noexcept { return upper_; }
  const ps::clock_table& clocks() const noexcept { return table_; }

  // Worker w will push `final_clock` updates in all (its steps). Appends the
  // lower pulls this releases.
  status hello(int w, int64_t final_clock, std::vector<ps::pull_ticket>& ready);
  // A lower pull: true when it may be answered now, false when it waits
  // (released by a later push or hello).
  bool pull(const ps::pull_ticket& t) { return table_.request(t); }
  // True once every lower push of clocks < c is applied (and so every upper
  // clock < c is processed): what a pull of every weight at clock c waits for.
  bool weights_ready(int64_t c) const { return table_.global() >= c; }

  // Worker w's activations of clock c (batch first, the shape of
  // model().sample_shape(cut)) and their labels. When this completes clock
  // c, runs it and appends each worker's result (worker order). Errors:
  // errc::invalid_argument for a clock out of order, a duplicate, a shape
  // that does not fit, a label out of range, a non-finite loss.
  status activations(int w, int64_t c, double lr, kernels::tensor act, std::vector<int32_t> labels,
                     std::vector<upper_result>& out);
  // Worker w's lower gradients of its update tagged c (one per lower
  // parameter, in order; shapes checked). Appends the pulls it releases.
  status push(int w, int64_t c, double lr, std::vector<kernels::tensor> grads, std::vector<ps::pull_ticket>& ready);

  // The workers whose activations of the next upper clock have not come
  // while others' are held (empty: nothing held). The watchdog's view.
  std::vector<int> missing_activations() const {
    std::vector<int> v;
    auto it = acts_.find(next_upper_);
    if (it == acts_.end() || it->second.empty()) return v;
    for (int w = 0; w < int(act_clock_.size()); ++w)
      if (!it->second.count(w) && has_step(w, next_upper_)) v.push_back(w);
    return v;
  }

  // Checkpoints (the job's checkpoint_dir, every checkpoint_every clocks).
  // Label L: every lower and upper update of clocks < L and none later,
  // which holds when the lower clock has just reached L (a push or hello
  // raised it) and no pull of clock L has been answered yet: no worker can
  // have sent activations of clock L. Two files of the PS checkpoint
  // format (ps_checkpoint.hpp) per label:
  //   <name>-lower.ckpt-L  units [0, cut)'s parameters and the lower
  //                        optimizer's state; meta.shard = the cut,
  //                        meta.shards = the model's units
  //   <name>-upper.ckpt-L  units [cut, end)'s parameters, then the server
  //                        model's state tensors ("state:" + name: batch
  //                        norm statistics of the units run here), and the
  //                        upper optimizer's state
  // meta.clocks: each worker's clock at L (its pushes the weights hold).
  // The newest `keep` of each are kept.
  status write_checkpoint(ps::checkpoint_store& store, int64_t label, int keep = 3);
  // The labels whose two files both read back intact, ascending.
  static std::vector<int64_t> checkpoints_on_disk(const ps::checkpoint_store& store, const std::string& name,
                                                  std::vector<std::string>* problems = nullptr);
  // The cut label L was written with (a resumed run keeps it).
  static expected<std::size_t> checkpoint_cut(const ps::checkpoint_store& store, const std::string& name,
                                              int64_t label);
  // Restores label L before any hello: weights, model state, both
  // optimizers, every worker's clock. invalid_argument naming the file when
  // it does not fit this model, cut or number of workers.
  status restore(const ps::checkpoint_store& store, int64_t label);

  int64_t upper_clock() const noexcept { return next_upper_; }  // upper clocks processed
  int64_t lower_updates() const noexcept { return lower_updates_; }
  int64_t upper_updates() const noexcept { return upper_updates_; }
  double compute_seconds() const noexcept { return compute_s_; }

private:
  server_core(server_config cfg, kernels::model m, std::unique_ptr<kernels::optimizer> lower_opt,
              std::unique_ptr<kernels::optimizer> upper_opt);
  bool has_step(int w, int64_t c) const;  // w (final clock known or not) has a step at clock c
  status run_upper(std::vector<upper_result>& out);
  status drain_lower();

  struct pending_act {
    double lr = 0;
    kernels::tensor act;
    std::vector<int32_t> labels;
  };
  struct pending_push {
    double lr = 0;
    std::vector<kernels::tensor> grads;
  };
  server_config cfg_;
  kernels::model model_;
  std::vector<kernels::parameter*> lower_, upper_;
  std::unique_ptr<kernels::optimizer> lower_opt_, upper_opt_;
  ps::clock_table table_;
  std::vector<int64_t> final_;       // -1: unknown
  std::vector<int64_t> act_clock_;   // next activation clock expected of each worker
  std::map<int64_t, std::map<int, pending_act>> acts_;         // by clock, worker
  std::map<std::pair<int64_t, int>, pending_push> pushes_;     // by (tag, worker)
  std::vector<std::vector<kernels::tensor>> saved_;            // per worker in a clock: upper grads
  kernels::tensor loss_grad_;
  int64_t next_upper_ = 0, lower_updates_ = 0, upper_updates_ = 0;
  double compute_s_ = 0;
};

}  // namespace hetflow::ralp
