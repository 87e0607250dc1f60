// What the parameter-server style workers (ps_worker, ralp_worker) share:
// worker 0's evaluation, the weights checksum, and the per-epoch lines and
// JSON of their reports.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/dataset.hpp"
#include "kernels/model.hpp"
#include "kernels/trainer.hpp"
#include "schemas/error.hpp"

namespace hetflow::actors {
class json_writer;
}

namespace hetflow::actors::ps_job {

// "%016x".
std::string hex64(uint64_t v);

// Evaluates `m` on `test` into er's test_accuracy, and for click data
// test_logloss and test_auc; leaves them at -1 when `test` is empty.
status evaluate_into(kernels::model& m, const kernels::image_dataset& test, int64_t batch, kernels::epoch_report& er);
// "0.8715" or "-", then ", test logloss X, test AUC Y" for click data.
std::string metrics_text(const kernels::epoch_report& e);
// Worker 0's "epoch E/N done (worker 0): loss ..., train accuracy ..., test accuracy ..." line.
void log_epoch_done(const kernels::epoch_report& e, int epochs);

// "epochs": [{epoch, loss, train_accuracy, test_accuracy, test_logloss,
// test_auc, samples_per_s, train_seconds, lr, samples}] (null for -1).
void write_epochs(json_writer& j, const std::vector<kernels::epoch_report>& epochs);

}  // namespace hetflow::actors::ps_job
