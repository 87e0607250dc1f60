#include "topology/cluster.hpp"

#include <algorithm>

namespace hetflow::topology {

const char* to_string(device_kind k) noexcept {
  switch (k) {
    case device_kind::cpu: return "cpu";
    case device_kind::cuda: return "cuda";
  }
  return "unknown";
}

int cpu_device_threads(const node_spec& n, const device_spec& d, int machine_cpus) {
  if (d.threads > 0) return d.threads;
  if (!n.cpus.empty()) return int(n.cpus.size());
  return machine_cpus > 0 ? machine_cpus : 1;
}

const node_spec* cluster::find_node(std::string_view name) const {
  const int i = node_index(name);
  return i < 0 ? nullptr : &nodes[static_cast<size_t>(i)];
}

int cluster::node_index(std::string_view name) const {
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].name == name) return static_cast<int>(i);
  return -1;
}

expected<std::vector<int>> parse_cpu_list(std::string_view text) {
  std::vector<int> out;
  auto bad = [&](const std::string& why) {
    return make_error(errc::invalid_argument, why + "; write CPU numbers and ranges like \"0-3,8\"");
  };
  if (text.empty()) return bad("empty CPU list");
  std::size_t pos = 0;
  auto number = [&](int& v) -> bool {
    std::size_t start = pos;
    long long x = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      x = x * 10 + (text[pos] - '0');
      if (x > 4095) return false;
      ++pos;
    }
    v = int(x);
    return pos > start;
  };
  while (pos < text.size()) {
    int a = 0, b = 0;
    if (!number(a)) return bad("\"" + std::string(text) + "\" is not a CPU list (or names a CPU above 4095)");
    b = a;
    if (pos < text.size() && text[pos] == '-') {
      ++pos;
      if (!number(b)) return bad("\"" + std::string(text) + "\" has an unfinished range");
      if (b < a) return bad("range " + std::to_string(a) + "-" + std::to_string(b) + " runs backwards");
    }
    for (int c = a; c <= b; ++c) out.push_back(c);
    if (pos < text.size()) {
      if (text[pos] != ',') return bad("unexpected '" + std::string(1, text[pos]) + "' in \"" + std::string(text) + "\"");
      ++pos;
      if (pos == text.size()) return bad("\"" + std::string(text) + "\" ends with a comma");
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::vector<std::size_t> local_cpu_shares(const std::vector<std::size_t>& want, std::size_t cpus) {
  std::size_t asked = 0, asking = 0, sharing = 0;
  for (std::size_t w : want) {
    asked += w;
    (w > 0 ? asking : sharing) += 1;
  }
  if (asked + sharing > cpus) return {};
  const std::size_t extra = asked + asking + sharing <= cpus ? 1 : 0;
  const std::size_t left = cpus - asked - extra * asking;
  std::vector<std::size_t> out;
  std::size_t shared_seen = 0;
  for (std::size_t w : want)
    out.push_back(w > 0 ? w + extra : left / sharing + (shared_seen++ < left % sharing ? 1 : 0));
  return out;
}

std::vector<std::vector<int>> auto_pinned_cpus(const cluster& cl, const std::vector<int>& local,
                                               const std::vector<int>& usable) {
  if (cl.runtime.pin_local_nodes != "auto" || local.size() < 2) return {};
  for (int i : local)
    if (!cl.nodes[std::size_t(i)].cpus.empty()) return {};
  std::vector<std::size_t> want(local.size(), 0);
  for (std::size_t k = 0; k < local.size(); ++k)
    for (const auto& d : cl.nodes[std::size_t(local[k])].devices)
      if (d.kind == device_kind::cpu && d.threads > 0) want[k] = std::max(want[k], std::size_t(d.threads));
  const std::vector<std::size_t> shares = local_cpu_shares(want, usable.size());
  if (shares.empty()) return {};
  std::vector<std::vector<int>> out;
  std::size_t next = 0;
  for (std::size_t s : shares) {
    out.emplace_back(usable.begin() + std::ptrdiff_t(next), usable.begin() + std::ptrdiff_t(next + s));
    next += s;
  }
  return out;
}

}  // namespace hetflow::topology
