#include "kernels/waits.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>

namespace hetflow::kernels::waits {
namespace {

using clock_type = std::chrono::steady_clock;

struct open_wait {
  std::string actor, on, what;
  clock_type::time_point since;
};

std::mutex mu;
std::map<id, open_wait> open;
id next_id = 1;
std::atomic<uint64_t> advanced{0};
thread_local std::string actor_here;

}  // namespace

id begin(std::string actor, std::string on, std::string what) {
  std::lock_guard<std::mutex> g(mu);
  const id w = next_id++;
  open.emplace(w, open_wait{std::move(actor), std::move(on), std::move(what), clock_type::now()});
  return w;
}

void end(id w) noexcept {
  if (w == 0) return;
  std::lock_guard<std::mutex> g(mu);
  open.erase(w);
}

const std::string& current_actor() noexcept { return actor_here; }

actor_scope::actor_scope(std::string name) : prev_(std::move(actor_here)) { actor_here = std::move(name); }
actor_scope::~actor_scope() { actor_here = std::move(prev_); }

void progress() noexcept { advanced.fetch_add(1, std::memory_order_relaxed); }
uint64_t progress_count() noexcept { return advanced.load(std::memory_order_relaxed); }

std::vector<entry> snapshot() {
  const auto now = clock_type::now();
  std::vector<entry> out;
  {
    std::lock_guard<std::mutex> g(mu);
    for (auto& [w, o] : open)
      out.push_back(entry{o.actor, o.on, o.what, std::chrono::duration<double>(now - o.since).count()});
  }
  std::stable_sort(out.begin(), out.end(), [](const entry& a, const entry& b) { return a.seconds > b.seconds; });
  return out;
}

std::string describe(const std::vector<entry>& waits) {
  if (waits.empty()) return "no actor is waiting on another (a long computation, or a stuck one)";
  std::string s;
  for (auto& e : waits) {
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f s", e.seconds);
    if (!s.empty()) s += "; ";
    s += (e.actor.empty() ? std::string("(an actor)") : e.actor) + " waits on " + e.on + " for " + e.what + " (" +
         secs + ")";
  }
  return s;
}

void reset() {
  std::lock_guard<std::mutex> g(mu);
  open.clear();
  advanced = 0;
}

}  // namespace hetflow::kernels::waits
