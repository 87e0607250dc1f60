// dp_bench: the UCX data plane between two processes on this machine.
//
//   dp_bench [--tls LIST]... [--reps N] [--lat-iters N] [--window-4m W] [--window-64m W]
//            [--count-4m N] [--count-64m N] [--idle-spin-us US] [--active-large N] [--error-mode peer|none] [--sender-thp] [--recycle] [--heap-reuse] [--no-pin] [--csv]
//
// Forks; parent is peer 0, child peer 1; worker addresses go over a
// socketpair, which also serves as the barrier between runs. Per transport:
//   latency    8 B ping-pong, handler-to-handler (the pong is sent from the
//              receive handler on the progress thread); one-way = RTT / 2,
//              the same convention as `ucx_perftest -t tag_lat`.
//   bandwidth  4 MiB and 64 MiB messages, `window` sends outstanding (the next
//              send is issued from the completion of the previous one); the
//              clock stops when the receiver's handler has seen the last
//              message and its 8-byte ack is back. GB/s = 1e9 bytes/s.
// Every run is repeated --reps times; the table shows the median.
//
// Peer 0 is pinned to CPU 0 and peer 1 to CPU 1 (unless --no-pin): on a
// 2-core machine the scheduler otherwise sometimes puts both busy-polling
// progress threads on one core and bandwidth drops ~5x (ucx_perftest shows
// the same bimodality unless given -c). Each process's main thread and UCX's
// async thread share its core with the progress thread.
//
// The receiver gets a fresh wire_buffer per message (that is the data
// plane's contract); the sender reuses one buffer, like ucx_perftest.
// --recycle: the receiver's handler puts each buffer into a pool that
// ucx_options::receive_buffer_allocator draws from (what ucx_perftest does
// with its one receive buffer); without it every message gets fresh pages.
// glibc serves allocations above 32 MiB with a fresh mmap, so every 64 MiB
// message costs page faults and zeroing on the receiver; --heap-reuse sets
// mallopt(M_MMAP_THRESHOLD / M_TRIM_THRESHOLD) to 1 GiB in both processes so
// freed buffers are reused instead, to measure that cost.
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/dataplane/ucx_data_plane.hpp"

using namespace hetflow;
using namespace hetflow::dataplane;
using clock_type = std::chrono::steady_clock;

namespace {

struct config {
  std::vector<std::string> tls;
  int reps = 5;
  int lat_iters = 20000;
  int lat_warmup = 2000;
  int window_4m = 16;
  int window_64m = 4;
  int count_4m = 500;
  int count_64m = 60;
  bool heap_reuse = false;
  bool sender_thp = false;
  bool recycle = false;
  bool pin = true;
  bool csv = false;
  long idle_spin_us = -1;  // -1: ucx_options' default
  int active_large = -1;   // -1: ucx_options' default
  ucx_error_mode error_mode = ucx_error_mode::peer;
};

struct result {
  std::string tls;
  double lat_us = 0;
  double gbps_4m = 0;
  double gbps_64m = 0;
};

constexpr channel_id ch_ping = 1, ch_pong = 2, ch_bulk = 3, ch_ack = 4;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "dp_bench[%d]: %s\n", static_cast<int>(getpid()), what.c_str());
  std::exit(1);
}

void write_all(int fd, const void* p, size_t n) {
  auto* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w <= 0) die("socketpair write failed");
    c += w;
    n -= static_cast<size_t>(w);
  }
}
void read_all(int fd, void* p, size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = read(fd, c, n);
    if (r <= 0) die("socketpair read failed (peer process died?)");
    c += r;
    n -= static_cast<size_t>(r);
  }
}
void barrier(int fd) {
  char b = 1;
  write_all(fd, &b, 1);
  read_all(fd, &b, 1);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Shared by both roles; the receive handler dispatches on the channel.
struct bench_state {
  data_plane* plane = nullptr;
  peer_id peer = 0;
  wire_buffer_ref small;
  // latency
  std::atomic<int> pongs_left{0};
  std::promise<void>* lat_done = nullptr;
  // bandwidth, receiver side
  std::atomic<int> bulk_expected{0};
  std::atomic<int> bulk_seen{0};
  std::atomic<bool> bulk_corrupt{false};
  // bandwidth, sender side
  std::promise<void>* ack = nullptr;
  // --recycle
  bool recycle = false;
  std::mutex pool_mutex;
  std::vector<wire_buffer> pool;
};

// ucx_options::receive_buffer_allocator for --recycle (progress thread).
wire_buffer pooled_buffer(bench_state& st, std::size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(st.pool_mutex);
    for (std::size_t i = st.pool.size(); i-- > 0;) {
      if (st.pool[i].capacity() >= bytes) {
        wire_buffer b = std::move(st.pool[i]);
        st.pool.erase(st.pool.begin() + static_cast<std::ptrdiff_t>(i));
        b.shrink_to(bytes);  // sets the size; bytes <= capacity
        return b;
      }
    }
  }
  wire_buffer b(bytes);
  auto begin = (reinterpret_cast<uintptr_t>(b.data()) + 4095) / 4096 * 4096;
  auto end = (reinterpret_cast<uintptr_t>(b.data()) + bytes) / 4096 * 4096;
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  return b;
}

void send_or_die(bench_state& st, channel_id ch, wire_buffer_ref msg, send_completion done = {}) {
  status s = st.plane->send(st.peer, ch, std::move(msg), std::move(done));
  if (!s.ok()) die("send: " + s.to_string());
}

void on_message(bench_state& st, peer_id, channel_id ch, wire_buffer msg) {
  switch (ch) {
    case ch_ping:  // peer 1: echo
      send_or_die(st, ch_pong, st.small);
      break;
    case ch_pong:  // peer 0: next ping or done
      if (st.pongs_left.fetch_sub(1) > 1)
        send_or_die(st, ch_ping, st.small);
      else
        st.lat_done->set_value();
      break;
    case ch_bulk: {  // peer 1: count; ack the last one
      if (msg.size() == 0 || msg.data()[0] != std::byte{0x5a} || msg.data()[msg.size() - 1] != std::byte{0xa5})
        st.bulk_corrupt = true;
      if (st.bulk_seen.fetch_add(1) + 1 == st.bulk_expected.load()) send_or_die(st, ch_ack, st.small);
      if (st.recycle) {
        std::lock_guard<std::mutex> lock(st.pool_mutex);
        if (st.pool.size() < 32) st.pool.push_back(std::move(msg));
      }
      break;
    }
    case ch_ack:
      st.ack->set_value();
      break;
    default:
      die("unexpected channel " + std::to_string(ch));
  }
}

double run_latency(bench_state& st, int rank, int fd, int iters) {
  barrier(fd);
  if (rank == 1) {
    barrier(fd);
    return 0;
  }
  std::promise<void> done;
  st.lat_done = &done;
  st.pongs_left = iters;
  auto t0 = clock_type::now();
  send_or_die(st, ch_ping, st.small);
  done.get_future().wait();
  double us = std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
  barrier(fd);
  return us / iters / 2;
}

double run_bandwidth(bench_state& st, int rank, int fd, size_t size, int count, int window,
                     const wire_buffer_ref& payload) {
  if (rank == 1) {
    st.bulk_seen = 0;
    st.bulk_expected = count;
    barrier(fd);
    barrier(fd);
    if (st.bulk_corrupt) die("corrupted bulk message");
    return 0;
  }
  barrier(fd);
  std::promise<void> ack;
  st.ack = &ack;
  std::atomic<int> issued{0}, completed{0};
  std::promise<void> all_completed;
  // Issues the next send from the completion of the previous one.
  std::function<void(status)> next;
  next = [&](status s) {
    if (!s.ok()) die("bulk send failed: " + s.to_string());
    if (issued.fetch_add(1) < count) send_or_die(st, ch_bulk, payload, next);
    if (completed.fetch_add(1) + 1 == count) all_completed.set_value();
  };
  auto t0 = clock_type::now();
  // Same rule as in `next`: completions may already be issuing sends.
  for (int i = 0; i < window; ++i)
    if (issued.fetch_add(1) < count) send_or_die(st, ch_bulk, payload, next);
  ack.get_future().wait();
  double secs = std::chrono::duration<double>(clock_type::now() - t0).count();
  all_completed.get_future().wait();  // no completion may outlive this frame
  barrier(fd);
  return static_cast<double>(size) * count / secs / 1e9;
}

result run_role(const config& cfg, const std::string& tls, int rank, int fd) {
  if (cfg.pin && std::thread::hardware_concurrency() >= 2) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(rank, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) die("sched_setaffinity");
  }
  bench_state st;
  st.recycle = cfg.recycle;
  ucx_options o;
  o.tls = tls;
  if (cfg.recycle) o.receive_buffer_allocator = [&st](std::size_t n) { return pooled_buffer(st, n); };
  o.self_peer = static_cast<uint32_t>(rank);
  if (cfg.idle_spin_us >= 0) o.idle_spin = std::chrono::microseconds(cfg.idle_spin_us);
  o.error_mode = cfg.error_mode;
  if (cfg.active_large > 0) o.max_active_large_receives = static_cast<uint32_t>(cfg.active_large);
  auto made = make_ucx_data_plane(o);
  if (!made) die(made.error().to_string());
  std::unique_ptr<data_plane> plane = std::move(made).value();

  std::vector<char> mine = plane->local_address();
  uint64_t n = mine.size();
  write_all(fd, &n, sizeof n);
  write_all(fd, mine.data(), mine.size());
  read_all(fd, &n, sizeof n);
  std::vector<char> theirs(n);
  read_all(fd, theirs.data(), n);

  st.plane = plane.get();
  st.peer = rank == 0 ? 1 : 0;
  auto small = std::make_shared<wire_buffer>(8);
  std::memset(small->data(), 1, 8);
  st.small = small;
  plane->set_receive_handler(
      [&st](peer_id from, channel_id ch, wire_buffer msg) { on_message(st, from, ch, std::move(msg)); });
  status s = plane->connect(st.peer, theirs);
  if (!s.ok()) die(s.to_string());
  barrier(fd);

  result r;
  r.tls = tls;
  run_latency(st, rank, fd, cfg.lat_warmup);
  std::vector<double> lat, bw4, bw64;
  for (int i = 0; i < cfg.reps; ++i) lat.push_back(run_latency(st, rank, fd, cfg.lat_iters));

  // --sender-thp puts the payloads on transparent huge pages; compare with
  // ucx_perftest under UCX_ALLOC_PRIO=thp,mmap,heap. Without it both use
  // 4 KiB pages (perftest's default allocation is a sysv segment).
  auto make_bulk = [&cfg](size_t size) {
    auto b = std::make_shared<wire_buffer>(size);
    auto begin = (reinterpret_cast<uintptr_t>(b->data()) + 4095) / 4096 * 4096;
    auto end = (reinterpret_cast<uintptr_t>(b->data()) + size) / 4096 * 4096;
    if (cfg.sender_thp && madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE) != 0)
      die("madvise");
    std::memset(b->data(), 0x11, size);
    b->data()[0] = std::byte{0x5a};
    b->data()[size - 1] = std::byte{0xa5};
    return wire_buffer_ref(std::move(b));
  };
  auto p4 = make_bulk(4u << 20);
  run_bandwidth(st, rank, fd, 4u << 20, cfg.window_4m, cfg.window_4m, p4);  // warm-up
  for (int i = 0; i < cfg.reps; ++i)
    bw4.push_back(run_bandwidth(st, rank, fd, 4u << 20, cfg.count_4m, cfg.window_4m, p4));
  p4.reset();
  auto p64 = make_bulk(64u << 20);
  run_bandwidth(st, rank, fd, 64u << 20, cfg.window_64m, cfg.window_64m, p64);
  for (int i = 0; i < cfg.reps; ++i)
    bw64.push_back(run_bandwidth(st, rank, fd, 64u << 20, cfg.count_64m, cfg.window_64m, p64));

  if (rank == 0) {
    r.lat_us = median(lat);
    r.gbps_4m = median(bw4);
    r.gbps_64m = median(bw64);
    std::fprintf(stderr, "  %s: latency us runs:", tls.c_str());
    for (double v : lat) std::fprintf(stderr, " %.2f", v);
    std::fprintf(stderr, "\n  %s: 4 MiB GB/s runs:", tls.c_str());
    for (double v : bw4) std::fprintf(stderr, " %.2f", v);
    std::fprintf(stderr, "\n  %s: 64 MiB GB/s runs:", tls.c_str());
    for (double v : bw64) std::fprintf(stderr, " %.2f", v);
    std::fprintf(stderr, "\n");
  }
  barrier(fd);
  plane->shutdown();
  return r;
}

result run_pair(const config& cfg, const std::string& tls) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) die("socketpair");
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    close(fds[0]);
    run_role(cfg, tls, 1, fds[1]);
    std::fflush(nullptr);
    _exit(0);
  }
  close(fds[1]);
  result r = run_role(cfg, tls, 0, fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  close(fds[0]);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die("peer process failed for " + tls);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  config cfg;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value after " + a);
      return argv[++i];
    };
    if (a == "--tls")
      cfg.tls.push_back(value());
    else if (a == "--reps")
      cfg.reps = std::max(1, std::atoi(value().c_str()));
    else if (a == "--lat-iters")
      cfg.lat_iters = std::max(1, std::atoi(value().c_str()));
    else if (a == "--window-4m")
      cfg.window_4m = std::max(1, std::atoi(value().c_str()));
    else if (a == "--window-64m")
      cfg.window_64m = std::max(1, std::atoi(value().c_str()));
    else if (a == "--count-4m")
      cfg.count_4m = std::max(1, std::atoi(value().c_str()));
    else if (a == "--count-64m")
      cfg.count_64m = std::max(1, std::atoi(value().c_str()));
    else if (a == "--idle-spin-us")
      cfg.idle_spin_us = std::atol(value().c_str());
    else if (a == "--active-large")
      cfg.active_large = std::max(1, std::atoi(value().c_str()));
    else if (a == "--error-mode") {
      std::string m = value();
      if (m != "peer" && m != "none") die("--error-mode takes peer or none");
      cfg.error_mode = m == "none" ? ucx_error_mode::none : ucx_error_mode::peer;
    } else if (a == "--no-pin")
      cfg.pin = false;
    else if (a == "--recycle")
      cfg.recycle = true;
    else if (a == "--sender-thp")
      cfg.sender_thp = true;
    else if (a == "--heap-reuse")
      cfg.heap_reuse = true;
    else if (a == "--csv")
      cfg.csv = true;
    else
      die("unknown argument " + a +
          " (use --tls LIST, --reps N, --lat-iters N, --window-4m W, --window-64m W, --count-4m N, --count-64m N)");
  }
  if (cfg.tls.empty()) cfg.tls = {"sm,self", "tcp,self"};
  if (cfg.heap_reuse) {
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  }

  std::vector<result> results;
  for (const std::string& tls : cfg.tls) results.push_back(run_pair(cfg, tls));

  if (cfg.csv) {
    // who,transport,size,GB/s,latency us -- who is dp-peer or dp-none, the
    // transport has '+' for ','.
    std::string who = cfg.error_mode == ucx_error_mode::none ? "dp-none" : "dp-peer";
    if (cfg.recycle) who += "-recycle";
    if (cfg.sender_thp) who += "-thp";
    for (const result& r : results) {
      std::string t = r.tls;
      std::replace(t.begin(), t.end(), ',', '+');
      std::printf("%s,%s,8,,%.3f\n", who.c_str(), t.c_str(), r.lat_us);
      std::printf("%s,%s,4194304,%.3f,\n", who.c_str(), t.c_str(), r.gbps_4m);
      std::printf("%s,%s,67108864,%.3f,\n", who.c_str(), t.c_str(), r.gbps_64m);
    }
    return 0;
  }
  std::printf("dp_bench: median of %d runs; error_mode %s; windows 4 MiB: %d, 64 MiB: %d; counts %d / %d%s%s%s\n",
              cfg.reps, cfg.error_mode == ucx_error_mode::none ? "none" : "peer", cfg.window_4m,
              cfg.window_64m, cfg.count_4m, cfg.count_64m, cfg.heap_reuse ? "; --heap-reuse" : "",
              cfg.sender_thp ? "; --sender-thp" : "", cfg.pin ? "; pinned to CPUs 0/1" : "");
  if (cfg.recycle) std::printf("receive buffers recycled (--recycle)\n");
  std::printf("%-10s %-12s %10s %12s\n", "size", "transport", "GB/s", "latency us");
  for (const result& r : results) {
    std::printf("%-10s %-12s %10s %12.2f\n", "8 B", r.tls.c_str(), "-", r.lat_us);
    std::printf("%-10s %-12s %10.2f %12s\n", "4 MiB", r.tls.c_str(), r.gbps_4m, "-");
    std::printf("%-10s %-12s %10.2f %12s\n", "64 MiB", r.tls.c_str(), r.gbps_64m, "-");
  }
  return 0;
}
