// What only ucx_data_plane does: its own defence against oversized messages,
// UCX set-up errors, reconnecting, and the death of a peer in another
// process (SIGKILL: no goodbye, UCX itself must notice).
#define BOOST_TEST_MODULE ucx_data_plane
#include <boost/test/data/monomorphic.hpp>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "actors/dataplane/net_devices.hpp"
#include "test/dataplane/data_plane_test_util.hpp"

#include <dirent.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <fstream>
#include <set>
#include <sstream>

namespace bdata = boost::unit_test::data;
using namespace hetflow;
using namespace hetflow::dataplane;
using namespace hetflow::dataplane::testing;

namespace {

const std::vector<std::string> ucx_impls = {"ucx:sm,self", "ucx:tcp,self"};

class error_log {
public:
  std::function<void(const status&)> handler() {
    return [this](const status& s) {
      std::lock_guard<std::mutex> lock(mutex_);
      errors_.push_back(s);
    };
  }
  std::vector<status> errors() {
    std::lock_guard<std::mutex> lock(mutex_);
    return errors_;
  }
  std::size_t count(errc code) {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::count_if(errors_.begin(), errors_.end(), [&](const status& s) { return s.code() == code; });
  }

private:
  std::mutex mutex_;
  std::vector<status> errors_;
};

// A dp_peer_helper child process with pipes to its stdin and stdout.
class helper_process {
public:
  helper_process(const std::string& impl, peer_id self, peer_id peer, bool flood = false) {
    std::string tls = impl.substr(impl.find(':') + 1);
    const char* mode = impl.rfind("ucx-none:", 0) == 0 ? "none" : "peer";
    int to_child[2], from_child[2];
    BOOST_REQUIRE(pipe(to_child) == 0 && pipe(from_child) == 0);
    pid_ = fork();
    BOOST_REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      close(to_child[1]);
      close(from_child[0]);
      std::string s = std::to_string(self), p = std::to_string(peer);
      execl(HETFLOW_DP_PEER_HELPER, HETFLOW_DP_PEER_HELPER, tls.c_str(), s.c_str(), p.c_str(), mode,
            flood ? "flood" : static_cast<char*>(nullptr), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    in_ = to_child[1];
    out_ = from_child[0];
  }
  ~helper_process() {
    kill_now();
    close(in_);
    close(out_);
  }
  // One line from the child's stdout, or "" after `timeout`.
  std::string read_line(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return {};
      pollfd pfd{out_, POLLIN, 0};
      if (poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[4096];
      ssize_t n = read(out_, chunk, sizeof chunk);
      if (n <= 0) return {};
      buffer_.append(chunk, static_cast<std::size_t>(n));
    }
  }
  void write_line(const std::string& line) {
    std::string l = line + "\n";
    BOOST_REQUIRE_EQUAL(write(in_, l.data(), l.size()), static_cast<ssize_t>(l.size()));
  }
  void kill_now() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

private:
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;
  std::string buffer_;
};

std::string to_hex(const std::vector<char>& bytes) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (char c : bytes) {
    s += hex[(static_cast<unsigned char>(c) >> 4) & 15];
    s += hex[static_cast<unsigned char>(c) & 15];
  }
  return s;
}

std::vector<char> from_hex(const std::string& s) {
  std::vector<char> out(s.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<char>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ucx_data_plane)

BOOST_AUTO_TEST_CASE(bad_options_are_reported) {
  ucx_options o;
  o.self_peer = 0xffff;
  auto p = make_ucx_data_plane(o);
  BOOST_REQUIRE(!p.has_value());
  BOOST_CHECK_EQUAL(p.error().code(), errc::invalid_argument);

  ucx_options bad;
  bad.tls = "no_such_transport";
  auto q = make_ucx_data_plane(bad);
  BOOST_REQUIRE(!q.has_value());
  BOOST_TEST_MESSAGE("unknown transport: " << q.error().to_string());
  BOOST_CHECK(q.error().code() == errc::transport_error || q.error().code() == errc::invalid_argument);
  BOOST_CHECK(q.error().message().find("no_such_transport") != std::string::npos);
}

namespace {

// The local addresses ("0100007F" style hex from /proc/net/tcp, as text) of
// the TCP sockets this process listens on.
std::vector<std::string> my_listening_ipv4() {
  std::set<std::string> inodes;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (dirent* e = ::readdir(d)) {
      char buf[64];
      std::string path = std::string("/proc/self/fd/") + e->d_name;
      ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
      if (n <= 0) continue;
      std::string link(buf, std::size_t(n));
      if (link.rfind("socket:[", 0) == 0) inodes.insert(link.substr(8, link.size() - 9));
    }
    ::closedir(d);
  }
  std::vector<std::string> out;
  std::ifstream f("/proc/net/tcp");
  std::string line;
  std::getline(f, line);  // header
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string sl, local, remote, st, queues, timer, retr, uid, timeout, inode;
    in >> sl >> local >> remote >> st >> queues >> timer >> retr >> uid >> timeout >> inode;
    if (st == "0A" && inodes.count(inode)) out.push_back(local.substr(0, 8));
  }
  return out;
}

bool has_non_loopback_ipv4() {
  ifaddrs* ifs = nullptr;
  bool found = false;
  if (::getifaddrs(&ifs) != 0) return false;
  for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next)
    if (i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET && !(i->ifa_flags & IFF_LOOPBACK) &&
        (i->ifa_flags & IFF_UP))
      found = true;
  ::freeifaddrs(ifs);
  return found;
}

}  // namespace

// [cluster] ucx_net_devices: "auto" keeps a loopback node's data plane off
// every other interface; "all" and explicit lists pass through.
BOOST_AUTO_TEST_CASE(net_devices_follow_the_node_address) {
  std::string why;
  const std::string lo = net_devices_for("auto", "127.0.0.1", &why);
  BOOST_TEST_MESSAGE("auto for 127.0.0.1: '" << lo << "' (" << why << ")");
  BOOST_TEST(!lo.empty());
  BOOST_TEST(lo.find(',') == std::string::npos);  // the loopback interface alone, no RDMA ports
  BOOST_TEST(net_devices_for("auto", "127.0.0.2") == lo);  // all of 127/8 is loopback
  BOOST_TEST(net_devices_for("auto", "localhost").find(lo) != std::string::npos);
  BOOST_TEST(net_devices_for("auto", "0.0.0.0").empty());
  BOOST_TEST(net_devices_for("all", "127.0.0.1").empty());
  BOOST_TEST(net_devices_for("eth7,mlx5_0:1", "127.0.0.1") == "eth7,mlx5_0:1");
  BOOST_TEST(net_devices_for("auto", "192.0.2.254.invalid.").empty());  // does not resolve

  // The UCX TCP transport then listens on loopback only.
  ucx_options o;
  o.tls = "tcp,self";
  o.net_devices = lo;
  if (std::getenv("UCX_NET_DEVICES") != nullptr) return;  // the environment would win
  auto p = make_ucx_data_plane(o);
  BOOST_REQUIRE_MESSAGE(p.has_value(), p.error().to_string());
  auto listening = my_listening_ipv4();
  BOOST_TEST(!listening.empty());
  for (const auto& a : listening) BOOST_TEST(a.substr(6, 2) == "7F", "listening on " << a << " (not 127.x)");
  (*p).reset();
  if (!has_non_loopback_ipv4()) return;
  // Without the restriction UCX also listens on this machine's other interfaces.
  o.net_devices.clear();
  auto q = make_ucx_data_plane(o);
  BOOST_REQUIRE_MESSAGE(q.has_value(), q.error().to_string());
  bool elsewhere = false;
  for (const auto& a : my_listening_ipv4()) elsewhere = elsewhere || a.substr(6, 2) != "7F";
  BOOST_TEST(elsewhere, "without net_devices UCX listened on loopback only: the check above proves nothing");
}

BOOST_AUTO_TEST_CASE(name_and_address) {
  auto p = make_connected_pair("ucx:sm,self");
  BOOST_CHECK_EQUAL(p.a->name(), "ucx(sm,self)");
  BOOST_CHECK_GT(p.a->local_address().size(), 24u);
  // Connecting twice to a live peer is refused.
  BOOST_CHECK_EQUAL(p.a->connect(1, p.b->local_address()).code(), errc::already_exists);
}

// A sender that ignores the bound in our address (check_peer_limit_on_send
// = false): the receiver discards the message without allocating it, tells
// on_error, and keeps working.
BOOST_DATA_TEST_CASE(receiver_discards_oversized_messages, bdata::make(ucx_impls), impl) {
  constexpr uint64_t bound = 64 << 10;
  error_log errors;
  ucx_options base;
  base.on_error = errors.handler();
  base.check_peer_limit_on_send = false;
  auto p = make_connected_pair(impl, 1ull << 30, bound, base);
  inbox in;
  in.install(*p.b);
  completions done;
  // Just above the bound, a medium one and a large (rendezvous) one.
  const std::vector<std::size_t> sizes = {bound + 1, 1 << 20, 32 << 20};
  for (std::size_t size : sizes) BOOST_REQUIRE(p.a->send(1, 5, make_payload(size, 1), done.make()).ok());
  BOOST_REQUIRE_MESSAGE(done.wait_for(sizes.size(), 5s), impl << ": sender hangs on refused messages");
  for (const status& s : done.results()) BOOST_TEST_MESSAGE(impl << ": sender completion " << s.to_string());
  // The pair still works, in both directions.
  BOOST_REQUIRE(p.a->send(1, 6, make_payload(100, 2), done.make()).ok());
  BOOST_REQUIRE(in.wait_for(1, 5s));
  BOOST_CHECK(done.wait_for(sizes.size() + 1, 5s));
  auto got = in.take();
  BOOST_REQUIRE_EQUAL(got.size(), 1u);
  BOOST_CHECK_EQUAL(got[0].channel, 6u);
  BOOST_CHECK_EQUAL(errors.count(errc::wire_too_large), sizes.size());
  for (const status& s : errors.errors()) {
    BOOST_TEST_MESSAGE(impl << ": receiver reported " << s.to_string());
    BOOST_CHECK_MESSAGE(s.message().find("peer 0") != std::string::npos, s.message());
  }
  BOOST_CHECK_EQUAL(p.b->stats().messages_received, 1u);
}

// Sends small messages to `peer` every 10 ms until send() refuses one (at
// most 5 s): the status of the refusal, or ok.
status send_until_refused(data_plane& from, peer_id peer) {
  status s;
  for (int i = 0; i < 500; ++i) {
    s = from.send(peer, 1, make_payload(8, 1));
    if (!s.ok()) break;
    std::this_thread::sleep_for(10ms);
  }
  return s;
}

// With a control token (a cluster secret), a goodbye that does not carry it
// (a stranger on the port, claiming to be peer 1) is ignored and reported:
// peer 1 stays up. Peer 1's own goodbye still takes it down.
BOOST_DATA_TEST_CASE(goodbye_without_the_token_is_ignored, bdata::make(ucx_impls), impl) {
  error_log errors;
  ucx_options base;
  base.on_error = errors.handler();
  base.control_token = 0x1234abcd5678ef01ull;
  auto p = make_connected_pair(impl, 1ull << 30, 1ull << 30, base);
  inbox in;
  in.install(*p.b);
  ucx_options other;
  other.control_token = 0x1111;  // another secret's token
  auto stranger = make_plane(impl, 1, 1ull << 30, p.fabric, other);
  BOOST_REQUIRE(stranger->connect(0, p.a->local_address()).ok());
  BOOST_REQUIRE(stranger->send(0, 3, make_payload(64, 1)).ok());
  stranger->shutdown();  // its goodbye claims peer 1
  bool reported = false;
  for (int i = 0; i < 300 && !reported; ++i) {
    reported = errors.count(errc::peer_refused) > 0;
    if (!reported) std::this_thread::sleep_for(10ms);
  }
  BOOST_REQUIRE_MESSAGE(reported, impl << ": the forged goodbye was not reported");
  for (const status& s : errors.errors()) BOOST_TEST_MESSAGE(impl << ": " << s.to_string());
  // Peer 1 is still up for peer 0.
  BOOST_REQUIRE(p.a->send(1, 4, make_payload(1 << 20, 2)).ok());
  BOOST_REQUIRE(in.wait_for(1, 5s));
  BOOST_CHECK_EQUAL(in.take().at(0).channel, 4u);
  // The real peer 1's goodbye carries the token: peer 0 learns it is gone.
  p.b->shutdown();
  BOOST_CHECK_EQUAL(send_until_refused(*p.a, 1).code(), errc::peer_down);
  BOOST_CHECK_EQUAL(errors.count(errc::peer_refused), 1u);
}

BOOST_DATA_TEST_CASE(reconnect_after_peer_restart, bdata::make(ucx_impls), impl) {
  auto p = make_connected_pair(impl);
  p.b->shutdown();
  // Wait until peer 0 has learnt (from the goodbye) that peer 1 is gone.
  BOOST_REQUIRE_EQUAL(send_until_refused(*p.a, 1).code(), errc::peer_down);
  auto b2 = make_plane(impl, 1, 1ull << 30, p.fabric);
  inbox in;
  in.install(*b2);
  BOOST_REQUIRE(p.a->connect(1, b2->local_address()).ok());
  BOOST_REQUIRE(b2->connect(0, p.a->local_address()).ok());
  BOOST_REQUIRE(p.a->send(1, 2, make_payload(1 << 20, 3)).ok());
  BOOST_REQUIRE(in.wait_for(1, 5s));
  BOOST_CHECK_EQUAL(checksum(in.take().at(0).msg), checksum(*make_payload(1 << 20, 3)));
}

// The peer is SIGKILLed: no goodbye. TCP sees the connection reset; shared
// memory relies on UCX's keepalive (ucx_options::keepalive_interval, 1 s).
BOOST_DATA_TEST_CASE(killed_peer_process_gives_sender_an_error,
                     bdata::make(std::vector<std::string>{"ucx:sm,self", "ucx:tcp,self", "ucx:sm,tcp,self",
                                                          "ucx-none:tcp,self"}),
                     impl) {
  helper_process child(impl, 1, 0);
  std::string child_addr = child.read_line(10s);
  BOOST_REQUIRE_MESSAGE(!child_addr.empty(), "dp_peer_helper did not start (" << HETFLOW_DP_PEER_HELPER << ")");
  error_log errors;
  ucx_options base;
  base.on_error = errors.handler();
  auto fabric = fake_fabric::create();
  auto a = make_plane(impl, 0, 1ull << 30, fabric, base);
  child.write_line(to_hex(a->local_address()));
  BOOST_REQUIRE_EQUAL(child.read_line(10s), "ready");
  BOOST_REQUIRE(a->connect(1, from_hex(child_addr)).ok());
  completions first;
  BOOST_REQUIRE(a->send(1, 1, make_payload(1 << 20, 1), first.make()).ok());
  BOOST_REQUIRE(first.wait_for(1, 5s));
  BOOST_REQUIRE(first.results()[0].ok());

  child.kill_now();
  auto t0 = std::chrono::steady_clock::now();
  status first_error;
  completions done;
  int sent = 0;
  while (first_error.ok() && std::chrono::steady_clock::now() < t0 + 5s) {
    status s = a->send(1, 1, make_payload(sent % 2 ? 1 << 20 : 1024, 2), done.make());
    if (!s.ok()) {
      first_error = s;
      break;
    }
    ++sent;
    std::this_thread::sleep_for(10ms);
    for (const status& r : done.results())
      if (!r.ok()) first_error = r;
  }
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  BOOST_REQUIRE_MESSAGE(!first_error.ok(), impl << ": no error " << ms << " ms after the peer was killed");
  BOOST_TEST_MESSAGE(impl << ": killed peer noticed after " << ms << " ms: " << first_error.to_string());
  BOOST_CHECK_EQUAL(first_error.code(), errc::peer_down);
  BOOST_CHECK(done.wait_for(sent, 5s));
  BOOST_CHECK_GE(errors.count(errc::peer_down), 1u);
  a->shutdown();
  BOOST_CHECK_EQUAL(done.size(), static_cast<std::size_t>(sent));
}

namespace {

// The peer (a dp_peer_helper process) floods us with 16 MiB messages and is
// SIGKILLed: no crash, no hang, peer_down reported within 5 s.
void flood_then_kill(const std::string& impl, ucx_options base) {
  helper_process child(impl, 1, 0, /*flood=*/true);
  std::string child_addr = child.read_line(10s);
  BOOST_REQUIRE(!child_addr.empty());
  error_log errors;
  base.on_error = errors.handler();
  auto fabric = fake_fabric::create();
  auto a = make_plane(impl, 0, 1ull << 30, fabric, base);
  inbox in;
  in.install(*a);
  child.write_line(to_hex(a->local_address()));
  BOOST_REQUIRE(a->connect(1, from_hex(child_addr)).ok());
  BOOST_REQUIRE_EQUAL(child.read_line(10s), "ready");
  BOOST_REQUIRE_MESSAGE(in.wait_for(3, 10s), "the helper's messages do not arrive");
  child.kill_now();
  auto t0 = std::chrono::steady_clock::now();
  while (errors.count(errc::peer_down) == 0 && std::chrono::steady_clock::now() < t0 + 5s)
    std::this_thread::sleep_for(10ms);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  BOOST_REQUIRE_MESSAGE(errors.count(errc::peer_down) > 0, impl << ": sender's death unnoticed after " << ms << " ms");
  for (const status& e : errors.errors())
    if (e.code() == errc::peer_down) BOOST_TEST_MESSAGE(impl << ": after " << ms << " ms: " << e.to_string());
  for (const arrival& m : in.take()) {
    BOOST_CHECK_EQUAL(m.msg.size(), std::size_t{16} << 20);
    BOOST_CHECK(m.msg.size() > 0 && m.msg.data()[0] == std::byte{7} && m.msg.data()[m.msg.size() - 1] == std::byte{7});
  }
  BOOST_CHECK_EQUAL(a->send(1, 1, make_payload(8, 1)).code(), errc::peer_down);
  a->shutdown();
}

}  // namespace

// Not run for "sm,self" nor for ucx-none over shared memory: those endpoints
// are in UCP_ERR_HANDLING_MODE_NONE with CMA rendezvous, and UCX 1.13 aborts
// the receiver when process_vm_readv hits the dead sender (see
// ucx_data_plane.hpp). "ucx:sm,tcp,self" is in mode PEER, where UCX moves
// same-host data over TCP loopback, not CMA.
BOOST_DATA_TEST_CASE(peer_killed_while_sending_to_us,
                     bdata::make(std::vector<std::string>{"ucx:tcp,self", "ucx:sm,tcp,self", "ucx-none:tcp,self"}),
                     impl) {
  flood_then_kill(impl, {});
}

// Mode NONE towards a peer on another host: no /proc to look at, only the
// heartbeat (here forced by watch_processes = false) finds it dead.
BOOST_AUTO_TEST_CASE(heartbeat_notices_a_dead_peer_we_only_receive_from) {
  ucx_options base;
  base.watch_processes = false;
  flood_then_kill("ucx-none:tcp,self", base);
}

BOOST_AUTO_TEST_SUITE_END()

// ucx_error_mode::automatic resolves to none for a list that cannot touch a
// same-host peer's memory and to peer otherwise; connect() compares the
// modes carried in the addresses, so a mismatch shows which one was chosen.
BOOST_AUTO_TEST_CASE(automatic_error_mode_follows_the_transport_list) {
  auto plane = [](const std::string& tls, ucx_error_mode mode, peer_id self) {
    ucx_options o;
    o.tls = tls;
    o.error_mode = mode;
    o.self_peer = self;
    auto p = make_ucx_data_plane(o);
    BOOST_REQUIRE_MESSAGE(p.has_value(), tls << ": " << (p ? "" : p.error().to_string()));
    return std::move(p).value();
  };
  auto tcp_none = plane("tcp,self", ucx_error_mode::none, 1);
  auto tcp_peer = plane("tcp,self", ucx_error_mode::peer, 2);
  auto tcp_auto = plane("tcp,self", ucx_error_mode::automatic, 0);
  BOOST_CHECK(tcp_auto->connect(1, tcp_none->local_address()).ok());
  status s = tcp_auto->connect(2, tcp_peer->local_address());
  BOOST_CHECK_MESSAGE(!s.ok() && s.to_string().find("error_mode") != std::string::npos, s.to_string());

  auto mixed_auto = plane("sm,tcp,self", ucx_error_mode::automatic, 3);
  s = mixed_auto->connect(1, tcp_none->local_address());
  BOOST_CHECK_MESSAGE(!s.ok() && s.to_string().find("error_mode") != std::string::npos, s.to_string());
}
