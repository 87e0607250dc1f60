#include "actors/dataplane/fake_data_plane.hpp"

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace hetflow::dataplane {
namespace {

using clock_type = std::chrono::steady_clock;
constexpr unsigned channel_bits = 48;
constexpr uint64_t channel_mask = (uint64_t{1} << channel_bits) - 1;
constexpr peer_id max_peer_id = 0xfffe;  // same bound as ucx_data_plane

}  // namespace

namespace detail {

struct fake_send_op {
  std::weak_ptr<fake_core> sender;
  peer_id to = 0;
  channel_id channel = 0;
  wire_buffer_ref msg;
  send_completion done;
};

// One plane's state and delivery thread. Shared with the fabric (weakly) and
// with senders' ops, so it outlives the data_plane object when needed.
//
// Lock order: a core's mutex is never held while taking another core's or the
// fabric's mutex.
class fake_core : public std::enable_shared_from_this<fake_core> {
public:
  fake_core(std::shared_ptr<fake_fabric> fabric, peer_id self)
      : fabric_(std::move(fabric)), self_(self) {}

  // The thread keeps the core alive, so a plane stopped from its own
  // handler (thread detached, not joined) never runs on a freed core.
  void start() { thread_ = std::thread([self = shared_from_this()] { self->run(); }); }

  peer_id self() const { return self_; }
  fake_fabric& fabric() { return *fabric_; }

  bool live() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return !stopped_;
  }

  status connect(peer_id peer) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopped_) return make_error(errc::cancelled, "fake data plane is shut down");
    connected_.insert(peer);
    return status{};
  }

  void set_handler(receive_handler h) {
    std::lock_guard<std::mutex> lock(mutex_);
    handler_ = std::make_shared<receive_handler>(std::move(h));
  }

  // Sender side, called by send(): checks this plane and registers `op`.
  status admit(peer_id peer, const std::shared_ptr<fake_send_op>& op) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopped_) return make_error(errc::cancelled, "fake data plane is shut down");
    if (dropped_)
      return make_error(errc::peer_down, "this node (peer " + std::to_string(self_) +
                                             ") was dropped from the fake fabric");
    if (connected_.count(peer) == 0)
      return make_error(errc::not_found,
                        "peer " + std::to_string(peer) + " is not connected; call connect() first");
    if (op) outstanding_.insert(op);
    return status{};
  }

  // Receiver side: queues a message due at `due` (pushed later if needed to
  // keep per (sender, channel) order). False when this plane is gone.
  bool enqueue_message(peer_id from, channel_id channel, std::shared_ptr<fake_send_op> op,
                       clock_type::time_point due) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopped_ || dropped_) return false;
      uint64_t key = (uint64_t{from} << channel_bits) | channel;
      auto& last = last_due_[key];
      if (due < last) due = last;
      last = due;
      event ev;
      ev.is_message = true;
      ev.from = from;
      ev.channel = channel;
      ev.op = std::move(op);
      events_.emplace(std::make_pair(due, next_seq_++), std::move(ev));
    }
    cv_.notify_one();
    return true;
  }

  // Sender side: finishes `op` once (the first caller wins); `done` then runs
  // on this plane's thread.
  void complete(const std::shared_ptr<fake_send_op>& op, status st) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (outstanding_.erase(op) == 0) return;
      event ev;
      ev.is_message = false;
      ev.op = op;
      ev.result = std::move(st);
      events_.emplace(std::make_pair(clock_type::now(), next_seq_++), std::move(ev));
    }
    cv_.notify_one();
  }

  // Node death (fabric.drop_peer) or orderly stop (shutdown).
  void drop() { cut_off(/*stopping=*/false); }

  void stop() {
    cut_off(/*stopping=*/true);
    std::lock_guard<std::mutex> lock(join_mutex_);
    if (!thread_.joinable()) return;
    if (std::this_thread::get_id() == thread_.get_id())
      thread_.detach();  // from a handler: the thread ends after it returns
    else
      thread_.join();
  }

  data_plane_stats stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

private:
  struct event {
    bool is_message = true;
    peer_id from = 0;
    channel_id channel = 0;
    std::shared_ptr<fake_send_op> op;
    status result;
  };

  void cut_off(bool stopping) {
    std::vector<std::shared_ptr<fake_send_op>> undelivered;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping ? stopped_ : (dropped_ || stopped_)) {
        return;
      }
      if (stopping)
        stopped_ = true;
      else
        dropped_ = true;
      for (auto it = events_.begin(); it != events_.end();) {
        if (it->second.is_message) {
          undelivered.push_back(std::move(it->second.op));
          it = events_.erase(it);
        } else {
          ++it;
        }
      }
      status own = stopping ? make_error(errc::cancelled, "fake data plane shut down")
                            : make_error(errc::peer_down, "this node (peer " + std::to_string(self_) +
                                                              ") was dropped from the fake fabric");
      for (auto& op : outstanding_) {
        event ev;
        ev.is_message = false;
        ev.op = op;
        ev.result = own;
        events_.emplace(std::make_pair(clock_type::now(), next_seq_++), std::move(ev));
      }
      outstanding_.clear();
    }
    cv_.notify_one();
    std::string why = stopping ? "shut down" : "was dropped from the fake fabric";
    for (auto& op : undelivered) {
      if (auto sender = op->sender.lock())
        sender->complete(op, make_error(errc::peer_down, "peer " + std::to_string(self_) + " " + why +
                                                             " before the message on channel " +
                                                             std::to_string(op->channel) +
                                                             " was delivered"));
    }
    if (stopping) fabric_->detach(self_, this);
  }

  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (events_.empty()) {
        if (stopped_) break;
        cv_.wait(lock);
        continue;
      }
      auto first = events_.begin();
      if (first->first.first > clock_type::now()) {
        cv_.wait_until(lock, first->first.first);
        continue;
      }
      event ev = std::move(first->second);
      events_.erase(first);
      std::shared_ptr<receive_handler> handler = handler_;
      lock.unlock();
      if (ev.is_message)
        deliver(ev, handler);
      else
        finish(ev);
      lock.lock();
    }
  }

  void deliver(event& ev, const std::shared_ptr<receive_handler>& handler) {
    const wire_buffer& src = *ev.op->msg;
    wire_buffer copy(src.size());
    if (src.size() > 0) std::memcpy(copy.data(), src.data(), src.size());
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.messages_received;
      stats_.bytes_received += src.size();
    }
    if (handler && *handler) {
      try {
        (*handler)(ev.from, ev.channel, std::move(copy));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "fake data plane %u: receive handler threw: %s\n", self_, e.what());
      }
    } else {
      std::fprintf(stderr, "fake data plane %u: message from peer %u on channel %llu dropped: "
                           "no receive handler installed\n",
                   self_, ev.from, static_cast<unsigned long long>(ev.channel));
    }
    if (auto sender = ev.op->sender.lock()) sender->complete(ev.op, status{});
  }

  void finish(event& ev) {
    if (ev.result.ok()) {
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.messages_sent;
      stats_.bytes_sent += ev.op->msg->size();
    }
    // op->msg stays: a message event of a dropped sender may still hold op.
    if (ev.op->done) {
      try {
        ev.op->done(std::move(ev.result));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "fake data plane %u: send completion threw: %s\n", self_, e.what());
      }
    }
  }

  std::shared_ptr<fake_fabric> fabric_;
  const peer_id self_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool stopped_ = false;
  bool dropped_ = false;
  std::unordered_set<peer_id> connected_;
  std::shared_ptr<receive_handler> handler_;
  // Ordered by (due time, arrival sequence).
  std::map<std::pair<clock_type::time_point, uint64_t>, event> events_;
  uint64_t next_seq_ = 0;
  std::unordered_map<uint64_t, clock_type::time_point> last_due_;
  std::unordered_set<std::shared_ptr<fake_send_op>> outstanding_;
  data_plane_stats stats_;

  std::thread thread_;
  std::mutex join_mutex_;
};

}  // namespace detail

// ------------------------------------------------------------------ fabric

std::shared_ptr<fake_fabric> fake_fabric::create(fake_fabric_options options) {
  return std::make_shared<fake_fabric>(options);
}

fake_fabric::fake_fabric(fake_fabric_options options)
    : options_(options), rng_state_(options.seed) {}

void fake_fabric::set_delay(std::chrono::microseconds max_delay, uint64_t seed) {
  std::lock_guard<std::mutex> lock(mutex_);
  options_.max_delay = max_delay;
  rng_state_ = seed;
}

void fake_fabric::set_max_message_bytes(peer_id peer, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  max_bytes_[peer] = bytes;
}

uint64_t fake_fabric::max_message_bytes(peer_id peer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = max_bytes_.find(peer);
  return it == max_bytes_.end() ? options_.max_message_bytes : it->second;
}

void fake_fabric::drop_peer(peer_id peer) {
  std::shared_ptr<detail::fake_core> core;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    dropped_.insert(peer);
    auto it = planes_.find(peer);
    if (it != planes_.end()) core = it->second.lock();
  }
  if (core) core->drop();
}

bool fake_fabric::is_dropped(peer_id peer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dropped_.count(peer) != 0;
}

std::chrono::microseconds fake_fabric::next_delay() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (options_.max_delay.count() <= 0) return std::chrono::microseconds(0);
  // splitmix64: deterministic for a given seed and send order.
  uint64_t z = (rng_state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return std::chrono::microseconds(z % (static_cast<uint64_t>(options_.max_delay.count()) + 1));
}

std::shared_ptr<detail::fake_core> fake_fabric::find(peer_id peer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = planes_.find(peer);
  return it == planes_.end() ? nullptr : it->second.lock();
}

void fake_fabric::attach(peer_id peer, std::shared_ptr<detail::fake_core> core) {
  std::shared_ptr<detail::fake_core> existing;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = planes_.find(peer);
    if (it != planes_.end()) existing = it->second.lock();
  }
  // live() takes the core's lock, so ask outside the fabric's.
  if (existing && existing->live())
    throw std::invalid_argument("fake_fabric: peer " + std::to_string(peer) +
                                " already has a live data plane");
  std::lock_guard<std::mutex> lock(mutex_);
  planes_[peer] = core;
}

void fake_fabric::detach(peer_id peer, const detail::fake_core* core) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = planes_.find(peer);
  if (it != planes_.end()) {
    auto current = it->second.lock();
    if (!current || current.get() == core) planes_.erase(it);
  }
}

// ------------------------------------------------------------------- plane

namespace {

class fake_data_plane final : public data_plane {
public:
  explicit fake_data_plane(std::shared_ptr<detail::fake_core> core) : core_(std::move(core)) {}
  ~fake_data_plane() override { shutdown(); }

  std::string name() const override { return "fake"; }

  std::vector<char> local_address() const override {
    uint32_t id = core_->self();
    std::vector<char> out(sizeof id);
    std::memcpy(out.data(), &id, sizeof id);
    return out;
  }

  status connect(peer_id peer, std::span<const char> remote_address) override {
    if (peer > max_peer_id)
      return make_error(errc::invalid_argument, "peer id " + std::to_string(peer) + " is too large");
    uint32_t id = 0;
    if (remote_address.size() != sizeof id)
      return make_error(errc::invalid_argument, "address for peer " + std::to_string(peer) +
                                                    " is not a fake data plane address");
    std::memcpy(&id, remote_address.data(), sizeof id);
    if (id != peer)
      return make_error(errc::invalid_argument, "address given for peer " + std::to_string(peer) +
                                                    " belongs to peer " + std::to_string(id));
    return core_->connect(peer);
  }

  void set_receive_handler(receive_handler handler) override { core_->set_handler(std::move(handler)); }

  status send(peer_id peer, channel_id channel, wire_buffer_ref msg, send_completion done) override {
    if (!msg) return make_error(errc::invalid_argument, "send of a null wire_buffer_ref");
    if (channel > channel_mask)
      return make_error(errc::invalid_argument,
                        "channel " + std::to_string(channel) + " does not fit in 48 bits");
    HF_RETURN_IF_ERROR(core_->admit(peer, nullptr));
    fake_fabric& fabric = core_->fabric();
    if (fabric.is_dropped(peer))
      return make_error(errc::peer_down,
                        "peer " + std::to_string(peer) + " is down (dropped from the fake fabric)");
    auto receiver = fabric.find(peer);
    if (!receiver || !receiver->live())
      return make_error(errc::peer_down, "peer " + std::to_string(peer) + " is down (shut down)");
    uint64_t bound = fabric.max_message_bytes(peer);
    if (msg->size() > bound)
      return make_error(errc::wire_too_large,
                        "message of " + std::to_string(msg->size()) + " bytes exceeds peer " +
                            std::to_string(peer) + "'s max_message_bytes of " + std::to_string(bound));
    auto op = std::make_shared<detail::fake_send_op>();
    op->sender = core_;
    op->to = peer;
    op->channel = channel;
    op->msg = std::move(msg);
    op->done = std::move(done);
    HF_RETURN_IF_ERROR(core_->admit(peer, op));
    auto due = clock_type::now() + fabric.next_delay();
    if (!receiver->enqueue_message(core_->self(), channel, op, due))
      core_->complete(op, make_error(errc::peer_down, "peer " + std::to_string(peer) +
                                                          " went down before the message was queued"));
    return status{};
  }

  uint64_t max_message_bytes() const override { return core_->fabric().max_message_bytes(core_->self()); }

  data_plane_stats stats() const override { return core_->stats(); }

  void shutdown() override { core_->stop(); }

private:
  std::shared_ptr<detail::fake_core> core_;
};

}  // namespace

std::unique_ptr<data_plane> make_fake_data_plane(std::shared_ptr<fake_fabric> fabric, peer_id self) {
  if (self > max_peer_id)
    throw std::invalid_argument("make_fake_data_plane: peer id " + std::to_string(self) + " is too large");
  auto core = std::make_shared<detail::fake_core>(fabric, self);
  fabric->attach(self, core);
  if (fabric->is_dropped(self)) core->drop();
  core->start();
  return std::make_unique<fake_data_plane>(std::move(core));
}

}  // namespace hetflow::dataplane
