#include "actors/control_board.hpp"

#include <atomic>
#include <map>
#include <mutex>

namespace hetflow::actors::control {
namespace {

struct board {
  std::mutex mu;
  std::map<std::string, bool> actors;  // pausable actor -> paused
};

board& the_board() {
  static board b;
  return b;
}

}  // namespace

void allow_pause(const std::string& actor) {
  auto& b = the_board();
  std::lock_guard<std::mutex> g(b.mu);
  b.actors.try_emplace(actor, false);
}

void forget(const std::string& actor) {
  auto& b = the_board();
  std::lock_guard<std::mutex> g(b.mu);
  b.actors.erase(actor);
}

bool pausable(const std::string& actor) {
  auto& b = the_board();
  std::lock_guard<std::mutex> g(b.mu);
  return b.actors.count(actor) != 0;
}

void set_paused(const std::string& actor, bool paused) {
  auto& b = the_board();
  std::lock_guard<std::mutex> g(b.mu);
  if (auto it = b.actors.find(actor); it != b.actors.end()) it->second = paused;
}

namespace {
std::atomic<int64_t> asked_staleness{-1};
}

void set_staleness(int64_t d) { asked_staleness.store(d); }
int64_t staleness() { return asked_staleness.load(); }

namespace {
struct checkpoint_board {
  std::mutex mu;
  checkpoint_request last;
  std::map<std::string, checkpoint_answer> answers;  // to `last`
};
checkpoint_board& ckpt() {
  static checkpoint_board b;
  return b;
}
}  // namespace

int64_t request_checkpoint(int64_t label) {
  auto& b = ckpt();
  std::lock_guard<std::mutex> g(b.mu);
  b.last.generation += 1;
  b.last.label = label;
  b.answers.clear();
  return b.last.generation;
}

checkpoint_request checkpoint_requested() {
  auto& b = ckpt();
  std::lock_guard<std::mutex> g(b.mu);
  return b.last;
}

std::optional<checkpoint_request> take_new_checkpoint_request(int64_t& seen) {
  const checkpoint_request req = checkpoint_requested();
  if (req.generation == 0 || req.generation == seen) return std::nullopt;
  seen = req.generation;
  return req;
}

void answer_checkpoint(const std::string& shard, int64_t generation, bool ok, std::string text) {
  auto& b = ckpt();
  std::lock_guard<std::mutex> g(b.mu);
  if (generation == b.last.generation) b.answers[shard] = checkpoint_answer{ok, std::move(text)};
}

std::map<std::string, checkpoint_answer> checkpoint_answers(int64_t generation) {
  auto& b = ckpt();
  std::lock_guard<std::mutex> g(b.mu);
  if (generation != b.last.generation) return {};
  return b.answers;
}

bool paused(const std::string& actor) {
  auto& b = the_board();
  std::lock_guard<std::mutex> g(b.mu);
  auto it = b.actors.find(actor);
  return it != b.actors.end() && it->second;
}

}  // namespace hetflow::actors::control
