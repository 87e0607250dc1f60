#include "actors/shell_client.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <caf/io/all.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "actors/caf_types.hpp"
#include "actors/cluster_auth.hpp"
#include "actors/shell_service.hpp"

namespace hetflow::actors {
namespace {

// "" when host:port accepts a TCP connection within `timeout`, else why not.
// Asked before CAF's remote_actor, which blocks without a deadline.
std::string tcp_probe(const std::string& host, int port, std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int e = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); e != 0)
    return std::string("cannot resolve the host: ") + gai_strerror(e);
  std::string why = "no usable address";
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int err = 0;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        if (::poll(&p, 1, static_cast<int>(timeout.count())) == 1) {
          socklen_t len = sizeof err;
          if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        } else {
          err = ETIMEDOUT;
        }
      }
    }
    ::close(fd);
    if (err == 0) {
      why.clear();
      break;
    }
    why = err == ETIMEDOUT ? "no answer within " + std::to_string(timeout.count()) + " ms" : std::strerror(err);
  }
  freeaddrinfo(res);
  return why;
}

std::string_view bytes(const std::vector<char>& v) { return {v.data(), v.size()}; }

}  // namespace

struct shell_client::impl {
  shell_client_options o;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  struct connection {
    caf::actor service;
    std::string node;
  };
  std::map<std::string, connection> conns;  // by "host:port"
  bool leaked_connect = false;  // a remote_actor that never returned still uses `sys`

  explicit impl(shell_client_options opts) : o(std::move(opts)) {
    cfg.load<caf::io::middleman>();
    cfg.set("scheduler.max-threads", std::size_t{2});
    cfg.set("middleman.workers", std::size_t{0});
    cfg.set("logger.console", caf::atom("none"));
    cfg.set("middleman.heartbeat-interval",
            caf::timespan{std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(o.heartbeat_s))});
    sys = std::make_unique<caf::actor_system>(cfg);
  }
  ~impl() {
    conns.clear();
    // A connect thread still inside remote_actor would use a destroyed
    // system: leave it to the process's exit.
    if (leaked_connect) (void)sys.release();
  }

  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(static_cast<int64_t>(std::max(0.1, o.timeout_s) * 1000));
  }
  static std::string where(const std::string& host, int port) { return host + ":" + std::to_string(port); }

  // remote_actor with a deadline: it runs on its own thread, which is left
  // behind if it does not come back (a program that accepts TCP but never
  // speaks CAF's handshake).
  expected<caf::actor> remote_actor(const std::string& host, int port) {
    struct pending {
      std::mutex mu;
      std::condition_variable cv;
      bool done = false;
      caf::actor gate;
      std::string error;
    };
    auto p = std::make_shared<pending>();
    std::thread([p, s = sys.get(), host, port] {
      auto r = s->middleman().remote_actor(host, static_cast<uint16_t>(port));
      std::lock_guard<std::mutex> g(p->mu);
      if (r)
        p->gate = *r;
      else
        p->error = s->render(r.error());
      p->done = true;
      p->cv.notify_all();
    }).detach();
    std::unique_lock<std::mutex> lk(p->mu);
    if (!p->cv.wait_for(lk, timeout(), [&] { return p->done; })) {
      leaked_connect = true;
      return make_error(errc::timeout, "the program at " + where(host, port) + " accepts connections but did not "
                                       "complete CAF's handshake within " + std::to_string(o.timeout_s).substr(0, 4) +
                                       " s (not a hetflow node?)");
    }
    if (!p->gate)
      return make_error(errc::peer_down, "cannot connect to a hetflow node at " + where(host, port) + ": " +
                                             (p->error.empty() ? "no actor published there" : p->error));
    return p->gate;
  }

  expected<connection> connect(const std::string& host, int port) {
    const std::string at = where(host, port);
    if (auto it = conns.find(at); it != conns.end()) return it->second;
    if (std::string why = tcp_probe(host, port, std::min(timeout(), std::chrono::milliseconds(2000)));
        !why.empty())
      return make_error(errc::peer_down, "no hetflow node at " + at + ": " + why);
    HF_ASSIGN_OR_RETURN(caf::actor gate, remote_actor(host, port));
    caf::scoped_actor s{*sys};
    std::vector<char> node_nonce;
    std::string err;
    bool challenged = false;
    s->request(gate, timeout(), challenge_atom::value)
        .receive(
            [&](challenge_atom, std::vector<char>& n) {
              challenged = true;
              node_nonce = std::move(n);
            },
            [&](caf::error& e) { err = sys->render(e); });
    if (!challenged)
      return make_error(errc::timeout, "the program at " + at + " did not answer a hetflow challenge (" + err + ")");
    const auto our_nonce = random_nonce();
    std::vector<char> mac;
    if (!o.secret.empty()) mac = auth_mac(o.secret, "hetflow-shell", {o.name, bytes(node_nonce), bytes(our_nonce)});
    bool answered = false, accepted = false;
    std::string text;
    std::vector<char> node_mac;
    caf::actor service;
    s->request(gate, timeout(), shell_atom::value, o.name, our_nonce, mac)
        .receive(
            [&](shell_atom, bool ok, std::string& t, std::vector<char>& m, caf::actor& svc) {
              answered = true;
              accepted = ok;
              text = std::move(t);
              node_mac = std::move(m);
              service = std::move(svc);
            },
            [&](caf::error& e) { err = sys->render(e); });
    if (!answered) {
      if (err.find("unexpected_message") != std::string::npos)
        return make_error(errc::unsupported, "the hetflow node at " + at + " offers no shell (an older hetflow?)");
      return make_error(errc::timeout, "the hetflow node at " + at + " did not answer the shell's hello (" + err + ")");
    }
    if (!accepted) return make_error(errc::peer_refused, "the hetflow node at " + at + " refused the shell: " + text);
    if (!o.secret.empty()) {
      if (node_mac.empty()) {
        std::fprintf(stderr, "hetflow shell: warning: node '%s' at %s has no cluster secret: it did not prove one\n",
                     text.c_str(), at.c_str());
      } else if (!mac_equal(node_mac, auth_mac(o.secret, "hetflow-shell-welcome",
                                               {text, bytes(our_nonce), bytes(node_nonce)}))) {
        return make_error(errc::peer_refused, "the program at " + at +
                                                  " accepted the shell but did not prove the cluster secret "
                                                  "(a different secret, or not a node of this cluster?)");
      }
    }
    if (!service) return make_error(errc::internal, "node '" + text + "' at " + at + " accepted but sent no service");
    connection c{service, text};
    conns[at] = c;
    return c;
  }

  template <class... Ts>
  expected<shell_reply> ask(const std::string& host, int port, Ts... xs) {
    const std::string at = where(host, port);
    std::string err;
    for (int attempt = 0; attempt < 2; ++attempt) {
      HF_ASSIGN_OR_RETURN(connection c, connect(host, port));
      caf::scoped_actor s{*sys};
      bool answered = false, timed_out = false;
      shell_reply r;
      r.node = c.node;
      s->request(c.service, timeout(), xs...)
          .receive(
              [&](shreq_atom, bool ok, std::string& body) {
                answered = true;
                r.ok = ok;
                r.body = std::move(body);
              },
              [&](caf::error& e) {
                timed_out = e == caf::sec::request_timeout;
                err = sys->render(e);
              });
      if (answered) return r;
      conns.erase(at);
      if (timed_out)
        return make_error(errc::timeout, "node '" + c.node + "' at " + at + " did not answer within " +
                                             std::to_string(o.timeout_s).substr(0, 4) + " s");
      // A broken connection (the node restarted, or dropped us as silent):
      // once more on a fresh one.
    }
    return make_error(errc::peer_down, "lost the connection to the node at " + at + ": " + err);
  }
};

shell_client::shell_client(shell_client_options o) : impl_(std::make_unique<impl>(std::move(o))) {}
shell_client::~shell_client() = default;

expected<shell_reply> shell_client::state(const std::string& host, int port) {
  return impl_->ask(host, port, shreq_atom::value, std::string("state"), std::string());
}

expected<shell_reply> shell_client::kill(const std::string& host, int port, const std::string& actor) {
  return impl_->ask(host, port, shkill_atom::value, actor);
}

expected<shell_reply> shell_client::set_staleness(const std::string& host, int port, int64_t d) {
  return impl_->ask(host, port, shstale_atom::value, d);
}

expected<shell_reply> shell_client::checkpoint(const std::string& host, int port, int64_t label) {
  return impl_->ask(host, port, shckpt_atom::value, label);
}

std::vector<expected<shell_reply>> shell_client::checkpoint_all(const std::vector<std::pair<std::string, int>>& nodes,
                                                                int64_t label) {
  auto& im = *impl_;
  std::vector<expected<shell_reply>> out;
  std::vector<std::optional<impl::connection>> conns;
  for (const auto& [host, port] : nodes) {  // connections first (cached after the first command)
    auto c = im.connect(host, port);
    if (c) {
      conns.emplace_back(*c);
      out.emplace_back(shell_reply{});
    } else {
      conns.emplace_back(std::nullopt);
      out.emplace_back(c.error());
    }
  }
  caf::scoped_actor s{*im.sys};
  using handle = decltype(s->request(caf::actor{}, im.timeout(), shckpt_atom::value, label));
  std::vector<std::optional<handle>> sent;
  for (std::size_t i = 0; i < nodes.size(); ++i)
    sent.emplace_back(conns[i] ? std::optional<handle>(s->request(conns[i]->service, im.timeout(), shckpt_atom::value, label))
                               : std::nullopt);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (!sent[i]) continue;
    const std::string at = impl::where(nodes[i].first, nodes[i].second);
    bool answered = false;
    std::string err;
    shell_reply r;
    r.node = conns[i]->node;
    sent[i]->receive(
        [&](shreq_atom, bool ok, std::string& body) {
          answered = true;
          r.ok = ok;
          r.body = std::move(body);
        },
        [&](caf::error& e) { err = im.sys->render(e); });
    if (answered) {
      out[i] = std::move(r);
    } else {
      im.conns.erase(at);
      out[i] = make_error(errc::timeout, "node '" + r.node + "' at " + at + " did not answer the checkpoint (" + err + ")");
    }
  }
  return out;
}

expected<shell_reply> shell_client::pause(const std::string& host, int port, const std::string& actor, bool pause) {
  return impl_->ask(host, port, shpause_atom::value, actor, pause);
}

}  // namespace hetflow::actors
