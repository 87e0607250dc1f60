// step_cost_fit: a data-parallel replica's step cost, fixed + per row, fitted
// from measured points. The training loop's split (kernels/trainer.cpp) and
// `hetflow plan` (apps/plan_command.cpp) fit with it alike.
#pragma once

#include <algorithm>
#include <cmath>

namespace hetflow::kernels {

// A replica's step cost as fixed + rows * per_row seconds, from measured
// (rows, seconds) points - per-step means over windows of steps. Two points
// at least 2x apart in rows fit both terms (a secant: the speed probe's two
// batch sizes, 4x apart, or a split that moved a lot); a point nearer the
// previous one's rows refits the per-row term through it, keeping the fixed
// term (at most 90% of the point's time), so timing noise in windows of
// similar rows moves the split no more than a split by speed alone. A
// secant that hardly rises (slope under 1% of the points' time a row, or
// falling, by noise) is a fixed cost with that small per-row part; one
// that would give a negative fixed part gives none.
// The probe's points (forward + backward on zeros) and the training
// windows' (busy time: also the batch, host copies and the optimizer step)
// measure different things, so a secant joins two of the same kind only.
struct step_cost_fit {
  double fixed = 0.0, per_row = 0.0;
  double last_rows = 0.0, last_seconds = 0.0;
  bool last_probe = false;
  bool measured() const noexcept { return per_row > 0; }
  void observe(double rows, double seconds, bool probe = false) {
    if (!(rows > 0) || !(seconds > 0) || !std::isfinite(seconds)) return;
    const bool apart = last_rows > 0 && last_probe == probe &&
                       std::max(rows, last_rows) >= 2 * std::min(rows, last_rows);
    double f = fixed, b = 0.0;
    if (apart) {
      b = (seconds - last_seconds) / (rows - last_rows);
      // Time that hardly grows with the rows (or, by noise, shrinks): a
      // mostly fixed cost, with a small per-row part.
      const double floor_b = 0.01 * std::min(seconds / rows, last_seconds / last_rows);
      if (!(b > floor_b)) b = floor_b;
      f = seconds - b * rows;
      if (!(f >= 0)) {  // more than proportional: no fixed part
        f = 0.0;
        b = seconds / rows;
      }
    } else {  // through this point, keeping the fixed term
      f = std::min(std::max(fixed, 0.0), 0.9 * seconds);
      b = (seconds - f) / rows;
    }
    fixed = f;
    per_row = b;
    last_rows = rows;
    last_seconds = seconds;
    last_probe = probe;
  }
};

}  // namespace hetflow::kernels
