#include "actors/dataplane/ucx_data_plane.hpp"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <string_view>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <new>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace hetflow::dataplane {
namespace {

using clock_type = std::chrono::steady_clock;

constexpr unsigned channel_bits = 48;
constexpr uint64_t channel_mask = (uint64_t{1} << channel_bits) - 1;
// Sender id reserved for control messages; the channel bits then carry the
// real sender's id and the payload one control_op byte.
constexpr uint32_t control_sender = 0xffff;
constexpr uint32_t max_peer_id = control_sender - 1;

enum class control_op : uint8_t { goodbye = 1, heartbeat = 2 };
// A control message: the op, then ucx_options::control_token (8 bytes).
constexpr std::size_t control_bytes = 9;

constexpr char address_magic[4] = {'H', 'F', 'U', 'X'};
constexpr uint32_t address_version = 1;

// Who and where a process is, so a peer on the same host (same kernel boot,
// same pid namespace) can tell from /proc whether it is still alive.
struct process_identity {
  uint32_t pid = 0;
  uint32_t pad = 0;
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22, in clock ticks
  uint64_t pid_namespace = 0;  // inode of /proc/self/ns/pid
  char boot_id[40] = {};       // /proc/sys/kernel/random/boot_id
  bool known() const { return pid != 0 && start_time != 0 && pid_namespace != 0 && boot_id[0] != 0; }
  bool same_host_as(const process_identity& o) const {
    return known() && o.known() && pid_namespace == o.pid_namespace &&
           std::memcmp(boot_id, o.boot_id, sizeof boot_id) == 0;
  }
};

struct address_header {
  char magic[4];
  uint32_t version;
  uint32_t peer;
  uint32_t error_mode;  // ucx_error_mode; UCX refuses mixed modes on one connection
  uint64_t max_message_bytes;
  process_identity process;
};
static_assert(sizeof(address_header) == 24 + 64);

// Reads state (field 3) and start time (field 22) of /proc/<pid>/stat.
bool read_proc_stat(uint32_t pid, char& state, uint64_t& start_time) {
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return false;
  char buf[1024];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  // comm (field 2) may hold spaces and parentheses: fields resume after the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return false;
  ++p;
  int field = 2;
  char* end = nullptr;
  while (*p != 0) {
    while (*p == ' ') ++p;
    ++field;
    if (field == 3) state = *p;
    if (field == 22) {
      start_time = std::strtoull(p, &end, 10);
      return true;
    }
    while (*p != 0 && *p != ' ') ++p;
  }
  return false;
}

process_identity this_process() {
  process_identity id;
  id.pid = static_cast<uint32_t>(getpid());
  char state = 0;
  (void)read_proc_stat(id.pid, state, id.start_time);
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) == 0) id.pid_namespace = st.st_ino;
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    size_t n = std::fread(id.boot_id, 1, sizeof id.boot_id - 1, f);
    std::fclose(f);
    while (n > 0 && (id.boot_id[n - 1] == '\n' || id.boot_id[n - 1] == ' ')) id.boot_id[--n] = 0;
  }
  return id;
}

// False once the process is gone, a zombie, or its pid was reused.
bool process_alive(const process_identity& p) {
  char state = 0;
  uint64_t start = 0;
  if (!read_proc_stat(p.pid, state, start)) return false;
  return state != 'Z' && state != 'X' && start == p.start_time;
}

// Whether a UCX transport list (UCX_TLS syntax: "a,b", "^a,b" excludes,
// empty = all) lets UCX use any of `family`.
bool tls_allows(const std::string& tls, std::initializer_list<std::string_view> family) {
  if (tls.empty() || tls == "all") return true;
  bool excluding = tls[0] == '^';
  bool listed = false;
  std::size_t begin = excluding ? 1 : 0;
  while (begin <= tls.size()) {
    std::size_t end = tls.find(',', begin);
    if (end == std::string::npos) end = tls.size();
    std::string_view name(tls.data() + begin, end - begin);
    if (name == "all") listed = true;
    for (std::string_view f : family)
      if (name == f) listed = true;
    begin = end + 1;
  }
  return excluding ? !listed : listed;
}

// UCX 1.13's shared-memory active-message transports (posix, sysv) cannot
// report a dead peer, so under UCP_ERR_HANDLING_MODE_PEER UCP will not use
// them: same-host traffic then needs a network transport for its active
// messages (TCP loopback), with CMA still carrying rendezvous data.
bool tls_allows_shared_memory(const std::string& tls) {
  return tls_allows(tls, {"sm", "shm", "mm", "posix", "sysv"});
}
// Transports that read or write a same-host peer's memory directly (the CMA
// abort hazard of mode NONE). An empty list (UCX's default) allows them.
bool tls_allows_peer_memory(const std::string& tls) {
  return tls_allows(tls, {"sm", "shm", "mm", "posix", "sysv", "cma", "knem", "xpmem"});
}
bool tls_allows_network(const std::string& tls) {
  return tls_allows(tls, {"tcp", "ib", "rc", "rc_v", "rc_x", "rc_verbs", "rc_mlx5", "ud", "ud_v",
                          "ud_x", "ud_verbs", "ud_mlx5", "dc", "dc_x", "dc_mlx5"});
}

// Progress-loop tuning (see the header comment).
constexpr int idle_wait_ms = 100;
constexpr int no_efd_wait_ms = 1;
// Bounds on shutdown(): waiting for goodbyes to leave, then for UCX to
// return every request after the endpoints were force-closed.
constexpr auto goodbye_deadline = std::chrono::milliseconds(500);
constexpr auto teardown_deadline = std::chrono::seconds(1);
// Receive buffers at least this large are advised onto transparent huge
// pages: a fresh 64 MiB buffer otherwise costs ~16k page faults.
// Receives at least this large count against max_active_large_receives.
constexpr std::size_t large_receive_bytes = std::size_t{256} << 10;

uint64_t make_tag(uint32_t from, uint64_t channel) {
  return (uint64_t{from} << channel_bits) | channel;
}

std::string ucs_text(ucs_status_t s) { return ucs_status_string(s); }

// Sends to a peer whose transport failed with one of these mean the peer is
// gone (as opposed to a local misuse or resource problem).
bool is_peer_failure(ucs_status_t s) {
  switch (s) {
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_IO_ERROR:
      return true;
    default:
      return false;
  }
}

// See teardown(): buffers a peer might still read.
void keep_forever(wire_buffer_ref buf) {
  static std::mutex mutex;
  static auto* kept = new std::vector<wire_buffer_ref>();  // intentionally never destroyed
  std::lock_guard<std::mutex> lock(mutex);
  kept->push_back(std::move(buf));
}

class ucx_data_plane;

// One queued or posted send. Owned by the queue, then by inflight_sends_.
struct send_op {
  ucx_data_plane* owner = nullptr;
  peer_id peer = 0;
  channel_id channel = 0;
  wire_buffer_ref msg;
  send_completion done;
  void* request = nullptr;
  ucs_status_t result = UCS_OK;
  bool completed = false;  // the UCX callback ran
  // Set when shutdown gave up on UCX returning this request and completed it
  // itself; a late UCX callback then only frees the request.
  bool abandoned = false;
};

// data: delivered in order per tag; the others only drain the message:
// oversized (above max_message_bytes), control (goodbye), discard (a message
// nobody will get: its peer is down, or we are shutting down).
enum class recv_kind : uint8_t { data, oversized, control, discard };

struct recv_op {
  ucx_data_plane* owner = nullptr;
  recv_kind kind = recv_kind::data;
  uint64_t tag = 0;
  uint64_t length = 0;
  wire_buffer buf;
  void* request = nullptr;
  ucs_status_t result = UCS_INPROGRESS;
  bool complete = false;
  bool abandoned = false;  // as send_op::abandoned
  bool large = false;       // holds one of the large-receive slots while posted
  bool deferred = false;    // probed, waiting for a slot (see start_deferred)
  bool no_memory = false;   // could not allocate; drained into scratch
  ucp_tag_message_h pending_message = nullptr;  // while deferred
  alignas(64) std::byte scratch[64];
};

struct connect_cmd {
  peer_id peer = 0;
  uint64_t max_message_bytes = 0;
  process_identity process;
  std::vector<char> ucp_address;
  std::promise<status> result;
};

// The progress thread's view of one peer.
struct peer_conn {
  ucx_data_plane* owner = nullptr;
  peer_id id = 0;
  ucp_ep_h ep = nullptr;
  bool down = false;
  std::string down_reason;
  // False for endpoints in UCP_ERR_HANDLING_MODE_NONE: we watch those
  // ourselves (watch_peers): heartbeats, and /proc when on this host.
  bool ucx_detects_failure = true;
  bool watch_process = false;
  bool process_gone = false;  // /proc said so: nobody can pull our buffers
  bool heartbeat_in_flight = false;
  process_identity process;
};

// What send() needs to decide at once, guarded by ucx_data_plane::mutex_.
struct peer_info {
  uint64_t max_message_bytes = 0;
  bool down = false;
  std::string down_reason;
};

class ucx_data_plane final : public data_plane {
public:
  explicit ucx_data_plane(const ucx_options& options) : options_(options) {
    // Control messages: [op][the cluster's token, 8 bytes little-endian].
    auto fill = [&](std::array<std::byte, control_bytes>& m, control_op op) {
      m[0] = static_cast<std::byte>(op);
      std::memcpy(m.data() + 1, &options_.control_token, sizeof options_.control_token);
    };
    fill(goodbye_msg_, control_op::goodbye);
    fill(heartbeat_msg_, control_op::heartbeat);
    if (!options_.on_error) {
      options_.on_error = [](const status& s) {
        std::fprintf(stderr, "hetflow ucx data plane: %s\n", s.to_string().c_str());
      };
    }
  }

  // Must not run on the progress thread (do not destroy the plane from a
  // handler). The eventfd outlives shutdown() so a racing send() never
  // writes to a recycled descriptor.
  ~ucx_data_plane() override {
    shutdown();
    if (event_fd_ >= 0) close(event_fd_);
  }

  // Starts the progress thread, which opens UCX; returns its verdict.
  status start() {
    if (options_.error_mode == ucx_error_mode::automatic)
      options_.error_mode = tls_allows_peer_memory(options_.tls) ? ucx_error_mode::peer : ucx_error_mode::none;
    event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (event_fd_ < 0)
      return make_error(errc::transport_error, std::string("eventfd: ") + std::strerror(errno));
    std::future<status> ready = init_result_.get_future();
    thread_ = std::thread([this] { run(); });
    status s = ready.get();
    if (!s.ok()) {
      thread_.join();
      stopped_ = true;
    }
    return s;
  }

  std::string name() const override {
    return "ucx(" + (options_.tls.empty() ? std::string("default") : options_.tls) + ")";
  }

  std::vector<char> local_address() const override { return local_address_; }

  status connect(peer_id peer, std::span<const char> remote_address) override {
    if (peer > max_peer_id)
      return make_error(errc::invalid_argument,
                        "peer id " + std::to_string(peer) + " is too large (max " +
                            std::to_string(max_peer_id) + ")");
    if (remote_address.size() < sizeof(address_header))
      return make_error(errc::invalid_argument,
                        "address for peer " + std::to_string(peer) + " is " +
                            std::to_string(remote_address.size()) +
                            " bytes, too short to be a ucx data plane address");
    address_header h;
    std::memcpy(&h, remote_address.data(), sizeof h);
    if (std::memcmp(h.magic, address_magic, 4) != 0 || h.version != address_version)
      return make_error(errc::invalid_argument, "address for peer " + std::to_string(peer) +
                                                    " is not a ucx data plane address (version " +
                                                    std::to_string(address_version) + ")");
    if (h.peer != peer)
      return make_error(errc::invalid_argument, "address given for peer " + std::to_string(peer) +
                                                    " belongs to peer " + std::to_string(h.peer));
    if (h.error_mode != static_cast<uint32_t>(options_.error_mode))
      return make_error(errc::invalid_argument,
                        "peer " + std::to_string(peer) + " uses ucx error_mode " +
                            (h.error_mode == 0 ? "peer" : "none") + " and this node " +
                            (options_.error_mode == ucx_error_mode::peer ? "peer" : "none") +
                            "; UCX cannot connect the two, configure every node alike");
    auto cmd = std::make_unique<connect_cmd>();
    cmd->peer = peer;
    cmd->max_message_bytes = h.max_message_bytes;
    cmd->process = h.process;
    cmd->ucp_address.assign(remote_address.begin() + sizeof h, remote_address.end());
    if (std::this_thread::get_id() == thread_id_) {
      // From a handler: we are the progress thread, so do it inline.
      do_connect(*cmd);
      return cmd->result.get_future().get();
    }
    std::future<status> result = cmd->result.get_future();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopped_) return make_error(errc::cancelled, "ucx data plane is shut down");
      connect_queue_.push_back(std::move(cmd));
      has_commands_.store(true, std::memory_order_release);
    }
    wake();
    return result.get();
  }

  void set_receive_handler(receive_handler handler) override {
    auto h = std::make_shared<receive_handler>(std::move(handler));
    std::lock_guard<std::mutex> lock(handler_mutex_);
    handler_ = std::move(h);
  }

  status send(peer_id peer, channel_id channel, wire_buffer_ref msg,
              send_completion done) override {
    if (!msg) return make_error(errc::invalid_argument, "send of a null wire_buffer_ref");
    if (channel > channel_mask)
      return make_error(errc::invalid_argument,
                        "channel " + std::to_string(channel) + " does not fit in 48 bits");
    auto op = std::make_unique<send_op>();
    op->owner = this;
    op->peer = peer;
    op->channel = channel;
    op->done = std::move(done);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopped_) return make_error(errc::cancelled, "ucx data plane is shut down");
      auto it = peers_.find(peer);
      if (it == peers_.end())
        return make_error(errc::not_found,
                          "peer " + std::to_string(peer) + " is not connected; call connect() first");
      if (it->second.down)
        return make_error(errc::peer_down,
                          "peer " + std::to_string(peer) + " is down: " + it->second.down_reason);
      if (options_.check_peer_limit_on_send && msg->size() > it->second.max_message_bytes)
        return make_error(errc::wire_too_large,
                          "message of " + std::to_string(msg->size()) + " bytes exceeds peer " +
                              std::to_string(peer) + "'s max_message_bytes of " +
                              std::to_string(it->second.max_message_bytes));
      op->msg = std::move(msg);
      send_queue_.push_back(std::move(op));
      has_commands_.store(true, std::memory_order_release);
    }
    wake();
    return status{};
  }

  uint64_t max_message_bytes() const override { return options_.max_message_bytes; }

  data_plane_stats stats() const override {
    data_plane_stats s;
    s.messages_sent = messages_sent_.load(std::memory_order_relaxed);
    s.bytes_sent = bytes_sent_.load(std::memory_order_relaxed);
    s.messages_received = messages_received_.load(std::memory_order_relaxed);
    s.bytes_received = bytes_received_.load(std::memory_order_relaxed);
    return s;
  }

  // From the progress thread (a handler) this only requests the stop; the
  // thread tears down after the handler returns and the destructor joins.
  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopped_ = true;
    }
    stop_requested_.store(true, std::memory_order_release);
    if (event_fd_ >= 0) {
      uint64_t one = 1;
      (void)!write(event_fd_, &one, sizeof one);
    }
    if (std::this_thread::get_id() == thread_id_) return;
    std::lock_guard<std::mutex> join_lock(join_mutex_);
    if (thread_.joinable()) thread_.join();
  }

  // --- UCX callbacks: they only record; user code runs after progress returns.

  static void on_send_done(void* request, ucs_status_t s, void* user_data) {
    auto* op = static_cast<send_op*>(user_data);
    ucp_request_free(request);
    op->request = nullptr;
    op->completed = true;
    if (op->abandoned) return;
    op->result = s;
    op->owner->inflight_sends_.erase(op);
    op->owner->completed_sends_.push_back(op);
  }

  static void on_recv_done(void* request, ucs_status_t s, const ucp_tag_recv_info_t*,
                           void* user_data) {
    auto* op = static_cast<recv_op*>(user_data);
    ucp_request_free(request);
    op->request = nullptr;
    if (op->large) --op->owner->active_large_receives_;
    if (op->abandoned) return;
    op->result = s;
    op->complete = true;
    --op->owner->recvs_in_flight_;
    op->owner->completed_recvs_.push_back(op);
  }

  static void on_control_sent(void* request, ucs_status_t, void* user_data) {
    ucp_request_free(request);
    --static_cast<ucx_data_plane*>(user_data)->goodbyes_in_flight_;
  }

  static void on_heartbeat_sent(void* request, ucs_status_t s, void* user_data) {
    ucp_request_free(request);
    auto* conn = static_cast<peer_conn*>(user_data);
    conn->heartbeat_in_flight = false;
    if (s != UCS_OK && s != UCS_ERR_CANCELED) conn->owner->ep_errors_.emplace_back(conn, s);
  }

  static void on_ep_error(void* arg, ucp_ep_h, ucs_status_t s) {
    auto* conn = static_cast<peer_conn*>(arg);
    conn->owner->ep_errors_.emplace_back(conn, s);
  }

private:
  // ------------------------------------------------------------------ setup

  status init_ucx() {
    self_process_ = this_process();
    const char* env_tls = std::getenv("UCX_TLS");
    const std::string tls = !options_.tls.empty() ? options_.tls : env_tls != nullptr ? env_tls : "";
    shared_memory_only_ = tls_allows_shared_memory(tls) && !tls_allows_network(tls);
    ucp_config_t* config = nullptr;
    ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
    if (s != UCS_OK)
      return make_error(errc::transport_error, "ucp_config_read: " + ucs_text(s));
    if (!options_.tls.empty()) {
      s = ucp_config_modify(config, "TLS", options_.tls.c_str());
      if (s != UCS_OK) {
        ucp_config_release(config);
        return make_error(errc::invalid_argument,
                          "UCX rejected transport list '" + options_.tls + "': " + ucs_text(s));
      }
    }
    if (!options_.net_devices.empty() && std::getenv("UCX_NET_DEVICES") == nullptr) {
      s = ucp_config_modify(config, "NET_DEVICES", options_.net_devices.c_str());
      if (s != UCS_OK) {
        ucp_config_release(config);
        return make_error(errc::invalid_argument,
                          "UCX rejected network devices '" + options_.net_devices + "': " + ucs_text(s));
      }
    }
    // Mode peer: messages up to 1 MiB go eager (UCX 1.13's threshold is
    // ~8 KiB over TCP). Its rendezvous already copies in this mode, and each
    // of its handshake steps needs the sender's progress thread on a core:
    // on a node whose one CPU computes (a HetPipe stage) that thread waits a
    // time slice per step, and a 221 KB activation took 2.5 ms. Eager up to
    // 1 MiB: HetPipe LeNet-5 1 VW +4%, the capped VGG pair +5% (2-core VM;
    // bench/RESULTS.md). UCX_RNDV_THRESH in the environment wins.
    if (options_.error_mode == ucx_error_mode::peer && std::getenv("UCX_RNDV_THRESH") == nullptr)
      (void)ucp_config_modify(config, "RNDV_THRESH", "1m");
    if (std::getenv("UCX_KEEPALIVE_INTERVAL") == nullptr && options_.keepalive_interval.count() > 0) {
      std::string ka = std::to_string(options_.keepalive_interval.count()) + "ms";
      (void)ucp_config_modify(config, "KEEPALIVE_INTERVAL", ka.c_str());
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
    params.mt_workers_shared = 0;
    s = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    std::string what = options_.tls.empty() ? std::string("UCX's default transports")
                                            : "transports '" + options_.tls + "'";
    if (s != UCS_OK) {
      context_ = nullptr;
      return make_error(errc::transport_error, "UCX could not open " + what + ": " + ucs_text(s) +
                                                   " (see `ucx_info -d` for what this machine has)");
    }
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    s = ucp_worker_create(context_, &wp, &worker_);
    if (s != UCS_OK) {
      worker_ = nullptr;
      return make_error(errc::transport_error,
                        "UCX could not create a worker on " + what + ": " + ucs_text(s));
    }
    ucp_address_t* addr = nullptr;
    size_t addr_len = 0;
    s = ucp_worker_get_address(worker_, &addr, &addr_len);
    if (s != UCS_OK)
      return make_error(errc::transport_error, "ucp_worker_get_address: " + ucs_text(s));
    address_header h{};
    std::memcpy(h.magic, address_magic, 4);
    h.version = address_version;
    h.peer = options_.self_peer;
    h.max_message_bytes = options_.max_message_bytes;
    h.error_mode = static_cast<uint32_t>(options_.error_mode);
    h.process = self_process_;
    local_address_.resize(sizeof h + addr_len);
    std::memcpy(local_address_.data(), &h, sizeof h);
    std::memcpy(local_address_.data() + sizeof h, addr, addr_len);
    ucp_worker_release_address(worker_, addr);

    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0)
      return make_error(errc::transport_error, std::string("epoll_create1: ") + std::strerror(errno));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = event_fd_;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, event_fd_, &ev) != 0)
      return make_error(errc::transport_error, std::string("epoll_ctl: ") + std::strerror(errno));
    int efd = -1;
    if (ucp_worker_get_efd(worker_, &efd) == UCS_OK && efd >= 0) {
      ev.data.fd = efd;
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, efd, &ev) == 0) worker_efd_ = efd;
    }
    // TODO(perf): without a worker efd (worker_efd_ < 0) an idle plane wakes
    // every no_efd_wait_ms to poll; UCX 1.13 gave one with every transport
    // tried here (sm, tcp, self).
    return status{};
  }

  void teardown_ucx() {
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    worker_ = nullptr;
    if (context_ != nullptr) ucp_cleanup(context_);
    context_ = nullptr;
    if (epoll_fd_ >= 0) close(epoll_fd_);
    epoll_fd_ = -1;
  }

  // ---------------------------------------------------------- progress loop

  void run() {
    thread_id_ = std::this_thread::get_id();
    status init = init_ucx();
    if (!init.ok()) {
      teardown_ucx();
      init_result_.set_value(std::move(init));
      return;
    }
    init_result_.set_value(status{});

    auto last_activity = clock_type::now();
    while (!stop_requested_.load(std::memory_order_acquire)) {
      bool activity = drain_commands();
      if (ucp_worker_progress(worker_) != 0) activity = true;
      if (probe_arrivals()) activity = true;
      if (after_progress()) activity = true;
      auto now = clock_type::now();
      watch_peers(now);
      if (activity) {
        last_activity = now;
        continue;
      }
      // Never sleep with operations in flight: not every event that moves
      // them on wakes the worker efd (a TCP socket turning writable does
      // not), so sleeping there stalls transfers for the whole timeout.
      bool in_flight = !inflight_sends_.empty() || recvs_in_flight_ > 0 ||
                       !deferred_receives_.empty() || !close_requests_.empty();
      if (in_flight || now - last_activity < options_.idle_spin) {
        // Spin, but let any other runnable thread on this core go first: the
        // actor thread that this transfer is waiting for may be queued
        // behind us. Where cores are shared (several nodes per machine, a
        // trainer's compute threads) a plain spin here held collectives up
        // for whole time slices (16 MiB ring all-reduce, 2 nodes on 2 cores:
        // medians of 5-29 ms without the yield, 4.1-4.9 ms with it; 3 data-
        // parallel LeNet replicas on 2 cores: 4k -> 30k samples/s).
        sched_yield();
        continue;
      }
      wait_for_events(idle_wait_ms);
    }
    teardown();
  }

  void wake() {
    if (sleeping_.load(std::memory_order_seq_cst)) {
      uint64_t one = 1;
      (void)!write(event_fd_, &one, sizeof one);
    }
  }

  void wait_for_events(int timeout_ms) {
    sleeping_.store(true, std::memory_order_seq_cst);
    bool pending;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending = !send_queue_.empty() || !connect_queue_.empty();
    }
    if (!pending && !stop_requested_.load(std::memory_order_acquire)) {
      // Without a worker efd we can only nap briefly and poll again.
      bool armed = worker_efd_ < 0 || ucp_worker_arm(worker_) == UCS_OK;
      if (armed) {
        epoll_event evs[2];
        (void)epoll_wait(epoll_fd_, evs, 2, worker_efd_ < 0 ? no_efd_wait_ms : timeout_ms);
        uint64_t drained;
        (void)!read(event_fd_, &drained, sizeof drained);
      }
    }
    sleeping_.store(false, std::memory_order_relaxed);
  }

  // Hot: runs every loop iteration. The flag keeps an empty poll lock-free;
  // the batches keep their capacity, so a busy loop does not allocate.
  bool drain_commands() {
    if (!has_commands_.load(std::memory_order_acquire)) return false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      connect_batch_.swap(connect_queue_);
      send_batch_.swap(send_queue_);
      has_commands_.store(false, std::memory_order_relaxed);
    }
    for (auto& c : connect_batch_) do_connect(*c);
    for (auto& op : send_batch_) post_send(std::move(op));
    connect_batch_.clear();
    send_batch_.clear();
    run_send_completions();
    return true;
  }

  void do_connect(connect_cmd& cmd) {
    auto it = conns_.find(cmd.peer);
    if (it != conns_.end() && !it->second->down) {
      cmd.result.set_value(make_error(errc::already_exists,
                                      "peer " + std::to_string(cmd.peer) + " is already connected"));
      return;
    }
    auto conn = std::make_unique<peer_conn>();
    conn->owner = this;
    conn->id = cmd.peer;
    conn->process = cmd.process;
    // ucx_error_mode::peer: UCP_ERR_HANDLING_MODE_PEER wherever UCX can
    // honour it. The exception is a transport list with shared memory and no
    // network transport (e.g. "sm,self"): UCP refuses posix/sysv under PEER
    // (see tls_allows_network), so such a peer, necessarily on this host,
    // gets mode NONE like every peer under ucx_error_mode::none.
    // Known hazard of mode NONE (UCX 1.13): if a peer dies while we pull a
    // rendezvous message from it over CMA, UCX treats the failed
    // process_vm_readv as unhandled and aborts this process.
    // TODO(robustness): drop mode NONE for "sm,self" once the UCX in use
    // accepts posix/sysv under PEER error handling.
    bool same_host = self_process_.same_host_as(cmd.process);
    conn->ucx_detects_failure = options_.error_mode == ucx_error_mode::peer && !(same_host && shared_memory_only_);
    conn->watch_process = !conn->ucx_detects_failure && same_host && options_.watch_processes;
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.address = reinterpret_cast<const ucp_address_t*>(cmd.ucp_address.data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    if (conn->ucx_detects_failure) {
      ep.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      ep.err_handler.cb = &ucx_data_plane::on_ep_error;
      ep.err_handler.arg = conn.get();
    }
    ucs_status_t s = ucp_ep_create(worker_, &ep, &conn->ep);
    if (s != UCS_OK) {
      cmd.result.set_value(make_error(
          errc::transport_error,
          "cannot reach peer " + std::to_string(cmd.peer) + " over " +
              (options_.tls.empty() ? std::string("UCX's default transports")
                                    : "transports '" + options_.tls + "'") +
              ": " + ucs_text(s) +
              (conn->ucx_detects_failure && shared_memory_only_
                   ? " (shared memory alone reaches only peers on this host and in this pid "
                     "namespace; add tcp to the transport list)"
                   : "")));
      return;
    }
    if (it != conns_.end()) {
      // Reconnect after the peer went down: the old conn's endpoint is
      // already closed; keep the object until teardown in case UCX still
      // holds its pointer.
      retired_conns_.push_back(std::move(it->second));
      it->second = std::move(conn);
    } else {
      conns_.emplace(cmd.peer, std::move(conn));
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      peers_[cmd.peer] = peer_info{cmd.max_message_bytes, false, {}};
    }
    cmd.result.set_value(status{});
  }

  void post_send(std::unique_ptr<send_op> op) {
    auto it = conns_.find(op->peer);
    if (it == conns_.end() || it->second->down || it->second->ep == nullptr) {
      op->result = UCS_ERR_UNREACHABLE;
      completed_sends_.push_back(op.release());
      return;
    }
    static const std::byte empty_payload{};
    const void* data = op->msg->empty() ? &empty_payload : op->msg->data();
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = &ucx_data_plane::on_send_done;
    p.user_data = op.get();
    ucs_status_ptr_t r = ucp_tag_send_nbx(it->second->ep, data, op->msg->size(),
                                          make_tag(options_.self_peer, op->channel), &p);
    send_op* raw = op.release();
    // UCX may already have run the callback inside the call (seen for
    // operations on a failed endpoint); it then owns the completion.
    if (raw->completed) return;
    if (r == nullptr) {
      raw->result = UCS_OK;
      completed_sends_.push_back(raw);
    } else if (UCS_PTR_IS_ERR(r)) {
      raw->result = UCS_PTR_STATUS(r);
      completed_sends_.push_back(raw);
    } else {
      raw->request = r;
      inflight_sends_.insert(raw);
    }
  }

  // Takes every message UCX has matched so far and starts receiving it.
  bool probe_arrivals() {
    bool any = false;
    for (int i = 0; i < 64; ++i) {
      ucp_tag_recv_info_t info{};
      ucp_tag_message_h m = ucp_tag_probe_nb(worker_, 0, 0, 1, &info);
      if (m == nullptr) break;
      any = true;
      start_receive(m, info);
    }
    return any;
  }

  void start_receive(ucp_tag_message_h m, const ucp_tag_recv_info_t& info) {
    auto op = std::make_unique<recv_op>();
    op->owner = this;
    op->tag = info.sender_tag;
    op->length = info.length;
    if ((info.sender_tag >> channel_bits) == control_sender) {
      op->kind = recv_kind::control;
    } else if (info.length > options_.max_message_bytes) {
      op->kind = recv_kind::oversized;
    } else {
      op->kind = recv_kind::data;
      // Only from mode-NONE peers, whose rendezvous UCX moves zero-copy
      // (CMA, TCP put). In mode PEER, UCX 1.13 pipelines rendezvous data
      // through active messages, where holding back matched messages stalled
      // transfers now and then (seen with TCP: ~1 run in 15 of the flood
      // test in ucx_data_plane_test).
      auto it = conns_.find(static_cast<peer_id>(info.sender_tag >> channel_bits));
      op->large = info.length >= large_receive_bytes && it != conns_.end() &&
                  !it->second->ucx_detects_failure;
    }
    recv_op* raw = op.get();
    if (raw->kind == recv_kind::data) {
      recv_queues_[raw->tag].push_back(std::move(op));
      if (raw->large && active_large_receives_ >= options_.max_active_large_receives) {
        // Later: starting every probed rendezvous at once interleaves their
        // transfers (UCX round-robins CMA segments), so all finish late and
        // the working set outgrows the caches. Ordering is kept by the queue.
        raw->deferred = true;
        raw->pending_message = m;
        deferred_receives_.push_back(raw);
        return;
      }
    } else {
      side_recvs_.emplace(raw, std::move(op));
    }
    post_receive(raw, m);
  }

  void post_receive(recv_op* raw, ucp_tag_message_h m) {
    void* dst = raw->scratch;
    size_t len = sizeof raw->scratch;
    if (raw->kind == recv_kind::data) {
      try {
        if (options_.receive_buffer_allocator) {
          raw->buf = options_.receive_buffer_allocator(raw->length);
          if (raw->buf.size() != raw->length) throw std::bad_alloc();
        } else {
          raw->buf = wire_buffer(raw->length);  // huge pages from 4 MiB
        }
        if (raw->length > 0) dst = raw->buf.data();
        len = raw->length;
      } catch (const std::exception&) {
        raw->no_memory = true;  // drained into scratch, reported on delivery
        raw->buf = wire_buffer();
      }
      if (raw->large) ++active_large_receives_;
    }
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv = &ucx_data_plane::on_recv_done;
    p.user_data = raw;
    ++recvs_in_flight_;  // on_recv_done takes it back, possibly inside the call
    ucs_status_ptr_t r = ucp_tag_msg_recv_nbx(worker_, dst, len, m, &p);
    if (!raw->complete) {
      if (r == nullptr || UCS_PTR_IS_ERR(r)) {
        --recvs_in_flight_;
        if (raw->large) --active_large_receives_;
        raw->result = r == nullptr ? UCS_OK : UCS_PTR_STATUS(r);
        raw->complete = true;
        completed_recvs_.push_back(raw);
      } else {
        raw->request = r;
      }
    }
  }

  // Receives `m` into scratch and forgets it (UCX must see every probed
  // message received, or it leaks the descriptor and, for a rendezvous,
  // leaves the sender waiting).
  void discard_message(ucp_tag_message_h m, uint64_t tag) {
    auto op = std::make_unique<recv_op>();
    op->owner = this;
    op->tag = tag;
    op->kind = recv_kind::discard;
    recv_op* raw = op.get();
    side_recvs_.emplace(raw, std::move(op));
    post_receive(raw, m);
  }

  // Starts deferred large receives while slots are free.
  bool start_deferred() {
    bool any = false;
    while (!deferred_receives_.empty() &&
           active_large_receives_ < options_.max_active_large_receives) {
      recv_op* op = deferred_receives_.front();
      deferred_receives_.pop_front();
      any = true;
      op->deferred = false;
      ucp_tag_message_h m = std::exchange(op->pending_message, nullptr);
      if (op->abandoned)
        discard_message(m, op->tag);
      else
        post_receive(op, m);
    }
    return any;
  }

  // Runs what the UCX callbacks recorded: peer failures first (so send
  // completions name the right cause), then arrivals, then send completions.
  bool after_progress() {
    bool any = false;
    // Sort finished receives first: delivering (or abandoning, when a peer
    // goes down below) frees data ops, so only their tags are kept.
    std::vector<uint64_t> data_tags;
    std::vector<recv_op*> side_done;
    if (!completed_recvs_.empty()) {
      any = true;
      for (recv_op* op : completed_recvs_) {
        if (op->kind == recv_kind::data)
          data_tags.push_back(op->tag);
        else
          side_done.push_back(op);
      }
      completed_recvs_.clear();
    }
    if (!ep_errors_.empty()) {
      any = true;
      auto errors = std::move(ep_errors_);
      ep_errors_.clear();
      for (auto& [conn, s] : errors) {
        auto it = conns_.find(conn->id);
        if (it != conns_.end() && it->second.get() == conn)
          mark_peer_down(conn->id, "transport reported " + ucs_text(s));
      }
    }
    for (recv_op* op : side_done) finish_side_recv(op);
    for (uint64_t tag : data_tags) deliver_in_order(tag);
    if (start_deferred()) any = true;
    if (!completed_sends_.empty()) {
      any = true;
      run_send_completions();
    }
    if (!close_requests_.empty()) poll_close_requests();
    return any;
  }

  void deliver_in_order(uint64_t tag) {
    auto it = recv_queues_.find(tag);
    if (it == recv_queues_.end()) return;
    auto& q = it->second;
    while (!q.empty() && q.front()->complete) {
      std::unique_ptr<recv_op> op = std::move(q.front());
      q.pop_front();
      auto from = static_cast<peer_id>(op->tag >> channel_bits);
      channel_id ch = op->tag & channel_mask;
      if (op->no_memory) {
        report(make_error(errc::out_of_memory,
                          "cannot allocate " + std::to_string(op->length) +
                              " bytes for a message from peer " + std::to_string(from) +
                              " on channel " + std::to_string(ch) + "; message discarded"));
        continue;
      }
      if (op->result != UCS_OK) {
        report(make_error(errc::transport_error,
                          "message of " + std::to_string(op->length) + " bytes from peer " +
                              std::to_string(from) + " on channel " + std::to_string(ch) +
                              " was lost: " + ucs_text(op->result)));
        continue;
      }
      messages_received_.fetch_add(1, std::memory_order_relaxed);
      bytes_received_.fetch_add(op->length, std::memory_order_relaxed);
      std::shared_ptr<receive_handler> h;
      {
        std::lock_guard<std::mutex> lock(handler_mutex_);
        h = handler_;
      }
      if (!h || !*h) {
        report(make_error(errc::internal, "message from peer " + std::to_string(from) +
                                              " on channel " + std::to_string(ch) +
                                              " dropped: no receive handler installed"));
        continue;
      }
      try {
        (*h)(from, ch, std::move(op->buf));
      } catch (const std::exception& e) {
        report(make_error(errc::internal, std::string("receive handler threw: ") + e.what()));
      }
    }
    if (q.empty()) recv_queues_.erase(it);
  }

  // A control message carries this plane's token (any one when it has none).
  bool control_token_ok(const recv_op& op) const {
    if (options_.control_token == 0) return true;
    uint64_t t = 0;
    if (op.length != control_bytes) return false;
    std::memcpy(&t, op.scratch + 1, sizeof t);
    return t == options_.control_token;
  }

  void finish_side_recv(recv_op* op) {
    auto owned = std::move(side_recvs_.at(op));
    side_recvs_.erase(op);
    uint32_t sender = static_cast<uint32_t>(op->tag >> channel_bits);
    channel_id ch = op->tag & channel_mask;
    switch (op->kind) {
      case recv_kind::control:
        if (op->result == UCS_OK && op->length >= 1 &&
            op->scratch[0] == static_cast<std::byte>(control_op::goodbye)) {
          if (!control_token_ok(*op)) {
            // A stranger on our port, or a node with another secret: a
            // forged goodbye must not take a live peer out of the job.
            report(make_error(errc::peer_refused,
                              "a goodbye claiming to come from peer " + std::to_string(ch) +
                                  " without the cluster's data-plane token was ignored (a stranger on "
                                  "the data plane's port, or a node with another secret)"));
            break;
          }
          mark_peer_down(static_cast<peer_id>(ch), "it shut down", /*orderly=*/true);
        }
        break;
      case recv_kind::oversized:
        report(make_error(errc::wire_too_large,
                          "peer " + std::to_string(sender) + " sent " + std::to_string(op->length) +
                              " bytes on channel " + std::to_string(ch) +
                              ", above this node's max_message_bytes of " +
                              std::to_string(options_.max_message_bytes) +
                              "; message discarded (is the peer's configuration the same?)"));
        break;
      case recv_kind::discard:
      case recv_kind::data:
        break;
    }
  }

  void run_send_completions() {
    while (!completed_sends_.empty()) {
      auto batch = std::move(completed_sends_);
      completed_sends_.clear();
      for (send_op* raw : batch) {
        std::unique_ptr<send_op> op(raw);
        inflight_sends_.erase(raw);
        status st;
        if (op->result == UCS_OK) {
          messages_sent_.fetch_add(1, std::memory_order_relaxed);
          bytes_sent_.fetch_add(op->msg->size(), std::memory_order_relaxed);
        } else {
          if (!stopping_ && is_peer_failure(op->result))
            mark_peer_down(op->peer, "send failed with " + ucs_text(op->result));
          st = send_error(*op);
        }
        op->msg.reset();
        complete(op->done, std::move(st));
      }
    }
  }

  status send_error(const send_op& op) const {
    std::string what = "send of " + std::to_string(op.msg->size()) + " bytes to peer " +
                       std::to_string(op.peer) + " on channel " + std::to_string(op.channel);
    auto it = conns_.find(op.peer);
    if (it != conns_.end() && it->second->down)
      return make_error(errc::peer_down, what + " failed: peer " + std::to_string(op.peer) +
                                             " is down: " + it->second->down_reason);
    if (stopping_) return make_error(errc::cancelled, what + " cancelled: data plane shut down");
    return make_error(errc::transport_error, what + " failed: " + ucs_text(op.result));
  }

  void complete(send_completion& done, status st) {
    if (!done) return;
    try {
      done(std::move(st));
    } catch (const std::exception& e) {
      report(make_error(errc::internal, std::string("send completion threw: ") + e.what()));
    }
  }

  // `orderly`: the peer said goodbye; not worth an on_error report.
  void mark_peer_down(peer_id peer, const std::string& why, bool orderly = false) {
    auto it = conns_.find(peer);
    if (it == conns_.end() || it->second->down) return;
    peer_conn& conn = *it->second;
    conn.down = true;
    conn.down_reason = why;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& info = peers_[peer];
      info.down = true;
      info.down_reason = why;
    }
    if (!stopping_ && !orderly)
      report(make_error(errc::peer_down, "peer " + std::to_string(peer) + " is down: " + why));
    // Force-close: with UCP_ERR_HANDLING_MODE_PEER, UCX completes the sends
    // queued on it with UCS_ERR_CANCELED (-> peer_down in send_error()).
    close_endpoint(conn);
    abandon_operations_of(peer);
  }

  // What UCX still holds for a dead peer after the force-close (everything,
  // on a mode-NONE endpoint: UCX 1.13 then neither fails nor purges its
  // requests) is completed here: sends with peer_down, receives dropped. The
  // op objects and send buffers stay allocated until the worker is destroyed,
  // because UCX may still touch them.
  // TODO(robustness): that memory is held until shutdown(); a long-running
  // node that sees many peers die mid-transfer accumulates it.
  void abandon_operations_of(peer_id peer) {
    std::vector<send_op*> sends;
    for (send_op* op : inflight_sends_)
      if (op->peer == peer) sends.push_back(op);
    for (send_op* op : sends) {
      inflight_sends_.erase(op);
      op->abandoned = true;
      abandoned_sends_.emplace_back(op);
      complete(op->done, send_error(*op));
    }
    std::vector<uint64_t> tags;
    for (auto& [tag, q] : recv_queues_)
      if ((tag >> channel_bits) == peer) tags.push_back(tag);
    for (uint64_t tag : tags) {
      auto& q = recv_queues_[tag];
      for (auto it = q.begin(); it != q.end();) {
        if ((*it)->complete) {
          ++it;
          continue;
        }
        (*it)->abandoned = true;
        // A deferred one is still in deferred_receives_; start_deferred
        // drains it. A posted one no longer counts as in flight, nor holds
        // its large-receive slot (in mode NONE UCX may never complete it,
        // which would otherwise block large receives from every peer).
        if (!(*it)->deferred) {
          --recvs_in_flight_;
          if ((*it)->large) {
            (*it)->large = false;
            --active_large_receives_;
          }
        }
        abandoned_recvs_.push_back(std::move(*it));
        it = q.erase(it);
      }
      deliver_in_order(tag);
    }
  }

  void close_endpoint(peer_conn& conn) {
    if (conn.ep == nullptr) return;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t r = ucp_ep_close_nbx(conn.ep, &p);
    conn.ep = nullptr;
    if (r != nullptr && !UCS_PTR_IS_ERR(r)) close_requests_.push_back(r);
  }

  // Every keepalive_interval, for mode-NONE endpoints (UCX watches the
  // others): a peer on this host whose process is gone is marked down; every
  // other one gets a 1-byte heartbeat, so that a dead peer we only receive
  // from is noticed when the transport fails that send (TCP does report it,
  // even in mode NONE; see on_heartbeat_sent).
  void watch_peers(clock_type::time_point now) {
    if (now < next_watch_) return;
    next_watch_ = now + std::max(options_.keepalive_interval, std::chrono::milliseconds(10));
    std::vector<peer_id> dead;
    for (auto& [id, conn] : conns_) {
      if (conn->down || conn->ucx_detects_failure || conn->ep == nullptr) continue;
      if (conn->watch_process && !process_alive(conn->process)) {
        dead.push_back(id);
        continue;
      }
      if (conn->watch_process || conn->heartbeat_in_flight) continue;
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      p.cb.send = &ucx_data_plane::on_heartbeat_sent;
      p.user_data = conn.get();
      ucs_status_ptr_t r = ucp_tag_send_nbx(conn->ep, heartbeat_msg_.data(), heartbeat_msg_.size(),
                                            make_tag(control_sender, options_.self_peer), &p);
      if (UCS_PTR_IS_ERR(r))
        ep_errors_.emplace_back(conn.get(), UCS_PTR_STATUS(r));
      else if (r != nullptr)
        conn->heartbeat_in_flight = true;
    }
    for (peer_id id : dead) {
      conns_.at(id)->process_gone = true;
      mark_peer_down(id, "its process " + std::to_string(conns_.at(id)->process.pid) + " has exited");
    }
  }

  void poll_close_requests() {
    auto it = std::remove_if(close_requests_.begin(), close_requests_.end(), [](void* r) {
      if (ucp_request_check_status(r) == UCS_INPROGRESS) return false;
      ucp_request_free(r);
      return true;
    });
    close_requests_.erase(it, close_requests_.end());
  }

  void report(status s) {
    try {
      options_.on_error(s);
    } catch (...) {
    }
  }

  // --------------------------------------------------------------- teardown

  // During teardown: takes peers' goodbyes off the unexpected queue (UCX
  // warns about unmatched messages when the worker is destroyed).
  void discard_control_messages() {
    for (;;) {
      ucp_tag_recv_info_t info{};
      ucp_tag_message_h m = ucp_tag_probe_nb(worker_, make_tag(control_sender, 0),
                                             ~channel_mask, 1, &info);
      if (m == nullptr) return;
      start_receive(m, info);
    }
  }

  //   1. queued sends -> cancelled; queued connects -> cancelled
  //   2. goodbye to every live peer, progress until sent (<= 500 ms)
  //   3. cancel posted receives, force-close every endpoint
  //   4. progress until UCX returned every request (<= 1 s)
  //   5. complete what is left ourselves, destroy worker and context
  void teardown() {
    stopping_ = true;
    {
      std::vector<std::unique_ptr<connect_cmd>> connects;
      std::vector<std::unique_ptr<send_op>> sends;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        connects.swap(connect_queue_);
        sends.swap(send_queue_);
        has_commands_.store(false, std::memory_order_relaxed);
      }
      for (auto& c : connects)
        c->result.set_value(make_error(errc::cancelled, "ucx data plane is shut down"));
      for (auto& op : sends) {
        op->result = UCS_ERR_CANCELED;
        completed_sends_.push_back(op.release());
      }
    }
    run_send_completions();

    for (auto& [id, conn] : conns_) {
      if (conn->down || conn->ep == nullptr) continue;
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      p.cb.send = &ucx_data_plane::on_control_sent;
      p.user_data = this;
      ucs_status_ptr_t r = ucp_tag_send_nbx(conn->ep, goodbye_msg_.data(), goodbye_msg_.size(),
                                            make_tag(control_sender, options_.self_peer), &p);
      if (r != nullptr && !UCS_PTR_IS_ERR(r)) ++goodbyes_in_flight_;
    }
    auto deadline = clock_type::now() + goodbye_deadline;
    while (goodbyes_in_flight_ > 0 && clock_type::now() < deadline) {
      ucp_worker_progress(worker_);
      discard_control_messages();
    }
    // Drain probed-but-unstarted messages, then cancel posted receives.
    // (A drained rendezvous is pulled into scratch: UCX work of its own.)
    bool ucx_may_hold_work = !deferred_receives_.empty();
    while (!deferred_receives_.empty()) {
      recv_op* op = deferred_receives_.front();
      deferred_receives_.pop_front();
      discard_message(std::exchange(op->pending_message, nullptr), op->tag);
    }
    for (auto& [tag, q] : recv_queues_)
      for (auto& op : q)
        if (op->request != nullptr) ucp_request_cancel(worker_, op->request);
    for (auto& [raw, op] : side_recvs_)
      if (op->request != nullptr) ucp_request_cancel(worker_, op->request);
    for (auto& [id, conn] : conns_) close_endpoint(*conn);
    // In mode NONE the force-close purges nothing; waiting still lets a live
    // receiver finish pulling what it has started (see leftovers below).

    deadline = clock_type::now() + teardown_deadline;
    while (clock_type::now() < deadline) {
      ucp_worker_progress(worker_);
      discard_control_messages();
      ep_errors_.clear();  // every endpoint is closing anyway
      run_send_completions();
      poll_close_requests();
      if (inflight_sends_.empty() && recvs_in_flight_ == 0 && close_requests_.empty() &&
          goodbyes_in_flight_ == 0)
        break;
    }
    // UCX did not return these in time. Complete them ourselves.
    std::vector<send_op*> leftovers(inflight_sends_.begin(), inflight_sends_.end());
    inflight_sends_.clear();
    for (send_op* op : leftovers) {
      op->abandoned = true;
      abandoned_sends_.emplace_back(op);
      complete(op->done, send_error(*op));
    }
    // A peer reached in mode NONE that is not known dead may still pull an
    // abandoned send's buffer over CMA, and a failed pull aborts that peer
    // (see the header), so those buffers are deliberately never freed.
    // TODO(robustness): a leak by design, bounded by what was in flight when
    // peers went down or at shutdown; freeing safely needs an acknowledged
    // cancel, i.e. a protocol of our own on top of UCX's rendezvous.
    for (auto& op : abandoned_sends_) {
      auto it = conns_.find(op->peer);
      if (op->msg && it != conns_.end() && !it->second->ucx_detects_failure && !it->second->process_gone)
        keep_forever(std::move(op->msg));
    }
    for (auto& [tag, q] : recv_queues_)
      for (auto& op : q) op->abandoned = true;
    for (auto& [raw, op] : side_recvs_) op->abandoned = true;
    completed_recvs_.clear();
    // Receives UCX has not returned, or gave up on because their peer went
    // away mid-transfer (abandoned), and sends it did not return: UCX 1.13
    // does not purge a rendezvous's queued work (a CMA get, its ack) when
    // the endpoint is force-closed, and ucp_worker_destroy then aborts the
    // process (an arbiter.c assertion; seen 2 in ~140 loaded runs of
    // data_plane_contract_test, and in CI). Such a worker is left in place
    // with its context and the buffers UCX may still touch: a node shuts
    // its data plane down once, at the end of its life.
    for (auto& [tag, q] : recv_queues_)
      for (auto& op : q)
        if (op->request != nullptr) ucx_may_hold_work = true;
    for (auto& [raw, op] : side_recvs_)
      if (op->request != nullptr) ucx_may_hold_work = true;
    ucx_may_hold_work = ucx_may_hold_work || recvs_in_flight_ > 0 || !abandoned_recvs_.empty() ||
                        !abandoned_sends_.empty();
    if (ucx_may_hold_work) {
      std::fprintf(stderr,
                   "hetflow ucx data plane: transfers were cut off at shutdown (%zu receive(s), %zu abandoned "
                   "receive(s), %zu abandoned send(s)); leaving the UCX worker in place\n",
                   recvs_in_flight_, abandoned_recvs_.size(), abandoned_sends_.size());
      for (auto& op : abandoned_sends_) op.release();
      for (auto& [tag, q] : recv_queues_)
        for (auto& op : q) op.release();
      for (auto& [raw, op] : side_recvs_) op.release();
      for (auto& op : abandoned_recvs_) op.release();
      worker_ = nullptr;
      context_ = nullptr;
    }
    // TODO(robustness): leaked close requests are reclaimed by worker destroy.
    teardown_ucx();
    recv_queues_.clear();
    side_recvs_.clear();
    abandoned_sends_.clear();
    abandoned_recvs_.clear();
    conns_.clear();
    retired_conns_.clear();
  }

  ucx_options options_;
  std::vector<char> local_address_;  // written before start() returns, then const

  // Shared between callers and the progress thread.
  mutable std::mutex mutex_;
  bool stopped_ = false;
  std::unordered_map<peer_id, peer_info> peers_;
  std::vector<std::unique_ptr<send_op>> send_queue_;
  std::vector<std::unique_ptr<connect_cmd>> connect_queue_;
  std::atomic<bool> has_commands_{false};

  std::mutex handler_mutex_;
  std::shared_ptr<receive_handler> handler_;

  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> sleeping_{false};
  std::atomic<uint64_t> messages_sent_{0}, bytes_sent_{0}, messages_received_{0}, bytes_received_{0};
  int event_fd_ = -1;
  std::promise<status> init_result_;
  std::thread thread_;
  std::thread::id thread_id_;
  std::mutex join_mutex_;

  // Progress thread only.
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int epoll_fd_ = -1;
  int worker_efd_ = -1;
  bool stopping_ = false;
  process_identity self_process_;
  bool shared_memory_only_ = false;
  clock_type::time_point next_watch_{};
  std::vector<std::unique_ptr<send_op>> send_batch_;
  std::vector<std::unique_ptr<connect_cmd>> connect_batch_;
  std::unordered_map<peer_id, std::unique_ptr<peer_conn>> conns_;
  std::vector<std::unique_ptr<peer_conn>> retired_conns_;
  std::unordered_set<send_op*> inflight_sends_;
  std::vector<send_op*> completed_sends_;
  std::unordered_map<uint64_t, std::deque<std::unique_ptr<recv_op>>> recv_queues_;
  std::unordered_map<recv_op*, std::unique_ptr<recv_op>> side_recvs_;
  std::vector<recv_op*> completed_recvs_;
  std::size_t recvs_in_flight_ = 0;
  std::deque<recv_op*> deferred_receives_;
  uint32_t active_large_receives_ = 0;
  int goodbyes_in_flight_ = 0;
  std::array<std::byte, control_bytes> goodbye_msg_{}, heartbeat_msg_{};
  std::vector<std::pair<peer_conn*, ucs_status_t>> ep_errors_;
  std::vector<void*> close_requests_;
  std::vector<std::unique_ptr<send_op>> abandoned_sends_;
  std::vector<std::unique_ptr<recv_op>> abandoned_recvs_;
};

}  // namespace

expected<std::unique_ptr<data_plane>> make_ucx_data_plane(const ucx_options& options) {
  if (options.self_peer > max_peer_id)
    return make_error(errc::invalid_argument, "self_peer " + std::to_string(options.self_peer) +
                                                  " is too large (max " +
                                                  std::to_string(max_peer_id) + ")");
  auto plane = std::make_unique<ucx_data_plane>(options);
  HF_RETURN_IF_ERROR(plane->start());
  return std::unique_ptr<data_plane>(std::move(plane));
}

}  // namespace hetflow::dataplane
