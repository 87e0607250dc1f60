#include "actors/ps/worker_report.hpp"

#include <cstdio>
#include <utility>

#include "actors/json.hpp"
#include "actors/log.hpp"

namespace hetflow::actors::ps_job {

std::string hex64(uint64_t v) {
  char sum[20];
  std::snprintf(sum, sizeof sum, "%016llx", static_cast<unsigned long long>(v));
  return sum;
}

status evaluate_into(kernels::model& m, const kernels::image_dataset& test, int64_t batch, kernels::epoch_report& er) {
  if (test.size() == 0) return {};
  HF_ASSIGN_OR_RETURN(kernels::eval_metrics e, kernels::evaluate_model(m, test, batch));
  er.test_accuracy = e.accuracy;
  er.test_logloss = e.logloss;
  er.test_auc = e.auc;
  return {};
}

std::string metrics_text(const kernels::epoch_report& e) {
  std::string s = e.test_accuracy < 0 ? "-" : std::to_string(e.test_accuracy).substr(0, 6);
  if (e.test_logloss >= 0) s += ", test logloss " + std::to_string(e.test_logloss).substr(0, 6);
  if (e.test_auc >= 0) s += ", test AUC " + std::to_string(e.test_auc).substr(0, 6);
  return s;
}

void log_epoch_done(const kernels::epoch_report& e, int epochs) {
  char line[160];
  std::snprintf(line, sizeof line, "epoch %d/%d done (worker 0): loss %.4f, train accuracy %.4f, test accuracy ", e.epoch,
                epochs, e.loss, e.train_accuracy);
  log_info(line + metrics_text(e));
}

void write_epochs(json_writer& j, const std::vector<kernels::epoch_report>& epochs) {
  auto maybe = [&](const char* key, double v) {
    j.key(key);
    if (v < 0)
      j.null();
    else
      j.value(v);
  };
  j.key("epochs").begin_array();
  for (auto& e : epochs) {
    j.begin_object().field("epoch", int64_t{e.epoch}).field("loss", e.loss).field("train_accuracy", e.train_accuracy);
    maybe("test_accuracy", e.test_accuracy);
    maybe("test_logloss", e.test_logloss);
    maybe("test_auc", e.test_auc);
    j.field("samples_per_s", e.samples_per_s).field("train_seconds", e.train_seconds).field("lr", e.lr);
    j.field("samples", e.samples).end_object();
  }
  j.end_array();
}

}  // namespace hetflow::actors::ps_job
