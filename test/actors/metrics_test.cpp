// actors/metrics: the Prometheus text and the /metrics server.
#define BOOST_TEST_MODULE actors_metrics
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <regex>
#include <sstream>
#include <string>

#include "actors/metrics.hpp"

namespace m = hetflow::actors::metrics;

namespace {

// One HTTP exchange with 127.0.0.1:port; the whole response ("" if the
// connection failed).
std::string http(int port, const std::string& request) {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(s);
    return {};
  }
  (void)::send(s, request.data(), request.size(), 0);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(s, buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(s);
  return out;
}

std::string body_of(const std::string& response) {
  auto at = response.find("\r\n\r\n");
  return at == std::string::npos ? std::string() : response.substr(at + 4);
}

}  // namespace

BOOST_AUTO_TEST_CASE(render_groups_families_and_escapes_labels) {
  m::reset();
  m::set_gauge("hetflow_b", "B things", {{"actor", "x"}}, 2.5);
  m::set_gauge("hetflow_b", "ignored: the first help stays", {{"actor", "y\"q\\\n"}}, 3);
  m::set("hetflow_a_total", "A count", m::kind::counter, {}, 1e20);
  m::set_gauge("hetflow_b", "", {{"actor", "x"}}, 4);  // replaces the sample
  const std::string t = m::render({{"node", "n0"}});
  const std::string want =
      "# HELP hetflow_a_total A count\n"
      "# TYPE hetflow_a_total counter\n"
      "hetflow_a_total{node=\"n0\"} 1e+20\n"
      "# HELP hetflow_b B things\n"
      "# TYPE hetflow_b gauge\n"
      "hetflow_b{node=\"n0\",actor=\"x\"} 4\n"
      "hetflow_b{node=\"n0\",actor=\"y\\\"q\\\\\\n\"} 3\n";
  BOOST_TEST(t == want);
  // Every sample line is valid exposition syntax.
  const std::regex line(R"re([a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? \S+)re");
  std::istringstream in(t);
  for (std::string l; std::getline(in, l);)
    if (l.rfind("#", 0) != 0) BOOST_TEST(std::regex_match(l, line), l);
  // replace: a family's label sets come and go.
  m::reset();
  m::replace("hetflow_w", "waits", m::kind::gauge, {{{{"actor", "a"}}, 1}, {{{"actor", "b"}}, 2}});
  m::replace("hetflow_w", "waits", m::kind::gauge, {{{{"actor", "c"}}, 3}});
  BOOST_TEST(m::render({}) == "# HELP hetflow_w waits\n# TYPE hetflow_w gauge\nhetflow_w{actor=\"c\"} 3\n");
  m::replace("hetflow_w", "waits", m::kind::gauge, {});
  BOOST_TEST(m::render({}) == "# HELP hetflow_w waits\n# TYPE hetflow_w gauge\n");
  m::reset();
  BOOST_TEST(m::render({}).empty());
}

BOOST_AUTO_TEST_CASE(server_answers_metrics_404_405_and_stops) {
  m::reset();
  std::atomic<int> collected{0};
  auto srv = m::http_server::start("127.0.0.1", 0, {{"cluster", "c"}},
                                   [&] { m::set_gauge("hetflow_scrapes", "scrapes", {}, ++collected); });
  BOOST_REQUIRE_MESSAGE(srv.has_value(), (srv ? "" : srv.error().to_string()));
  const int port = (*srv)->port();
  BOOST_REQUIRE_GT(port, 0);
  std::string r = http(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  BOOST_TEST(r.rfind("HTTP/1.0 200 OK\r\n", 0) == 0, r);
  BOOST_TEST(r.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  BOOST_TEST(body_of(r) == "# HELP hetflow_scrapes scrapes\n# TYPE hetflow_scrapes gauge\nhetflow_scrapes{cluster=\"c\"} 1\n");
  r = http(port, "GET /metrics?x=1 HTTP/1.1\r\n\r\n");
  BOOST_TEST(body_of(r).find("hetflow_scrapes{cluster=\"c\"} 2") != std::string::npos, r);
  BOOST_TEST(http(port, "GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.0 404", 0) == 0);
  BOOST_TEST(http(port, "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.0 405", 0) == 0);
  BOOST_TEST(http(port, "garbage\r\n\r\n").rfind("HTTP/1.0 400", 0) == 0);
  BOOST_TEST(http(port, std::string(9000, 'a')).rfind("HTTP/1.0 431", 0) == 0);
  // A port in use is an error naming it.
  auto again = m::http_server::start("127.0.0.1", port, {}, {});
  BOOST_REQUIRE(!again.has_value());
  BOOST_TEST(again.error().message().find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
  (*srv)->stop();
  BOOST_TEST(http(port, "GET /metrics HTTP/1.1\r\n\r\n").empty());  // refused once stopped
  auto bad = m::http_server::start("no-such-host.invalid", 0, {}, {});
  BOOST_TEST(!bad.has_value());
  m::reset();
}
