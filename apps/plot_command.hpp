// `hetflow plot REPORT --out PATH` and `hetflow run FILE --plot PATH`: a
// train job's loss, accuracy and throughput over training time as an SVG a
// person opens in a browser. Three stacked panels share the x axis (seconds
// since training started):
//
//   +-- header: cluster, job, model, device ----------------+
//   | (a) training loss        history line, epoch means    | legend
//   | (b) accuracy             train / test (/ test AUC)    | legend
//   | (c) throughput           samples/s                    | legend
//   +-------------------- seconds since training started ---+
//
// Data come from a run report (`hetflow run --report`): the per-epoch points
// ("epochs") always, and the fine-grained "history" ([seconds, epoch, step,
// loss, samples_per_s] rows, kernels::train_history) when the report has it.
//
// Pure parts (report text -> plot_data -> SVG text) are separate from the
// file handling so the unit tests call them directly.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "schemas/error.hpp"

namespace hetflow::apps {

// One per-epoch point. Metrics the report has as null are -1.
struct plot_epoch {
  int epoch = 0;                 // 1-based
  double seconds = 0.0;          // end of the epoch's training, seconds since training started
  double loss = 0.0;             // mean training loss over the epoch
  double train_accuracy = -1.0;
  double test_accuracy = -1.0;
  double test_auc = -1.0;        // click data only
  double samples_per_s = 0.0;
  double train_seconds = 0.0;
};

// One point of the report's "history".
struct plot_history_point {
  double seconds = 0.0;
  int epoch = 0;
  int64_t step = 0;
  double loss = 0.0;             // mean since the previous point
  double samples_per_s = 0.0;    // since the previous point
};

struct plot_data {
  std::string cluster;
  std::string job = "train";
  std::string model;
  std::string device;
  int64_t parameters = 0;
  double total_seconds = 0.0;    // the trainer's, loading included (0: unknown)
  std::vector<plot_epoch> epochs;            // at least one
  std::vector<plot_history_point> history;   // empty: the plot uses the epochs alone
};

// Parses a run report's JSON text. `name` (the file, or "the run report")
// prefixes every message ("": none). Errors:
//  - errc::parse_error: not JSON, not a run report, or a malformed member
//    (the message names it);
//  - errc::unsupported: a well-formed report with nothing to plot: a job
//    that is not `train`, a failed job, a train report without epochs.
expected<plot_data> plot_data_from_report(std::string_view json_text, const std::string& name);

// The SVG document (UTF-8 text). Deterministic: the same data give the same
// bytes. Requires at least one epoch.
std::string render_training_svg(const plot_data& d);

// Renders the report's plot into `out` (written whole, then renamed into
// place). Errors as plot_data_from_report's, plus errc::io_error.
expected<plot_data> write_training_plot(std::string_view report_json, const std::string& name,
                                        const std::filesystem::path& out);

// Checks an output path before a job runs: SVG only (a .png name is refused
// with a hint), and a directory that exists. Empty message: fine.
std::string check_plot_path(const std::filesystem::path& out);

// `hetflow plot REPORT --out PATH`; returns the exit code (0, or 2 for bad
// usage and bad or unplottable reports).
int plot_command(const std::vector<std::string>& args);

}  // namespace hetflow::apps
