#include "topology/ralp_cost.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "topology/units.hpp"

namespace hetflow::topology {

const ralp_candidate* ralp_estimate::find(std::size_t cut) const {
  for (const auto& c : candidates)
    if (c.cut == cut) return &c;
  return nullptr;
}

namespace {

std::string ms(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g ms", v);
  return b;
}

std::string label(const ralp_candidate& c, std::size_t units) {
  return c.cut == units ? std::string("no cut (plain PS)") : "the cut before '" + c.unit + "' (unit " +
                                                               std::to_string(c.cut) + ")";
}

}  // namespace

expected<ralp_estimate> estimate_ralp(const profile_db& db_in, const ralp_cost_inputs& in) {
  if (db_in.units.empty()) return make_error(errc::invalid_argument, "ralp cost: the profile has no units");
  if (in.workers < 1 || in.worker_kinds.empty())
    return make_error(errc::invalid_argument, "ralp cost: no workers");
  if (!(in.gbps > 0)) return make_error(errc::invalid_argument, "ralp cost: link bandwidth must be > 0");
  for (const auto* k : {&in.server_kind})
    if (!db_in.has_kind(*k))
      return make_error(errc::invalid_argument, "ralp cost: the profile (" + db_in.source + ") has no device kind '" +
                                                    *k + "' (the server's)");
  for (const auto& k : in.worker_kinds)
    if (!db_in.has_kind(k))
      return make_error(errc::invalid_argument, "ralp cost: the profile (" + db_in.source + ") has no device kind '" +
                                                    k + "' (a worker's)");
  const profile_db db = in.batch > 0 ? db_in.at_batch(in.batch) : db_in;
  const std::size_t n = db.units.size();
  const double W = double(in.workers);
  const double update = db.update_ms(in.server_kind, 0, n - 1);
  ralp_estimate e;
  e.batch = db.batch;
  for (std::size_t k = 1; k <= n; ++k) {
    ralp_candidate c;
    c.cut = k;
    c.unit = k == n ? "(no cut)" : db.units[k].name;
    c.lower_params_bytes = db.params_bytes(0, k - 1);
    const bool cut = k < n;
    c.activation_bytes = cut ? db.units[k - 1].output_bytes : 0;
    const uint64_t per_worker =
        2 * c.lower_params_bytes + (cut ? 2 * c.activation_bytes + uint64_t(db.batch) * in.label_bytes : 0);
    c.bytes_per_step = uint64_t(in.workers) * per_worker;
    for (const auto& kind : in.worker_kinds) c.worker_ms = std::max(c.worker_ms, db.compute_ms(kind, 0, k - 1));
    const double messages = cut ? 4.0 : 2.0;
    c.transfer_ms = double(c.bytes_per_step) / (in.gbps * 1e9 / 8.0 / 1e3) + messages * in.latency_us / 1e3;
    c.server_ms = W * (cut ? db.compute_ms(in.server_kind, k, n - 1) : 0.0) + W * update;
    c.step_ms = c.worker_ms + c.transfer_ms + c.server_ms;
    e.candidates.push_back(std::move(c));
  }
  auto better = [](const ralp_candidate& a, const ralp_candidate& b) {
    const double tol = 1e-9 * std::max(std::abs(a.step_ms), std::abs(b.step_ms));
    if (std::abs(a.step_ms - b.step_ms) > tol) return a.step_ms < b.step_ms;
    if (a.bytes_per_step != b.bytes_per_step) return a.bytes_per_step < b.bytes_per_step;
    return a.cut > b.cut;
  };
  std::vector<std::size_t> order(e.candidates.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return better(e.candidates[a], e.candidates[b]); });
  e.chosen = order[0];
  const auto& best = e.candidates[e.chosen];
  e.why = label(best, n) + " predicts " + ms(best.step_ms) + " a step (workers " + ms(best.worker_ms) +
          ", transfers " + ms(best.transfer_ms) + " for " + format_size(best.bytes_per_step) + ", server " +
          ms(best.server_ms) + ")";
  if (order.size() > 1) {
    const auto& next = e.candidates[order[1]];
    e.why += "; the runner-up, " + label(next, n) + ", " + ms(next.step_ms) + " (" + format_size(next.bytes_per_step) + ")";
  }
  const auto& none = e.candidates.back();
  if (best.cut != n && order.size() > 1 && e.candidates[order[1]].cut != n)
    e.why += "; no cut (plain PS) " + ms(none.step_ms) + " (" + format_size(none.bytes_per_step) + ")";
  return e;
}

}  // namespace hetflow::topology
