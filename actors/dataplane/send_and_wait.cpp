#include "actors/dataplane/send_and_wait.hpp"

#include <condition_variable>
#include <memory>
#include <mutex>

namespace hetflow::dataplane {

status send_and_wait(data_plane& dp, peer_id peer, channel_id channel, wire_buffer_ref msg, send_completion done,
                     std::chrono::microseconds linger) {
  if (linger.count() <= 0) return dp.send(peer, channel, std::move(msg), std::move(done));
  // Shared with the completion, which may outlive this call (it runs late or
  // never).
  struct flag {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  auto sent = std::make_shared<flag>();
  // The caller's completion first: the call returns once it has run (its
  // effects visible to the caller), not merely once it has begun.
  status posted = dp.send(peer, channel, std::move(msg), [sent, done = std::move(done)](status s) {
    if (done) done(std::move(s));
    {
      std::lock_guard<std::mutex> g(sent->mu);
      sent->done = true;
    }
    sent->cv.notify_one();
  });
  if (posted.ok()) {
    std::unique_lock<std::mutex> lk(sent->mu);
    sent->cv.wait_for(lk, linger, [&] { return sent->done; });
  }
  return posted;
}

}  // namespace hetflow::dataplane
