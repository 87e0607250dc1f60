#include "actors/ps/ps_clock.hpp"

#include <algorithm>

namespace hetflow::ps {

int64_t consistency_model::required_global(int64_t c) const noexcept {
  switch (kind) {
    case consistency::bsp: return c;
    case consistency::ssp: return c - staleness;
    case consistency::asp: break;
  }
  return std::numeric_limits<int64_t>::min();
}

std::string consistency_model::to_string() const {
  switch (kind) {
    case consistency::bsp: return "bsp";
    case consistency::ssp: return "ssp(" + std::to_string(staleness) + ")";
    case consistency::asp: break;
  }
  return "asp";
}

expected<consistency_model> parse_consistency(const std::string& name, int64_t staleness) {
  if (staleness < 0) return make_error(errc::invalid_argument, "staleness must be >= 0");
  if (name == "bsp") return consistency_model::bsp();
  if (name == "ssp") return consistency_model::ssp(staleness);
  if (name == "asp") return consistency_model::asp();
  return make_error(errc::invalid_argument, "consistency must be bsp, ssp or asp, not '" + name + "'");
}

clock_table::clock_table(int workers, consistency_model model)
    : model_(model), clocks_(std::size_t(std::max(workers, 0)), 0), final_(clocks_.size(), -1),
      held_(clocks_.size()) {}

void clock_table::restore(const std::vector<int64_t>& clocks) {
  for (std::size_t i = 0; i < clocks_.size() && i < clocks.size(); ++i) clocks_[i] = clocks[i];
  for (auto& h : held_) h.clear();
}

expected<std::vector<int64_t>> clock_table::on_push(int w, int64_t tag) {
  if (w < 0 || w >= workers())
    return make_error(errc::invalid_argument, "push from worker " + std::to_string(w) + " of " +
                                                  std::to_string(workers()));
  auto& c = clocks_[std::size_t(w)];
  auto& held = held_[std::size_t(w)];
  if (tag < c || held.count(tag))
    return make_error(errc::invalid_argument, "worker " + std::to_string(w) + " pushed clock " +
                                                  std::to_string(tag) + " twice (its clock is " +
                                                  std::to_string(c) + ")");
  if (final_[std::size_t(w)] >= 0 && tag >= final_[std::size_t(w)])
    return make_error(errc::invalid_argument, "worker " + std::to_string(w) + " pushed clock " +
                                                  std::to_string(tag) + " after announcing " +
                                                  std::to_string(final_[std::size_t(w)]) + " pushes in all");
  std::vector<int64_t> in_order;
  if (tag != c) {
    held.emplace(tag, true);
    return in_order;
  }
  in_order.push_back(c++);
  for (auto it = held.begin(); it != held.end() && it->first == c; it = held.erase(it)) in_order.push_back(c++);
  return in_order;
}

status clock_table::finish(int w, int64_t final_clock) {
  if (w < 0 || w >= workers())
    return make_error(errc::invalid_argument, "finish of worker " + std::to_string(w));
  if (final_clock < clocks_[std::size_t(w)])
    return make_error(errc::invalid_argument, "worker " + std::to_string(w) + " says it pushed " +
                                                  std::to_string(final_clock) + " updates, but " +
                                                  std::to_string(clocks_[std::size_t(w)]) + " came");
  final_[std::size_t(w)] = final_clock;
  return {};
}

bool clock_table::finished(int w) const {
  return final_[std::size_t(w)] >= 0 && clocks_[std::size_t(w)] >= final_[std::size_t(w)];
}

bool clock_table::all_finished() const {
  for (int w = 0; w < workers(); ++w)
    if (!finished(w)) return false;
  return true;
}

int64_t clock_table::global() const {
  int64_t g = infinite_clock;
  for (int w = 0; w < workers(); ++w)
    if (!finished(w)) g = std::min(g, clocks_[std::size_t(w)]);
  return g;
}

int clock_table::slowest() const {
  int best = -1;
  for (int w = 0; w < workers(); ++w)
    if (!finished(w) && (best < 0 || clocks_[std::size_t(w)] < clocks_[std::size_t(best)])) best = w;
  return best;
}

bool clock_table::request(const pull_ticket& t) {
  if (model_.may_read(t.clock, global())) return true;
  waiting_.push_back(t);
  return false;
}

std::vector<pull_ticket> clock_table::released() {
  std::vector<pull_ticket> out;
  const int64_t g = global();
  auto keep = std::stable_partition(waiting_.begin(), waiting_.end(),
                                    [&](const pull_ticket& t) { return !model_.may_read(t.clock, g); });
  out.assign(keep, waiting_.end());
  waiting_.erase(keep, waiting_.end());
  return out;
}

std::vector<pull_ticket> clock_table::take_waiting() {
  std::vector<pull_ticket> out;
  out.swap(waiting_);
  return out;
}

}  // namespace hetflow::ps
