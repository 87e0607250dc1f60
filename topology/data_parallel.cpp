#include "topology/data_parallel.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

namespace hetflow::topology {

expected<std::vector<dp_replica>> dp_replicas(const cluster& c, std::span<const std::string> nodes) {
  std::vector<const node_spec*> chosen;
  if (nodes.empty()) {
    for (const auto& n : c.nodes) chosen.push_back(&n);
  } else {
    std::set<std::string> seen;
    for (const auto& name : nodes) {
      const node_spec* n = c.find_node(name);
      if (n == nullptr)
        return make_error(errc::invalid_argument, "dp: no node '" + name + "' in the topology");
      if (!seen.insert(name).second)
        return make_error(errc::invalid_argument, "dp: node '" + name + "' is listed twice");
      chosen.push_back(n);
    }
    // Topology order, whatever order the list gives.
    std::sort(chosen.begin(), chosen.end(), [&](const node_spec* a, const node_spec* b) {
      return c.node_index(a->name) < c.node_index(b->name);
    });
  }
  std::vector<dp_replica> out;
  for (const node_spec* n : chosen) {
    if (n->devices.empty()) {
      out.push_back(dp_replica{n->name, n->host, 0, device_spec{}});
      continue;
    }
    for (std::size_t d = 0; d < n->devices.size(); ++d)
      out.push_back(dp_replica{n->name, n->host, d, n->devices[d]});
  }
  return out;
}

std::vector<std::size_t> ring_order(std::span<const std::string> hosts) {
  std::vector<std::string> host_order;
  for (const auto& h : hosts)
    if (std::find(host_order.begin(), host_order.end(), h) == host_order.end()) host_order.push_back(h);
  std::vector<std::size_t> out;
  out.reserve(hosts.size());
  for (const auto& h : host_order)
    for (std::size_t i = 0; i < hosts.size(); ++i)
      if (hosts[i] == h) out.push_back(i);
  return out;
}

std::vector<int64_t> split_rows(int64_t rows, std::span<const double> speeds) {
  const std::size_t n = speeds.size();
  std::vector<int64_t> out(n, 0);
  if (n == 0 || rows <= 0) return out;
  double slowest = 0;
  for (double s : speeds)
    if (std::isfinite(s) && s > 0 && (slowest == 0 || s < slowest)) slowest = s;
  std::vector<double> w(n);
  for (std::size_t i = 0; i < n; ++i) {
    double s = speeds[i];
    w[i] = slowest == 0 ? 1.0 : (std::isfinite(s) && s > 0 ? s : slowest);
  }
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  std::vector<double> frac(n);
  int64_t given = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double share = double(rows) * (w[i] / total);
    out[i] = std::min<int64_t>(rows, int64_t(std::floor(share)));
    frac[i] = share - double(out[i]);
    given += out[i];
  }
  // Rounding can leave the floors a row or so off in either direction.
  while (given > rows) {
    std::size_t k = std::max_element(out.begin(), out.end()) - out.begin();
    --out[k];
    --given;
  }
  std::vector<std::size_t> idx(n);
  std::iota(idx.begin(), idx.end(), std::size_t{0});
  std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return frac[a] > frac[b]; });
  for (std::size_t k = 0; given < rows; k = (k + 1) % n) {
    ++out[idx[k]];
    ++given;
  }
  return out;
}

std::vector<int64_t> split_rows_timed(int64_t rows, std::span<const double> fixed_s,
                                      std::span<const double> per_row_s) {
  const std::size_t n = std::min(fixed_s.size(), per_row_s.size());
  std::vector<int64_t> out(n, 0);
  if (n == 0 || rows <= 0) return out;
  double worst_b = 0, worst_a = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (std::isfinite(per_row_s[i]) && per_row_s[i] > 0) worst_b = std::max(worst_b, per_row_s[i]);
    if (std::isfinite(fixed_s[i])) worst_a = std::max(worst_a, fixed_s[i]);
  }
  std::vector<double> a(n), b(n);
  for (std::size_t i = 0; i < n; ++i) {
    b[i] = std::isfinite(per_row_s[i]) && per_row_s[i] > 0 ? per_row_s[i] : (worst_b > 0 ? worst_b : 1.0);
    a[i] = std::isfinite(fixed_s[i]) ? std::max(0.0, fixed_s[i]) : worst_a;
  }
  // Bulk first: every replica's rows at the largest step end T0 that cannot
  // overshoot (a lower bound on the optimum), then the rest one by one. T0:
  // the time by which proportional shares of the per-row costs alone fill the
  // batch, less the slowest fixed cost, so the bulk never passes the greedy's
  // choice; the greedy from there gives what it would from zero.
  double inv_sum = 0;
  for (std::size_t i = 0; i < n; ++i) inv_sum += 1.0 / b[i];
  const double t0 = double(rows) / inv_sum - *std::max_element(a.begin(), a.end());
  int64_t given = 0;
  if (t0 > 0)
    for (std::size_t i = 0; i < n; ++i) {
      // Rows whose step would end strictly before t0; the greedy would have given them all.
      double r = std::floor((t0 - a[i]) / b[i]);
      if (r > 0) {
        out[i] = std::min<int64_t>(int64_t(r) - 1, rows - given);
        out[i] = std::max<int64_t>(out[i], 0);
        given += out[i];
      }
    }
  auto end_with_one_more = [&](std::size_t i) { return a[i] + double(out[i] + 1) * b[i]; };
  auto later = [&](std::size_t x, std::size_t y) {  // heap order: earliest end first, then lower index
    double ex = end_with_one_more(x), ey = end_with_one_more(y);
    return ex != ey ? ex > ey : x > y;
  };
  std::vector<std::size_t> heap(n);
  std::iota(heap.begin(), heap.end(), std::size_t{0});
  std::make_heap(heap.begin(), heap.end(), later);
  for (; given < rows; ++given) {
    std::pop_heap(heap.begin(), heap.end(), later);
    ++out[heap.back()];
    std::push_heap(heap.begin(), heap.end(), later);
  }
  return out;
}

int64_t split_offset(std::span<const int64_t> split, std::size_t r) {
  int64_t off = 0;
  for (std::size_t i = 0; i < r && i < split.size(); ++i) off += split[i];
  return off;
}

}  // namespace hetflow::topology
