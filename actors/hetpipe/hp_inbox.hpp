// hp_inbox: how the HetPipe actors (blocking, one thread each) send and wait
// for wire messages: decoded with the node's limits, messages that the
// current wait does not want kept in arrival order for later waits, every
// wait bounded and polling node_services::stopping(), and an error message
// from a peer ending the wait with its text. Include from .cpp files only
// (pulls caf/all.hpp).
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "actors/buffer_pool.hpp"
#include "actors/builtin/job_actor.hpp"
#include "actors/builtin/stream_protocol.hpp"
#include "actors/hetpipe/hp_job.hpp"
#include "actors/ps/ps_checkpoint.hpp"
#include "actors/ralp/ralp_protocol.hpp"
#include "kernels/trace.hpp"
#include "kernels/waits.hpp"

namespace hetflow::actors::hp_job {

class inbox {
public:
  // How long a send of activations or gradients waits, at most, for its bytes
  // to leave (see send()); 0: not at all. hp_stage sets it where compute
  // threads take every CPU the node may use (hp_core.hpp, pipeline_send_linger).
  std::chrono::microseconds activation_linger{0};

  inbox(caf::blocking_actor* self, std::shared_ptr<node_services> svc, std::string me)
      : self_(self),
        svc_(std::move(svc)),
        me_(std::move(me)),
        pool_(buffer_pool::create(std::size_t{64} << 10, std::size_t{512} << 20)),
        allocate_([pool = pool_](std::size_t bytes) { return pool->allocate(bytes); }) {}

  const std::string& me() const noexcept { return me_; }
  caf::blocking_actor* self() const noexcept { return self_; }
  node_services& services() noexcept { return *svc_; }

  status send(const std::string& target, uint32_t kind, const ralp::ralp_info& info,
              std::span<const kernels::tensor_view> ts = {}, std::span<const int32_t> labels = {},
              const std::string& text = {}) {
    // Messages of 64 KiB and more (activations, a wave's weights: tens of
    // MB) come from recycled buffers: a fresh one costs a page fault per page.
    auto msg = ralp::make_message(kind, me_, target, info, ts, labels, text, &allocate_);
    bytes_sent.fetch_add(int64_t(msg->size()), std::memory_order_relaxed);
    // The next stage waits for activations and gradients: they leave before
    // this stage computes on (node_services::send_wire's linger).
    const bool pipeline = kind == kind_forward || kind == kind_backward;
    auto s = svc_->send_wire(target, std::move(msg), pipeline ? activation_linger : std::chrono::microseconds{0});
    if (!s.ok()) {
      // Name the node: a peer found dead by the transport before the node's
      // own watch said so is otherwise only "peer N".
      const std::string node = svc_->node_of(target);
      return make_error(s.code(), me_ + ": cannot send to '" + target + "'" +
                                      (node.empty() ? std::string() : " on node '" + node + "'") + ": " + s.message());
    }
    return {};
  }

  // "actor 'x' on node 'n'"
  std::string who(const std::string& actor) const {
    std::string n = svc_->node_of(actor);
    return "'" + actor + "'" + (n.empty() ? "" : " on node '" + n + "'");
  }

  // The next message `want` accepts (earlier ones it does not are kept).
  // `from`/`what` describe the wait for the watchdog and the timeout error.
  expected<ralp::ralp_message> next(const std::function<bool(const ralp::ralp_message&)>& want, double timeout_s,
                                    const std::string& from, const std::string& what) {
    if (!early_failure_.ok()) return early_failure_;
    for (auto it = kept_.begin(); it != kept_.end(); ++it)
      if (want(*it)) {
        ralp::ralp_message m = std::move(*it);
        kept_.erase(it);
        return m;
      }
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    const auto deadline = t0 + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(timeout_s));
    kernels::waits::scope open(me_, from, what, kernels::waits::span{tk, "wait", "kept", int64_t(kept_.size())});
    std::optional<ralp::ralp_message> got;
    status failure;
    while (!got && failure.ok()) {
      if (svc_->stopping().load()) return make_error(errc::cancelled, me_ + ": stopped");
      if (clock::now() >= deadline)
        return make_error(errc::timeout, me_ + ": no " + what + " from " + from + " within " +
                                             std::to_string(int(timeout_s)) + " s");
      self_->receive(
          [&](wire_atom, const std::string& node, const wire_buffer_ref& buf) {
            if (divert && divert(node, buf)) return;  // a stream batch: the stream source keeps it
            if (!divert && stash_stream && is_stream(node, buf)) {  // before the source exists
              stashed_.emplace_back(node, buf);
              return;
            }
            bytes_received += int64_t(buf->size());
            auto m = ralp::read_message(buf, svc_->read_limits(), "node '" + node + "'");
            if (!m) {
              failure = m.error();
              return;
            }
            if (m->kind == kind_error) {
              failure = make_error(errc::internal, m->text);
              return;
            }
            if (want(*m))
              got = std::move(*m);
            else if (!(intercept && intercept(*m)))
              kept_.push_back(std::move(*m));
          },
          caf::after(std::chrono::milliseconds(100)) >> [] {});
    }
    wait_seconds += std::chrono::duration<double>(clock::now() - t0).count();
    if (!failure.ok()) return failure;
    return std::move(*got);
  }

  // send() may run on a second thread too (hp_stage's push thread): the count is atomic.
  std::atomic<int64_t> bytes_sent{0};
  int64_t bytes_received = 0;
  // input = "stream" (stage 0): the stream source's batches arrive in this
  // mailbox too. divert(node, buf) takes them (true) while next() waits;
  // keep() is the stream source's way back for the messages of this
  // protocol it meets while it waits for a batch (decoded and kept for the
  // next wait; one that does not decode fails that wait).
  std::function<bool(const std::string&, const wire_buffer_ref&)> divert;
  // A streamed job: stream messages that come before divert is set (the
  // shards start once the head names their consumers, while this stage may
  // still wait for its role) are stashed, and set_divert hands them over.
  // Each message is decoded once more to tell, so only stage 0 keeps it on
  // past its role.
  bool stash_stream = false;
  void set_divert(std::function<bool(const std::string&, const wire_buffer_ref&)> d) {
    divert = std::move(d);
    auto early = std::move(stashed_);
    stashed_.clear();
    for (auto& [node, buf] : early)
      if (!divert(node, buf)) keep(node, buf);
  }
  void keep(const std::string& node, const wire_buffer_ref& buf) {
    bytes_received += int64_t(buf->size());
    auto m = ralp::read_message(buf, svc_->read_limits(), "node '" + node + "'");
    if (!m) {
      if (early_failure_.ok()) early_failure_ = m.error();
      return;
    }
    if (m->kind == kind_error) {
      if (early_failure_.ok()) early_failure_ = make_error(errc::internal, m->text);
      return;
    }
    if (intercept && intercept(*m)) return;
    kept_.push_back(std::move(*m));
  }
  // Messages the current wait does not want go to intercept first; true:
  // it took the message (moved from), else it is kept for a later wait (a
  // cuda stage hands its prefetched pull's answers to its upload thread).
  std::function<bool(ralp::ralp_message&)> intercept;
  double wait_seconds = 0;
  kernels::trace::track_id tk = 0;  // the actor's trace track (0: not tracing)

private:
  caf::blocking_actor* self_;
  std::shared_ptr<node_services> svc_;
  std::string me_;
  std::deque<ralp::ralp_message> kept_;
  status early_failure_;  // from keep()
  std::deque<std::pair<std::string, wire_buffer_ref>> stashed_;  // stream messages before set_divert
  bool is_stream(const std::string& node, const wire_buffer_ref& buf) const {
    auto m = schemas::decode_message(buf, svc_->read_limits(), "node '" + node + "'");
    return m && builtin::stream::is_stream_kind(m->header().kind);
  }
  std::shared_ptr<buffer_pool> pool_;  // the messages this actor sends (they come back when delivered)
  schemas::message_builder::allocator allocate_;
};

// A stage's or shard's role from the head ("key=value" lines). The head
// plans first and may measure profiles, here and on the other hosts (its
// wait for them ends 20 s before this one), so the wait is ps_timeout + 310
// s. Meanwhile the head may ask a shard for its host's profiles
// (kind_profile, hp_profiles.hpp) and time the link to this node
// (kind_link): answered here, then the wait goes on.
inline expected<std::map<std::string, std::string>> await_role(inbox& ib, const topology::cluster& c) {
  const double timeout = c.job.params.get_number("ps_timeout", 30.0) + 310.0;
  for (;;) {
    HF_ASSIGN_OR_RETURN(auto m, ib.next([](const ralp::ralp_message& x) {
                                  return x.kind == kind_role || x.kind == kind_profile || x.kind == kind_link;
                                }, timeout, "the head " + ib.who(head_name), "role"));
    if (m.kind == kind_role) return decode_role(m.text);
    if (m.kind == kind_link) {  // the head timing the link (hp_profiles.hpp)
      HF_RETURN_IF_ERROR(ib.send(head_name, kind_link, m.info));
      continue;
    }
    auto answer = measure_host_profiles(c, ib.services().node_index(), m.info.aux);
    if (!answer) {
      (void)ib.send(head_name, kind_error, {}, {}, {},
                    "profiles of node '" + ib.services().node_name() + "': " + answer.error().message());
      return answer.error();
    }
    HF_RETURN_IF_ERROR(ib.send(head_name, kind_profile, {}, {}, {}, *answer));
  }
}

// --resume (hp_ps.cpp): sends the head this actor's readable checkpoint
// labels and returns the one the head chose for everyone (-1: none).
expected<int64_t> agree_on_label(inbox& ib, const ps::checkpoint_store* store, const std::string& me);

// Tensor i of m as a view (f32 checked).
inline expected<kernels::tensor_view> f32_view(const ralp::ralp_message& m, std::size_t i) {
  if (i >= m.tensors())
    return make_error(errc::wire_corrupt, "hetpipe message from " + m.sender + ": tensor " + std::to_string(i) +
                                              " missing");
  const auto& tv = m.msg.tensor(i);
  if (tv.type != dtype::f32 || tv.shape.size() > std::size_t(kernels::shape::max_rank))
    return make_error(errc::wire_corrupt, "hetpipe message from " + m.sender + ": tensor " + std::to_string(i) +
                                              " is not f32");
  return kernels::tensor_view(reinterpret_cast<const float*>(tv.data.data()), kernels::shape(tv.shape));
}

}  // namespace hetflow::actors::hp_job
