#include "actors/dataplane/net_devices.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <filesystem>
#include <set>
#include <vector>

namespace hetflow::dataplane {
namespace {

struct address {
  int family = AF_UNSPEC;
  in_addr v4{};
  in6_addr v6{};
};

std::vector<address> resolve(const std::string& host) {
  std::vector<address> out;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return out;
  for (addrinfo* p = res; p != nullptr; p = p->ai_next) {
    address a;
    a.family = p->ai_family;
    if (p->ai_family == AF_INET)
      a.v4 = reinterpret_cast<sockaddr_in*>(p->ai_addr)->sin_addr;
    else if (p->ai_family == AF_INET6)
      a.v6 = reinterpret_cast<sockaddr_in6*>(p->ai_addr)->sin6_addr;
    else
      continue;
    out.push_back(a);
  }
  ::freeaddrinfo(res);
  return out;
}

bool is_loopback(const address& a) {
  if (a.family == AF_INET) return (ntohl(a.v4.s_addr) >> 24) == 127;
  return IN6_IS_ADDR_LOOPBACK(&a.v6);
}
bool is_unspecified(const address& a) {
  if (a.family == AF_INET) return a.v4.s_addr == htonl(INADDR_ANY);
  return IN6_IS_ADDR_UNSPECIFIED(&a.v6);
}

// "DEV:PORT" for every RDMA port of this machine.
std::vector<std::string> rdma_ports() {
  std::vector<std::string> out;
  std::error_code ec;
  const std::filesystem::path root = "/sys/class/infiniband";
  for (const auto& dev : std::filesystem::directory_iterator(root, ec)) {
    std::error_code ec2;
    for (const auto& port : std::filesystem::directory_iterator(dev.path() / "ports", ec2))
      out.push_back(dev.path().filename().string() + ":" + port.path().filename().string());
  }
  return out;
}

}  // namespace

std::string net_devices_for(const std::string& setting, const std::string& host, std::string* why) {
  auto say = [&](std::string w) {
    if (why != nullptr) *why = std::move(w);
  };
  if (setting == "all" || setting.empty()) {
    say("every network device (ucx_net_devices = \"all\")");
    return {};
  }
  if (setting != "auto") {
    say("ucx_net_devices = \"" + setting + "\"");
    return setting;
  }
  const std::vector<address> addrs = resolve(host);
  if (addrs.empty()) {
    say("every network device ('" + host + "' does not resolve here)");
    return {};
  }
  for (const auto& a : addrs)
    if (is_unspecified(a)) {
      say("every network device (the node listens on every address)");
      return {};
    }
  const bool loopback = is_loopback(addrs.front());
  std::set<std::string> names;
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_name == nullptr) continue;
      const int fam = i->ifa_addr->sa_family;
      if (fam != AF_INET && fam != AF_INET6) continue;
      for (const auto& a : addrs) {
        if (a.family != fam) continue;
        bool match = false;
        if (loopback && is_loopback(a))
          match = (i->ifa_flags & IFF_LOOPBACK) != 0;  // all of 127.0.0.0/8 is the loopback interface
        else if (fam == AF_INET)
          match = std::memcmp(&reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, &a.v4, sizeof a.v4) == 0;
        else
          match = std::memcmp(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, &a.v6, sizeof a.v6) == 0;
        if (match) names.insert(i->ifa_name);
      }
    }
    ::freeifaddrs(ifs);
  }
  if (names.empty()) {
    say("every network device (no interface holds '" + host + "')");
    return {};
  }
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
  std::string what = out;
  if (!loopback)
    for (const auto& p : rdma_ports()) out += "," + p;
  say("network device" + std::string(names.size() == 1 ? " " : "s ") + what + " (the node's address " + host + ")" +
      (out.size() > what.size() ? " and the RDMA ports" : ""));
  return out;
}

}  // namespace hetflow::dataplane
