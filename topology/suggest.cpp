#include "topology/suggest.hpp"

#include <algorithm>
#include <cctype>
#include <vector>

namespace hetflow::topology {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t n = a.size(), m = b.size();
  // Three rows are enough for the transposition term.
  std::vector<std::size_t> prev2(m + 1), prev(m + 1), cur(m + 1);
  for (std::size_t j = 0; j <= m; ++j) prev[j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        cur[j] = std::min(cur[j], prev2[j - 2] + 1);
    }
    std::swap(prev2, prev);
    std::swap(prev, cur);
  }
  return prev[m];
}

namespace {
bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}
}  // namespace

std::optional<std::string> closest_match(std::string_view word,
                                         std::span<const std::string> candidates) {
  for (const auto& c : candidates)
    if (iequals(word, c)) return c;
  std::optional<std::string> best;
  std::size_t best_d = 3;
  for (const auto& c : candidates) {
    const std::size_t d = edit_distance(word, c);
    if (d < best_d && d < word.size() && d < c.size()) {
      best_d = d;
      best = c;
    }
  }
  if (best || word.size() < 4) return best;
  // "heartbeat" for "heartbeat_interval", "devices_list" for "devices": one
  // candidate that extends (or is extended by) the word.
  int hits = 0;
  for (const auto& c : candidates) {
    if (c.size() < 4) continue;
    if (c.starts_with(word) || word.starts_with(c)) {
      ++hits;
      best = c;
    }
  }
  return hits == 1 ? best : std::nullopt;
}

std::string did_you_mean(std::string_view word, std::span<const std::string> candidates) {
  auto m = closest_match(word, candidates);
  if (!m) return {};
  return "; did you mean '" + *m + "'?";
}

}  // namespace hetflow::topology
