// pushed_counts: a node's inbox for the count tables other nodes push to it
// for the columns it merges by hashing (actors/builtin/preprocess.cpp's
// pphpush), filled by the shard actor and taken by the node's merger
// thread. No CAF: the unit test drives it from threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernels/preprocess/vocabulary.hpp"
#include "schemas/error.hpp"

namespace hetflow::actors::builtin {

// The counts other nodes push to this one for the columns it merges by
// hashing: as soon as the merge starts, every node sends the entries of its
// shards' hashed columns to the node merging each (pphpush, chunk by chunk,
// in column order), so a merger never waits on a request's round trip to a
// node whose core is busy merging too. Filled by the shard actor, taken by
// the merger.
class pushed_counts {
public:
  using clock = std::chrono::steady_clock;
  using hex_column = kernels::preprocess::hex_column;

  // A chunk of shard i's column c (the last one: `last`); false if corrupt,
  // after the last, or for a column already taken. (Chunks carry no
  // sequence number: one sent twice before the last would be added twice.
  // Each node sends a column's chunks once, in order, over one connection.)
  bool add(int i, int c, const std::vector<char>& chunk, bool last) {
    std::lock_guard<std::mutex> l(m_);
    last_chunk_ = clock::now();
    if (taken_.count({i, c})) return false;
    auto& e = entries_[{i, c}];
    if (e.done || !kernels::preprocess::add_hex_column_chunk(e.col, chunk)) return false;
    if (last) {
      e.done = true;
      cv_.notify_all();
    }
    return true;
  }
  // Shard i's column c once whole; an error on `stop`, or when no chunk of
  // any column has come for `timeout` (the pushes of every column queue up
  // on the senders' connections: a column may wait behind others for longer
  // than that, but never with nothing arriving).
  expected<hex_column> take(int i, int c, std::chrono::milliseconds timeout, const std::atomic<bool>& stop) {
    const auto since = clock::now();
    std::unique_lock<std::mutex> l(m_);
    for (;;) {
      if (auto it = entries_.find({i, c}); it != entries_.end() && it->second.done) {
        hex_column col = std::move(it->second.col);
        entries_.erase(it);
        taken_.insert({i, c});
        return col;
      }
      if (stop.load()) return make_error(errc::cancelled, "stopped");
      if (clock::now() - std::max(since, last_chunk_) >= timeout)
        return make_error(errc::timeout, "no counts pushed to this node for " +
                                             std::to_string(timeout.count() / 1000.0).substr(0, 5) +
                                             " s (is that node down or hung? [job] request_timeout sets the wait)");
      cv_.wait_for(l, std::chrono::milliseconds(50));
    }
  }

private:
  struct entry {
    hex_column col;
    bool done = false;
  };
  std::mutex m_;
  std::condition_variable cv_;
  std::map<std::pair<int, int>, entry> entries_;
  std::set<std::pair<int, int>> taken_;
  clock::time_point last_chunk_{};
};

}  // namespace hetflow::actors::builtin
