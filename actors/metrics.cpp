#include "actors/metrics.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

namespace hetflow::actors::metrics {
namespace {

struct family {
  std::string help;
  kind k = kind::gauge;
  std::map<labels, double> samples;
};

std::mutex mu;
std::map<std::string, family, std::less<>> families;

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::abs(v) < 1e15) {
    char b[32];
    std::snprintf(b, sizeof b, "%.0f", v);
    return b;
  }
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

std::string escape_help(std::string_view v) {
  std::string o;
  for (char c : v) {
    if (c == '\\') o += "\\\\";
    else if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

void append_labels(std::string& out, const labels& common, const labels& own) {
  if (common.empty() && own.empty()) return;
  out += '{';
  bool first = true;
  for (const labels* ls : {&common, &own})
    for (auto& [k, v] : *ls) {
      if (!first) out += ',';
      first = false;
      out += k;
      out += "=\"";
      out += escape_label(v);
      out += '"';
    }
  out += '}';
}

}  // namespace

std::string escape_label(std::string_view v) {
  std::string o;
  for (char c : v) {
    if (c == '\\') o += "\\\\";
    else if (c == '"') o += "\\\"";
    else if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

void set(std::string_view name, std::string_view help, kind k, const labels& l, double value) {
  std::lock_guard<std::mutex> g(mu);
  auto it = families.find(name);
  if (it == families.end()) it = families.emplace(std::string(name), family{std::string(help), k, {}}).first;
  it->second.samples[l] = value;
}

void replace(std::string_view name, std::string_view help, kind k,
             const std::vector<std::pair<labels, double>>& samples) {
  std::lock_guard<std::mutex> g(mu);
  auto it = families.find(name);
  if (it == families.end()) it = families.emplace(std::string(name), family{std::string(help), k, {}}).first;
  it->second.samples.clear();
  for (auto& [l, v] : samples) it->second.samples[l] = v;
}

std::string render(const labels& common) {
  std::lock_guard<std::mutex> g(mu);
  std::string out;
  for (auto& [name, f] : families) {
    out += "# HELP " + name + " " + escape_help(f.help) + "\n";
    out += "# TYPE " + name + (f.k == kind::counter ? " counter\n" : " gauge\n");
    for (auto& [l, v] : f.samples) {
      out += name;
      append_labels(out, common, l);
      out += ' ';
      out += number(v);
      out += '\n';
    }
  }
  return out;
}

void reset() {
  std::lock_guard<std::mutex> g(mu);
  families.clear();
}

// ---- the server ----------------------------------------------------------------------

struct http_server::impl {
  int fd = -1;
  int port = 0;
  labels common;
  std::function<void()> collect;
  std::atomic<bool> stop{false};
  std::thread thread;

  void serve() {
    while (!stop.load()) {
      pollfd p{fd, POLLIN, 0};
      int r = ::poll(&p, 1, 200);
      if (r <= 0 || !(p.revents & POLLIN)) continue;
      int c = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      answer(c);
      ::close(c);
    }
  }

  // Reads the request head (to the blank line; at most 8 KiB, 2 s) and
  // answers it.
  void answer(int c) {
    std::string req;
    char buf[2048];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (req.find("\r\n\r\n") == std::string::npos && req.find("\n\n") == std::string::npos) {
      if (req.size() > 8192) return respond(c, 431, "Request Header Fields Too Large", "request head over 8 KiB\n");
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return;
      pollfd p{c, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return;
      ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) break;
      req.append(buf, static_cast<std::size_t>(n));
    }
    auto sp1 = req.find(' ');
    auto sp2 = sp1 == std::string::npos ? std::string::npos : req.find(' ', sp1 + 1);
    if (sp2 == std::string::npos) return respond(c, 400, "Bad Request", "not an HTTP request\n");
    std::string method = req.substr(0, sp1), path = req.substr(sp1 + 1, sp2 - sp1 - 1);
    if (auto q = path.find('?'); q != std::string::npos) path.resize(q);
    if (method != "GET" && method != "HEAD") return respond(c, 405, "Method Not Allowed", "GET /metrics only\n");
    if (path != "/metrics") return respond(c, 404, "Not Found", "hetflow serves /metrics only\n");
    if (collect) collect();
    respond(c, 200, "OK", render(common), method == "HEAD");
  }

  static void respond(int c, int code, const char* why, const std::string& body, bool head_only = false) {
    char h[256];
    std::snprintf(h, sizeof h,
                  "HTTP/1.0 %d %s\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                  "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                  code, why, body.size());
    std::string all = h;
    if (!head_only) all += body;
    std::size_t off = 0;
    while (off < all.size()) {
      ssize_t n = ::send(c, all.data() + off, all.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<std::size_t>(n);
    }
  }
};

expected<std::unique_ptr<http_server>> http_server::start(const std::string& host, int port, labels common,
                                                          std::function<void()> collect) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string port_text = std::to_string(port);
  if (int e = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res); e != 0)
    return make_error(errc::invalid_argument, "metrics: cannot resolve " + host + ": " + ::gai_strerror(e));
  std::string why;
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    int s = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (s < 0) continue;
    int one = 1;
    ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(s, a->ai_addr, a->ai_addrlen) == 0 && ::listen(s, 16) == 0) {
      fd = s;
    } else {
      why = std::strerror(errno);
      ::close(s);
    }
  }
  ::freeaddrinfo(res);
  if (fd < 0)
    return make_error(errc::io_error, "metrics: cannot listen on " + host + ":" + port_text + ": " +
                                          (why.empty() ? "no usable address" : why));
  // Port 0: the kernel's choice (tests).
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  if (port == 0 && ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0)
    port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  auto p = std::make_unique<impl>();
  p->fd = fd;
  p->port = port;
  p->common = std::move(common);
  p->collect = std::move(collect);
  p->thread = std::thread([raw = p.get()] { raw->serve(); });
  return std::unique_ptr<http_server>(new http_server(std::move(p)));
}

http_server::http_server(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

http_server::~http_server() { stop(); }

void http_server::stop() {
  if (!impl_) return;
  impl_->stop = true;
  if (impl_->thread.joinable()) impl_->thread.join();
  if (impl_->fd >= 0) ::close(impl_->fd);
  impl_->fd = -1;
}

int http_server::port() const noexcept { return impl_ ? impl_->port : 0; }

}  // namespace hetflow::actors::metrics
