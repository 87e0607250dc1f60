#include "kernels/trace.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <new>
#include <sstream>

namespace hetflow::kernels::trace {
namespace {

// One recorded event. `ready` is set (release) after the fields are written,
// so a writer running concurrently takes only complete events.
struct slot {
  const char* name;
  const char* arg_name;
  int64_t ts;
  int64_t dur;
  int64_t arg;
  track_id track;
  std::atomic<uint32_t> ready;
};

constexpr std::size_t chunk_slots = 8192;
// slot::dur of a flow's ends (flow()); a span's is >= 0.
constexpr int64_t flow_start_mark = -2;
constexpr int64_t flow_end_mark = -3;
constexpr std::size_t max_tracks = 65535;

// The slots: a fixed table of chunk pointers (sized from max_events at
// start), chunks allocated on first use. Never resized while recording.
struct slot_table {
  explicit slot_table(std::size_t capacity)
      : capacity(capacity), chunks(new std::atomic<slot*>[(capacity + chunk_slots - 1) / chunk_slots]),
        chunk_count((capacity + chunk_slots - 1) / chunk_slots) {
    for (std::size_t i = 0; i < chunk_count; ++i) chunks[i].store(nullptr, std::memory_order_relaxed);
  }
  ~slot_table() {
    for (std::size_t i = 0; i < chunk_count; ++i) delete[] chunks[i].load(std::memory_order_relaxed);
  }
  slot* chunk(std::size_t k) {
    slot* c = chunks[k].load(std::memory_order_acquire);
    if (c != nullptr) return c;
    slot* fresh = new (std::nothrow) slot[chunk_slots]();
    if (fresh == nullptr) return nullptr;
    if (chunks[k].compare_exchange_strong(c, fresh, std::memory_order_acq_rel)) return fresh;
    delete[] fresh;  // another thread installed one first
    return c;
  }
  const std::size_t capacity;
  std::unique_ptr<std::atomic<slot*>[]> chunks;
  const std::size_t chunk_count;
};

struct recorder {
  std::atomic<slot_table*> table{nullptr};
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> dropped{0};
  std::mutex mu;  // tracks, node
  std::vector<std::string> tracks;  // id - 1 -> name
  std::map<std::string, track_id, std::less<>> track_ids;
  std::string node;
  int pid = 0;
};

recorder& rec() {
  static recorder* r = new recorder;  // never destroyed: threads may record during exit
  return *r;
}

thread_local track_id current = 0;

void append_escaped(std::string& out, std::string_view s) {
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      out += b;
    } else {
      out += ch;
    }
  }
}

std::string json_quoted(std::string_view s) {
  std::string out = "\"";
  append_escaped(out, s);
  out += '"';
  return out;
}

struct event_copy {
  const char* name;
  const char* arg_name;
  int64_t ts, dur, arg;
  track_id track;
};

// The header line, one line per event, "],", then the tail lines: the
// layout merge_files reads back.
void write_document(std::ostream& out, std::string_view note) {
  auto& r = rec();
  std::vector<event_copy> ev;
  std::size_t dropped = r.dropped.load(std::memory_order_relaxed);
  std::size_t capacity = 0;
  if (slot_table* t = r.table.load(std::memory_order_acquire)) {
    capacity = t->capacity;
    const std::size_t n = std::min(r.next.load(std::memory_order_acquire), t->capacity);
    ev.reserve(n);
    for (std::size_t k = 0; k * chunk_slots < n; ++k) {
      slot* c = t->chunks[k].load(std::memory_order_acquire);
      if (c == nullptr) continue;
      for (std::size_t i = 0; i < chunk_slots && k * chunk_slots + i < n; ++i) {
        const slot& s = c[i];
        if (s.ready.load(std::memory_order_acquire) == 0) continue;
        ev.push_back({s.name, s.arg_name, s.ts, s.dur, s.arg, s.track});
      }
    }
  }
  // Per track by start time; an enclosing span (longer) before the spans it
  // holds, so viewers nest them.
  std::sort(ev.begin(), ev.end(), [](const event_copy& a, const event_copy& b) {
    if (a.track != b.track) return a.track < b.track;
    if (a.ts != b.ts) return a.ts < b.ts;
    return a.dur > b.dur;
  });
  std::vector<std::string> tracks;
  std::string node;
  int pid = 0;
  {
    std::lock_guard<std::mutex> g(r.mu);
    tracks = r.tracks;
    node = r.node;
    pid = r.pid;
  }
  bool other_used = !ev.empty() && ev.front().track == 0;

  out << "{\"traceEvents\":[\n";
  std::string line;
  bool first = true;
  auto emit = [&] {
    if (!first) out << ",\n";
    first = false;
    out << line;
  };
  line = "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) + ",\"args\":{\"name\":" +
         json_quoted("node " + node) + "}}";
  emit();
  line = "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) +
         ",\"args\":{\"sort_index\":" + std::to_string(pid) + "}}";
  emit();
  auto thread_meta = [&](std::size_t tid, std::string_view name) {
    line = "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) + ",\"tid\":" +
           std::to_string(tid) + ",\"args\":{\"name\":" + json_quoted(name) + "}}";
    emit();
    line = "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) + ",\"tid\":" +
           std::to_string(tid) + ",\"args\":{\"sort_index\":" + std::to_string(tid) + "}}";
    emit();
  };
  if (other_used) thread_meta(0, "(other)");
  for (std::size_t i = 0; i < tracks.size(); ++i) thread_meta(i + 1, tracks[i]);
  int64_t last_ts = 0;
  for (const auto& e : ev) {
    line = "{\"name\":";
    line += json_quoted(e.name != nullptr ? e.name : "?");
    char buf[160];
    if (e.dur == flow_start_mark || e.dur == flow_end_mark) {
      std::snprintf(buf, sizeof buf,
                    ",\"cat\":\"flow\",\"ph\":\"%s\",%s\"id\":\"0x%016" PRIx64 "\",\"pid\":%d,\"tid\":%u,\"ts\":%" PRId64
                    "}",
                    e.dur == flow_start_mark ? "s" : "f", e.dur == flow_start_mark ? "" : "\"bp\":\"e\",",
                    static_cast<uint64_t>(e.arg), pid, unsigned(e.track), e.ts);
      line += buf;
      emit();
      continue;
    }
    std::snprintf(buf, sizeof buf, ",\"ph\":\"X\",\"pid\":%d,\"tid\":%u,\"ts\":%" PRId64 ",\"dur\":%" PRId64, pid,
                  unsigned(e.track), e.ts, std::max<int64_t>(0, e.dur));
    line += buf;
    if (e.arg_name != nullptr) {
      line += ",\"args\":{";
      line += json_quoted(e.arg_name);
      line += ':';
      line += std::to_string(e.arg);
      line += '}';
    }
    line += '}';
    emit();
    last_ts = std::max(last_ts, e.ts + std::max<int64_t>(0, e.dur));
  }
  if (dropped > 0) {
    // Visible in the viewer, not only in otherData.
    line = "{\"name\":" +
           json_quoted("trace: " + std::to_string(dropped) + " events dropped (more than " + std::to_string(capacity) +
                  "; HETFLOW_TRACE_MAX_EVENTS raises the bound)") +
           ",\"ph\":\"i\",\"s\":\"p\",\"pid\":" + std::to_string(pid) + ",\"tid\":0,\"ts\":" +
           std::to_string(last_ts) + "}";
    emit();
  }
  out << "\n],\n\"displayTimeUnit\":\"ms\",\n";
  out << "\"otherData\":{\"node\":" << json_quoted(node) << ",\"pid\":" << pid << ",\"events\":" << ev.size()
      << ",\"dropped_events\":" << dropped << ",\"max_events\":" << capacity
      << ",\"clock\":\"CLOCK_REALTIME microseconds\",\"status\":" << json_quoted(note) << "}\n}\n";
}

}  // namespace

int64_t now_us() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1'000'000 + ts.tv_nsec / 1000;
}

void start(std::string node_name, int pid, std::size_t max_events) {
  auto& r = rec();
  {
    std::lock_guard<std::mutex> g(r.mu);
    r.node = std::move(node_name);
    r.pid = pid;
  }
  if (r.table.load(std::memory_order_acquire) == nullptr)
    r.table.store(new slot_table(std::max<std::size_t>(1, max_events)), std::memory_order_release);
  detail::on.store(true, std::memory_order_release);
}

expected<std::size_t> max_events_from_env() {
  const char* e = std::getenv("HETFLOW_TRACE_MAX_EVENTS");
  if (e == nullptr || *e == '\0') return default_max_events;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(e, &end, 10);
  if (errno != 0 || end == e || *end != '\0' || v == 0 || e[0] == '-' || v > (1ull << 32))
    return make_error(errc::invalid_argument,
                      std::string("HETFLOW_TRACE_MAX_EVENTS wants a positive number of events (at most 2^32), got '") +
                          e + "'");
  return std::size_t(v);
}

void reset() {
  auto& r = rec();
  detail::on.store(false, std::memory_order_release);
  delete r.table.exchange(nullptr, std::memory_order_acq_rel);
  r.next.store(0);
  r.dropped.store(0);
  std::lock_guard<std::mutex> g(r.mu);
  r.tracks.clear();
  r.track_ids.clear();
  r.node.clear();
  r.pid = 0;
}

track_id track(std::string_view name) {
  if (!enabled()) return 0;
  auto& r = rec();
  std::lock_guard<std::mutex> g(r.mu);
  if (auto it = r.track_ids.find(name); it != r.track_ids.end()) return it->second;
  if (r.tracks.size() >= max_tracks) return 0;
  r.tracks.emplace_back(name);
  auto id = track_id(r.tracks.size());
  r.track_ids.emplace(std::string(name), id);
  return id;
}

const char* intern(std::string_view s) {
  static std::mutex mu;
  static std::set<std::string, std::less<>> names;  // node-based: c_str() stays put
  std::lock_guard<std::mutex> g(mu);
  auto it = names.find(s);
  if (it == names.end()) it = names.emplace(s).first;
  return it->c_str();
}

track_id current_track() noexcept { return current; }

track_scope::track_scope(track_id t) noexcept : previous_(current) { current = t; }
track_scope::~track_scope() { current = previous_; }

void complete(track_id t, const char* name, int64_t ts_us, int64_t dur_us, const char* arg_name,
              int64_t arg) noexcept {
  if (!enabled()) return;
  auto& r = rec();
  slot_table* table = r.table.load(std::memory_order_acquire);
  if (table == nullptr) return;
  const std::size_t i = r.next.fetch_add(1, std::memory_order_relaxed);
  if (i >= table->capacity) {
    r.dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  slot* c = table->chunk(i / chunk_slots);
  if (c == nullptr) {
    r.dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  slot& s = c[i % chunk_slots];
  s.name = name;
  s.arg_name = arg_name;
  s.ts = ts_us;
  s.dur = dur_us;
  s.arg = arg;
  s.track = t;
  s.ready.store(1, std::memory_order_release);
}

void flow(track_id t, const char* name, int64_t ts_us, uint64_t id, bool start) noexcept {
  // A slot whose duration is one of the markers below is a flow end.
  complete(t, name, ts_us, start ? flow_start_mark : flow_end_mark, nullptr, static_cast<int64_t>(id));
}

counts current_counts() noexcept {
  auto& r = rec();
  counts c;
  c.dropped = r.dropped.load(std::memory_order_relaxed);
  if (slot_table* t = r.table.load(std::memory_order_acquire))
    c.events = std::min(r.next.load(std::memory_order_relaxed), t->capacity);
  std::lock_guard<std::mutex> g(r.mu);
  c.tracks = r.tracks.size();
  return c;
}

std::string to_json(std::string_view note) {
  std::ostringstream os;
  write_document(os, note);
  return os.str();
}

expected<counts> write_file(const std::filesystem::path& path, std::string_view note) {
  auto tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return make_error(errc::io_error, "cannot write trace " + tmp.string() + ": " + std::strerror(errno));
    write_document(out, note);
    out.flush();
    if (!out) return make_error(errc::io_error, "cannot write trace " + tmp.string() + " (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return make_error(errc::io_error, "cannot write trace " + path.string() + ": " + ec.message());
  counts c = current_counts();
  return c;
}

std::string check_output_path(const std::filesystem::path& path) {
  if (path.empty()) return "--trace needs a file name";
  std::error_code ec;
  const auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  if (!std::filesystem::is_directory(dir, ec))
    return "--trace: the directory of " + path.string() + " does not exist";
  if (std::filesystem::is_directory(path, ec)) return "--trace: " + path.string() + " is a directory; name a file";
  if (access(dir.c_str(), W_OK) != 0)
    return "--trace: cannot write in " + dir.string() + " (" + std::strerror(errno) + ")";
  return {};
}

expected<merge_result> merge_files(const std::vector<std::filesystem::path>& inputs,
                                   const std::filesystem::path& out_path, std::string_view note) {
  merge_result m;
  auto tmp = out_path;
  tmp += ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) return make_error(errc::io_error, "cannot write trace " + tmp.string() + ": " + std::strerror(errno));
  out << "{\"traceEvents\":[\n";
  bool first = true;
  std::string others;
  for (const auto& p : inputs) {
    std::ifstream in(p, std::ios::binary);
    if (!in) {
      m.skipped.push_back(p.string() + ": not written (the node died?)");
      continue;
    }
    std::string line;
    if (!std::getline(in, line) || line != "{\"traceEvents\":[") {
      m.skipped.push_back(p.string() + ": not a hetflow trace file");
      continue;
    }
    // Events go straight through; a file cut short loses its tail only.
    std::size_t taken = 0;
    bool closed = false;
    while (std::getline(in, line)) {
      if (line == "],") {
        closed = true;
        break;
      }
      if (!line.empty() && line.back() == ',') line.pop_back();
      if (line.size() < 2 || line.front() != '{' || line.back() != '}') continue;
      if (!first) out << ",\n";
      first = false;
      out << line;
      if (line.find("\"ph\":\"M\"") == std::string::npos) ++taken;
    }
    std::string other;
    while (closed && std::getline(in, line)) {
      const std::string key = "\"otherData\":";
      if (line.rfind(key, 0) == 0) other = line.substr(key.size());
    }
    if (!closed || other.empty()) m.skipped.push_back(p.string() + ": cut short (kept " + std::to_string(taken) +
                                                      " events)");
    if (!other.empty()) {
      others += (others.empty() ? "" : ",") + other;
      const std::string key = "\"dropped_events\":";
      if (auto pos = other.find(key); pos != std::string::npos)
        m.dropped += std::size_t(std::strtoull(other.c_str() + pos + key.size(), nullptr, 10));
    }
    m.events += taken;
    ++m.files;
  }
  out << "\n],\n\"displayTimeUnit\":\"ms\",\n";
  out << "\"otherData\":{\"status\":" << json_quoted(note) << ",\"dropped_events\":" << m.dropped
      << ",\"clock\":\"CLOCK_REALTIME microseconds\",\"nodes\":[" << others << "]}\n}\n";
  out.flush();
  if (!out) return make_error(errc::io_error, "cannot write trace " + tmp.string() + " (disk full?)");
  out.close();
  std::error_code ec;
  std::filesystem::rename(tmp, out_path, ec);
  if (ec) return make_error(errc::io_error, "cannot write trace " + out_path.string() + ": " + ec.message());
  return m;
}

}  // namespace hetflow::kernels::trace
