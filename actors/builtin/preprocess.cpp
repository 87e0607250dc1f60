// The preprocess job: resource-adaptive pre-processing of Criteo-format text
// into packed records (kernels/preprocess/ does the work; this file spreads it
// over the nodes).
//
// Actors: one `pp_shard_<i>` per node i (shard i of N: a line-aligned slice of
// the concatenated inputs, see input_split.hpp; every node computes the same
// plan from the file sizes and the nodes' weights) and `pp_vocab` on the
// head, which coordinates (in both modes); in vocab mode each node's shard
// spawns a merger
// (`pp_merge_<i>`) for the columns pp_vocab gives it, so every node's cores
// merge.
//
// Failover ([job] shard_failover, default true; registry.hpp's
// expendable_nodes): when a node other than the head goes down, pp_vocab
// hands each shard it held to the surviving node holding the fewest
// (pptake); that node's shard actor processes the slice from the text after
// its own (a second `slot`), and every message about a shard names it, so
// pulls and ids reach whichever actor holds it. Hash mode: any time (a part
// the lost node had written is written again: its disk may be gone too).
// Vocab mode: until every shard has counted; a loss after that stops the job.
// Shards stay until pp_vocab has every part (ppdone from the holder) and
// says ppfinish, so a late loss still finds a taker.
//
//   the split (several nodes, no [job] shard_weights; both modes)
//   pp_shard_i            pp_vocab (head)
//     -- (ppcap, i, milli-cores, rows/s) -->  waits for every node still up
//                                     (a lost one: the others' mean), or fails
//                                     after request_timeout naming the silent
//                                     ones; rows/s: its pass-1 speed with
//                                     split_by = "speed" (0 with "cores")
//     <-- (ppsplit, weights) ------  to every node: shard i's share of the
//                                     input bytes is weight i / their sum
//
//   vocab mode
//   pp_shard_i            pp_vocab (head)          pp_merge_k (node k, its columns)
//     start: pass 1 (count_shard)
//     -- (ppcounted, i, holder, rows, sizes+hashable) --> waits for all N;
//                            assigns the columns to nodes by size
//                            (assign_merge_columns); a column is hashed when
//                            every shard can hash it (shard_counts::hashable)
//     <-- (ppmerge, hashed, holders, assign) -- to every node holding a shard
//     on a thread of its own (the actor keeps taking what others push):
//     hashed columns merged elsewhere, at once, their values sorted and
//     delta-coded (next_hex_column_chunk: ~3.5 bytes an entry, not 8):
//     -- (pphpush, i, c, chunk, last) ---------------------> inbox of node k
//     then, on the same thread, pp_merge_k for its columns (assign[c] == k)
//     sorted columns:
//     <-- request (pppull, i, c, max) -------------  k-way merge of the N sorted
//     --- chunk (<= chunk_bytes) ------------------>  count streams, pulled chunk by
//         ... until an empty chunk (and one more     chunk, one request ahead (and
//         pull past it: another empty chunk)         the next column's first)
//     hashed columns:                                 every other shard's entries
//                                                     (pushed, or exported here)
//                                                     added to a local shard's table
//                                                     (shard_counts::merge_hashed)
//     hashed columns by count threshold (merge_plan::threshold: min_count
//     > N, 64Ki entries or more): the pushes hold only each shard's
//     candidates (export_candidates) and a sketch of its values; then
//     <-- request (ppquery, i, c, values, last) ----  the others' candidates
//     --- its counts of those it has ------------>  it did not send, in chunks
//                                                     (pp::merge_candidates)
//     both: kept strings -> vocab-CC.tsv on node k; the id of each of shard i's
//     entries (K = the OOV id), all chunks sent at once, acks collected after
//     the last column; delta-coded (ppids, mostly a byte an id) where the
//     entries went sorted - always, since export_column sorts - else plain
//     int32 (pphids):
//     <-- request (ppids or pphids, i, c, K, chunk)
//     --- ack ------------------------------------>
//                            <-- (ppcolumn, c, distinct, kept, k, threads) per column,
//                                once every ack of the node's columns is in
//                            after all 26 columns (every id chunk acked):
//     <-- (ppgo) -----------
//     pass 2 (finish_shard): maps the staged part-0000i.bin
//     -- (ppdone, i, holder) -->   after every part:
//     <-- (ppfinish) -----------   report_done
//
//   Pass 1 parses each line once and stages the records with shard-local ids
//   (kernels/preprocess/preprocess.hpp); the mergers tell each shard only
//   which id each of its own entries got, so pass 2 reads no text.
//
//   hash mode: every shard runs pass 2 at start, then ppdone / ppfinish.
//
// Wire: atoms, integers and std::vector<char> only (CAF built-in types); every
// chunk is bounded by chunk_bytes (plus one record), every request and every
// wait for pushed counts has a finite timeout (request_timeout), so a dead or
// hung node is an error naming it, never a hang. Shards and the vocabulary actor are detached and mergers
// are threads: passes and merges block for minutes and must not hold a CAF
// scheduler thread; they poll node_services::stopping.
#include "actors/builtin/preprocess.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <thread>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "actors/builtin/counted_report.hpp"
#include "actors/builtin/job_actor.hpp"
#include "actors/builtin/pushed_counts.hpp"
#include "actors/json.hpp"
#include "actors/metrics.hpp"
#include "actors/log.hpp"
#include "kernels/preprocess/preprocess.hpp"
#include "kernels/preprocess/resources.hpp"
#include "kernels/trace.hpp"
#include "kernels/waits.hpp"

namespace hetflow::actors::builtin {
namespace {

namespace pp = kernels::preprocess;
namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

using pp_counted_atom = caf::atom_constant<caf::atom("ppcounted")>;
using pp_pull_atom = caf::atom_constant<caf::atom("pppull")>;
using pp_ids_atom = caf::atom_constant<caf::atom("ppids")>;
using pp_hpush_atom = caf::atom_constant<caf::atom("pphpush")>;
using pp_hids_atom = caf::atom_constant<caf::atom("pphids")>;
using pp_go_atom = caf::atom_constant<caf::atom("ppgo")>;
using pp_merge_atom = caf::atom_constant<caf::atom("ppmerge")>;
using pp_column_atom = caf::atom_constant<caf::atom("ppcolumn")>;
using pp_merge_fail_atom = caf::atom_constant<caf::atom("ppmfail")>;
using pp_take_atom = caf::atom_constant<caf::atom("pptake")>;
using pp_slot_done_atom = caf::atom_constant<caf::atom("ppdone")>;
using pp_finish_atom = caf::atom_constant<caf::atom("ppfinish")>;
using pp_tick_atom = caf::atom_constant<caf::atom("pptick")>;
using pp_cap_atom = caf::atom_constant<caf::atom("ppcap")>;
using pp_split_atom = caf::atom_constant<caf::atom("ppsplit")>;
using pp_claim_atom = caf::atom_constant<caf::atom("ppclaim")>;
using pp_query_atom = caf::atom_constant<caf::atom("ppquery")>;

const char* vocab_actor = "pp_vocab";
// balance = "steal": the part list of a job with no part at all (ppmerge).
constexpr uint64_t no_parts_key = ~uint64_t{0};
std::string shard_actor(int i) { return "pp_shard_" + std::to_string(i); }

// balance = "steal": shard I held by node N stages its parts in
// .shard-I-nN-K.tmp until pass 2 names them (the holder in the name: a node
// taken for lost that still runs never writes over its taker's files).
std::string staged_prefix(const std::string& dir, int shard, int node) {
  return dir + "/.shard-" + std::to_string(shard) + "-n" + std::to_string(node);
}


struct job_config {
  std::vector<std::string> inputs;
  std::string output_dir;
  pp::preprocess_options opt;
  uint64_t chunk_bytes = 1 << 20;
  double request_timeout_s = 60;
  int shards = 1;
  // [job] shard_weights: one per node (the input cut in proportion); empty:
  // the nodes' cores, measured at the start (one node: its whole input).
  std::vector<uint64_t> weights;
  // [job] split_by = "speed": the measured split weighs each node's cores by
  // its pass-1 speed (pass1_rows_per_s over split_speed_seconds); "cores":
  // the cores alone.
  bool split_by_speed = false;
  double split_speed_seconds = 0.03;
  // [job] balance (vocab mode, several nodes): "steal" - pass 1 takes the
  // input in ranges handed out while it runs (pp::range_claims), so a node
  // that is done first counts more; "split" - each node counts its share
  // of the split. "auto" (the default) steals unless shard_weights or
  // split_by = "speed" fix the shares.
  bool steal = false;
  uint64_t claim_unit = 0;  // [job] claim_unit; 0: pp::default_claim_unit
  bool measure_split() const { return shards > 1 && weights.empty(); }
};

job_config config_of(const topology::cluster& c) {
  const auto& p = c.job.params;
  job_config j;
  j.inputs = p.get_strings("inputs");
  fs::path out = p.get_string("output_dir", "preprocessed");
  j.output_dir = (out.is_absolute() ? out : c.file.parent_path() / out).lexically_normal().string();
  // categorical = { mode, min_count, range } or the flat form (categorical =
  // "vocab"|"hash", min_count, hash_range); the validator refuses both at once.
  j.opt.mode = p.get_string("categorical.mode", "vocab") == "hash" ? pp::categorical_mode::hash
                                                                   : pp::categorical_mode::vocab;
  j.opt.min_count = static_cast<uint64_t>(p.get_int("categorical.min_count", p.get_int("min_count", 1)));
  j.opt.hash_range = static_cast<uint64_t>(p.get_int("categorical.range", p.get_int("hash_range", 1 << 24)));
  j.opt.policy = p.get_string("malformed", "skip") == "fail" ? pp::malformed_policy::fail
                                                             : pp::malformed_policy::skip;
  j.opt.max_examples = static_cast<std::size_t>(p.get_int("max_examples", 20));
  j.opt.max_field_bytes = static_cast<std::size_t>(p.get_int("max_field_bytes", 64));
  j.opt.memory_cap = static_cast<uint64_t>(p.get_int("memory_cap", 0));
  j.opt.parallelism = static_cast<int>(p.get_int("parallelism", 0));
  j.opt.hash_merge = p.get_bool("hash_merge", true);
  j.opt.threshold_merge = p.get_bool("threshold_merge", true);
  j.chunk_bytes = static_cast<uint64_t>(p.get_int("chunk_bytes", 1 << 20));
  j.request_timeout_s = p.get_number("request_timeout", 60.0);
  j.split_by_speed = p.get_string("split_by", "cores") == "speed";
  j.split_speed_seconds = p.get_number("split_speed_time", 0.03);
  j.shards = static_cast<int>(c.nodes.size());
  for (int64_t w : p.get_ints("shard_weights")) j.weights.push_back(static_cast<uint64_t>(std::max<int64_t>(1, w)));
  const std::string balance = p.get_string("balance", "auto");
  j.steal = j.opt.mode == pp::categorical_mode::vocab && j.shards > 1 &&
            (balance == "steal" || (balance == "auto" && j.weights.empty() && !j.split_by_speed));
  j.claim_unit = static_cast<uint64_t>(p.get_int("claim_unit", 0));
  return j;
}

// The split's weights travel as milli-cores, u64 little-endian, one per node.
std::vector<char> encode_weights(const std::vector<uint64_t>& w) {
  std::vector<char> out(w.size() * 8);
  for (std::size_t i = 0; i < w.size(); ++i) std::memcpy(out.data() + 8 * i, &w[i], 8);
  return out;
}
std::optional<std::vector<uint64_t>> decode_weights(const std::vector<char>& b, int n) {
  if (b.size() != static_cast<std::size_t>(n) * 8) return std::nullopt;
  std::vector<uint64_t> w(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < w.size(); ++i) {
    std::memcpy(&w[i], b.data() + 8 * i, 8);
    if (w[i] == 0) return std::nullopt;
  }
  return w;
}

// Test drills: environment variable `var` = NODE:NUMBER; the number (>= 0)
// on node NODE, nothing elsewhere.
std::optional<double> drill_for(const char* var, const std::string& node) {
  const char* d = std::getenv(var);
  if (d == nullptr) return std::nullopt;
  const std::string v = d;
  const auto colon = v.rfind(':');
  if (colon == std::string::npos || v.substr(0, colon) != node) return std::nullopt;
  return std::max(0.0, std::atof(v.c_str() + colon + 1));
}

// Test only: HETFLOW_DRILL_PP_CLAIM_DELAY=NODE:SECONDS waits that long
// before each of node NODE's claims (balance = "steal"): a slow node.
double drill_claim_delay(const std::string& node) {
  return drill_for("HETFLOW_DRILL_PP_CLAIM_DELAY", node).value_or(0.0);
}

// Test only: HETFLOW_DRILL_PP_CAP_DELAY=NODE:SECONDS holds node NODE's
// cores report back that long (it_preprocess_run kills the node meanwhile:
// a node lost before the split). 0 elsewhere.
double drill_cap_delay(const std::string& node) {
  return drill_for("HETFLOW_DRILL_PP_CAP_DELAY", node).value_or(0.0);
}

// Test only: HETFLOW_DRILL_PP_QUERY_HOLD=NODE:SECONDS: node NODE's shard
// sleeps that long on the first query of a merge by count threshold before
// it answers (a node hung, or killed, in the middle of the merge).
double drill_query_hold(const std::string& node) {
  return drill_for("HETFLOW_DRILL_PP_QUERY_HOLD", node).value_or(0.0);
}

// This node's weight in the split (resource_snapshot::capacity_cores), in
// milli-cores.
uint64_t node_weight(const job_config& cfg) {
  const double cores = pp::probe_resources().capacity_cores(cfg.opt.parallelism);
  return std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(cores * 1000)));
}

// This node's pass-1 speed for a split by speed (pass1_rows_per_s), in rows
// per second; 0 for a split by cores. Test only:
// HETFLOW_DRILL_PP_SPEED=NODE:FACTOR multiplies node NODE's.
uint64_t node_speed(const job_config& cfg, const std::string& node) {
  if (!cfg.split_by_speed) return 0;
  const double r = pp::pass1_rows_per_s(cfg.split_speed_seconds) * drill_for("HETFLOW_DRILL_PP_SPEED", node).value_or(1.0);
  char buf[128];
  std::snprintf(buf, sizeof buf, "pass-1 speed: %.2fM rows/s a core (%.0f ms of parsing and counting)", r / 1e6,
                cfg.split_speed_seconds * 1e3);
  log_info(buf);
  return std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(r)));
}

std::string mib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f MiB", static_cast<double>(b) / (1 << 20));
  return buf;
}

// Logs a progress line at most every 2 s (and at the end of a pass).
class progress_printer {
public:
  explicit progress_printer(std::string what) : what_(std::move(what)) {}
  void operator()(const pp::preprocess_progress& p) {
    auto now = clock_type::now();
    bool last = p.bytes_done == p.bytes_total;
    if (!last && now - last_ < std::chrono::seconds(2)) return;
    last_ = now;
    double secs = std::chrono::duration<double>(now - t0_).count();
    char line[320];
    std::snprintf(line, sizeof line,
                  "%s %s: %.0f%% | %llu rows | %.0f rows/s | parallelism %d | rss %s%s%s", what_.c_str(),
                  p.pass, p.bytes_total ? 100.0 * p.bytes_done / p.bytes_total : 100.0,
                  static_cast<unsigned long long>(p.rows), secs > 0 ? p.rows / secs : 0.0, p.parallelism,
                  mib(p.memory).c_str(), p.table_bytes ? " | count tables " : "",
                  p.table_bytes ? mib(p.table_bytes).c_str() : "");
    log_info(line);
  }

private:
  std::string what_;
  clock_type::time_point t0_ = clock_type::now();
  clock_type::time_point last_ = clock_type::now() - std::chrono::seconds(10);
};

// ---- the column mergers -------------------------------------------------------------

// Every node merges some columns, so every node's cores merge (the counting
// is already spread; a merge on the head alone was 25-40% of a 2-node job on
// 1M rows). pp_vocab picks the columns (pp::assign_merge_columns, from each
// column's size in every shard) and sends each node a mask of its columns.
bool in_mask(uint32_t mask, int column) { return (mask >> column) & 1u; }

// How many columns a node's merger takes at once: its parallelism (the free
// cores when the job's is 0).
int merge_in_flight(const job_config& cfg) { return std::max(1, pp::parallelism_governor(cfg.opt.parallelism, 0).current()); }

struct merge_plan {
  job_config cfg;
  int index = 0;                      // this node (its shard actor's index)
  uint32_t columns = 0;               // bit c: merge column c here
  uint32_t hashed = 0;                // bit c: column c merges by hashing (every shard's is hashable)
  uint32_t threshold = 0;             // bit c: ... by count threshold (pp::merge_candidates; within hashed)
  uint64_t min_local = 1;             // then: what a shard sends (pp::candidate_min_count)
  int in_flight = 1;                  // columns merged at once (as reported in counted_report)
  std::shared_ptr<pushed_counts> inbox;  // the hashed columns' counts from the other nodes
  std::vector<caf::actor> shards;     // the actor holding each shard (slot), in shard order
  std::vector<std::string> shard_nodes;
  caf::actor vocab;
  std::shared_ptr<node_services> svc;
  // The counts of the shards this node holds (its own, and any it took over
  // from a lost node), read directly (no chunks, no messages). Safe beside
  // the shard actor: a column is merged by one merger only, and the shard's
  // own handlers touch only the other columns' streams and ids; the shard
  // joins the merger before it drops its counts.
  std::map<int, pp::shard_counts*> local;
  pp::shard_counts* local_of(int shard) const {
    auto it = local.find(shard);
    return it == local.end() ? nullptr : it->second;
  }
};

struct column_outcome {
  uint64_t distinct = 0, kept = 0;
  std::string error;
};

// A merger thread's requests to the shards held by other nodes. One blocking
// handle serves all the thread's columns, so replies can be collected after
// the column that asked for them:
//
//   column k:   merge (pulls one chunk ahead per remote shard) ... ids sent
//               first pull of column k+1 sent when column k starts
//   the end:    every ids ack and every pull made past a stream's end
//               received (before the columns are reported)
//
// On a 2-node job each node's one core runs its merger, so a request to the
// other node waits until that node's actor threads get its core (a few ms
// each time: 10 ms for the first pull of a 1460-string column); sending
// ahead and collecting late keeps the merger from idling on each of them.
class remote_requests {
public:
  using handle = decltype(std::declval<caf::scoped_actor&>()->request(
      std::declval<const caf::actor&>(), std::chrono::milliseconds{}, pp_pull_atom::value, uint32_t{}, uint32_t{},
      uint64_t{}));

  remote_requests(caf::actor_system& sys, const merge_plan& p)
      : sys_(sys), p_(p), blocking_(sys),
        timeout_(std::chrono::milliseconds(static_cast<int64_t>(p.cfg.request_timeout_s * 1000))) {}

  std::string who(int i) const { return "shard " + std::to_string(i) + " on node '" + p_.shard_nodes[i] + "'"; }

  // The next chunk of shard i's column c (sent now, received by take()).
  handle pull(int i, int c) {
    return blocking_->request(p_.shards[i], timeout_, pp_pull_atom::value, static_cast<uint32_t>(i),
                              static_cast<uint32_t>(c), static_cast<uint64_t>(p_.cfg.chunk_bytes));
  }
  expected<std::vector<char>> take(int i, int c, handle h, const char* what = "pulling column") {
    expected<std::vector<char>> r = make_error(errc::internal, "no reply");
    h.receive([&](std::vector<char>& chunk) { r = std::move(chunk); },
              [&](caf::error& e) {
                r = make_error(errc::timeout, std::string(what) + " C" + std::to_string(c + 1) + " counts from " +
                                                  who(i) + ": " + sys_.render(e));
              });
    return r;
  }
  // A chunk of the values shard i is asked its counts of (a merge by count
  // threshold); the reply, its hits, is received by take().
  handle query(int i, int c, std::vector<char> chunk, bool last) {
    return blocking_->request(p_.shards[i], timeout_, pp_query_atom::value, static_cast<uint32_t>(i),
                              static_cast<uint32_t>(c), std::move(chunk), last);
  }
  // The first pull of column c from every shard held elsewhere (none for a
  // hashed column: its counts are pushed).
  std::vector<std::optional<handle>> first_pulls(int c) {
    std::vector<std::optional<handle>> v(static_cast<std::size_t>(p_.cfg.shards));
    if (in_mask(p_.hashed, c)) return v;
    for (int i = 0; i < p_.cfg.shards; ++i)
      if (!p_.local_of(i)) v[std::size_t(i)].emplace(pull(i, c));
    return v;
  }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // `delta`: the chunk is append_id's (ppids), else plain int32 (pphids).
  void send_ids(int i, int c, int32_t oov, std::vector<char> chunk, bool delta) {
    const auto ui = static_cast<uint32_t>(i);
    const auto uc = static_cast<uint32_t>(c);
    late_.push_back({i, c, true,
                     delta ? blocking_->request(p_.shards[i], timeout_, pp_ids_atom::value, ui, uc, oov, std::move(chunk))
                           : blocking_->request(p_.shards[i], timeout_, pp_hids_atom::value, ui, uc, oov, std::move(chunk))});
  }
  // A pull made past a stream's end: its (empty) reply is collected late.
  void drop_late(int i, int c, handle h) { late_.push_back({i, c, false, h}); }
  // Every reply collected late; the first error.
  std::string collect() {
    std::string err;
    for (auto& l : late_) {
      if (l.ids) {
        l.h.receive([&](bool) {},
                    [&](caf::error& e) {
                      if (err.empty())
                        err = "sending column " + std::to_string(l.c) + " ids to " + who(l.i) + ": " + sys_.render(e);
                    });
      } else if (auto r = take(l.i, l.c, l.h); !r && err.empty()) {
        err = r.error().message();
      }
    }
    late_.clear();
    return err;
  }

private:
  struct late {
    int i, c;
    bool ids;  // an ids ack, else a pull past the end
    handle h;
  };
  caf::actor_system& sys_;
  const merge_plan& p_;
  caf::scoped_actor blocking_;
  std::chrono::milliseconds timeout_;
  std::vector<late> late_;
};

// Each shard's ids of column c (ids[k]: shard shards[k]'s, in its entries'
// order): handed to a shard held here, sent to one held elsewhere (acks
// collected late, remote_requests::collect).
void hand_ids(const merge_plan& p, int c, remote_requests& rq, const std::vector<int>& shards,
              std::vector<pp::big_vector<int32_t>>& ids, int32_t oov) {
  const auto& cfg = p.cfg;
  for (std::size_t k = 0; k < shards.size(); ++k) {
    const int i = shards[k];
    if (auto* l = p.local_of(i)) {
      l->add_column_ids(c, ids[k].data(), ids[k].size());
      l->set_oov_id(c, oov);
      continue;
    }
    // At least one chunk (it carries the OOV id), each at most chunk_bytes.
    // A sorted export's kept ids increase: delta-coded (ppids, mostly a byte
    // an id), else plain int32 (pphids).
    const pp::big_vector<int32_t>& v = ids[k];
    if (pp::kept_ids_increase(v.data(), v.size())) {
      int32_t prev = -1;
      std::size_t at = 0;
      do {
        std::vector<char> chunk;
        chunk.reserve(std::min<std::size_t>(cfg.chunk_bytes, 5 * (v.size() - at) + 5));
        for (; at < v.size() && (chunk.empty() || chunk.size() + 5 <= cfg.chunk_bytes); ++at)
          pp::append_id(chunk, v[at], prev);
        rq.send_ids(i, c, oov, std::move(chunk), true);
      } while (at < v.size());
      continue;
    }
    const std::size_t per_chunk = std::max<std::size_t>(1, cfg.chunk_bytes / 4);
    std::size_t at = 0;
    do {
      const std::size_t n = std::min(per_chunk, v.size() - at);
      std::vector<char> chunk;
      pp::append_plain_ids(chunk, v.data() + at, n);
      rq.send_ids(i, c, oov, std::move(chunk), false);
      at += n;
    } while (at < v.size());
  }
}

// Shard i's counts of hashed column c as its node pushed them (inbox),
// waited for under the watchdog's and the trace's eyes (the pushes of a
// busy node's earlier columns may be ahead of this one's).
expected<pp::hex_column> take_pushed(const merge_plan& p, int c, int i, kernels::trace::track_id tk,
                                     remote_requests& rq) {
  const auto w = kernels::waits::begin("pp_merge_" + std::to_string(p.index), rq.who(i),
                                       "its counts of column C" + std::to_string(c + 1) + " (pushed)");
  kernels::trace::scope t("wait: pushed counts", tk, "column", c + 1);
  auto r = p.inbox->take(i, c, rq.timeout(), p.svc->stopping());
  kernels::waits::end(w);
  if (!r) return make_error(r.error().code(), "column C" + std::to_string(c + 1) + " counts from " + rq.who(i) + ": " +
                                                  r.error().message());
  return r;
}

// Merges one column by hashing (merge_plan::hashed): the other shards'
// entries (local ones exported here, remote ones as pushed to the inbox) go
// into the table of the first shard held here (shard_counts::merge_hashed),
// which writes vocab-CC.tsv through `keep` and says which id each entry got;
// the ids go back in each shard's table order.
std::string merge_one_hashed(const merge_plan& p, int c, kernels::trace::track_id tk, remote_requests& rq,
                             column_outcome& out) {
  const auto& cfg = p.cfg;
  pp::shard_counts* base = p.local.begin()->second;
  const int base_index = p.local.begin()->first;
  std::vector<pp::hex_column> cols;
  std::vector<int> from;  // cols[k] is shard from[k]'s
  for (int i = 0; i < cfg.shards; ++i) {
    if (i == base_index) continue;
    from.push_back(i);
    if (auto* l = p.local_of(i)) {
      auto e = l->export_column(c);
      if (!e) return e.error().message();
      cols.push_back(std::move(*e));
      continue;
    }
    auto e = take_pushed(p, c, i, tk, rq);
    if (!e) return e.error().message();
    cols.push_back(std::move(*e));
  }
  std::vector<const pp::hex_column*> others;
  for (auto& h : cols) others.push_back(&h);
  auto file = pp::vocab_file_writer::open(cfg.output_dir, c);
  if (!file) return file.error().message();
  std::vector<pp::big_vector<int32_t>> ids;
  auto stats = base->merge_hashed(
      c, others, cfg.opt.min_count, [&](std::string_view s, uint64_t n) { file->add(s, n); }, ids);
  if (!stats) return stats.error().message();
  if (auto s = file->close(); !s.ok()) return s.message();
  cols.clear();
  hand_ids(p, c, rq, from, ids, static_cast<int32_t>(stats->kept));
  out.distinct = stats->distinct;
  out.kept = stats->kept;
  return {};
}

// Merges one column by count threshold (merge_plan::threshold; see
// pp::merge_candidates): every shard's candidates (local ones exported
// here, remote ones as pushed to the inbox), then each shard asked its
// counts of the others' candidates it did not send (all chunks of every
// remote shard sent at once, the replies collected after), then the ids of
// each shard's candidates and hits.
std::string merge_one_threshold(const merge_plan& p, int c, kernels::trace::track_id tk, remote_requests& rq,
                                column_outcome& out) {
  const auto& cfg = p.cfg;
  const auto S = static_cast<std::size_t>(cfg.shards);
  std::vector<pp::hex_column> cands(S), hits(S);
  for (int i = 0; i < cfg.shards; ++i) {
    if (auto* l = p.local_of(i)) {
      auto e = l->export_candidates(c, p.min_local);
      if (!e) return e.error().message();
      cands[std::size_t(i)] = std::move(*e);
      continue;
    }
    auto e = take_pushed(p, c, i, tk, rq);
    if (!e) return e.error().message();
    cands[std::size_t(i)] = std::move(*e);
  }
  std::vector<const pp::hex_column*> cp, hp;
  for (auto& h : cands) cp.push_back(&h);
  auto u = pp::candidate_queries(cp);
  if (!u) return "column C" + std::to_string(c + 1) + ": " + u.error().message();
  std::vector<pp::hex_column>& asked = u->queries;
  // A query chunk of at most chunk_bytes / 10 values (2-10 bytes each), so
  // that its answer (at most as many hits, up to 10 bytes each) stays within
  // chunk_bytes too.
  const std::size_t query_bytes = std::max<std::size_t>(64, cfg.chunk_bytes / 5);
  std::vector<std::vector<remote_requests::handle>> pending(S);
  for (int i = 0; i < cfg.shards; ++i) {
    if (p.local_of(i)) continue;
    const pp::hex_column& q = asked[std::size_t(i)];
    std::size_t next = 0;
    do {
      auto chunk = pp::next_hex_column_chunk(q, next, query_bytes);
      pending[std::size_t(i)].push_back(rq.query(i, c, std::move(chunk), next >= q.entries()));
    } while (next < q.entries());
  }
  for (int i = 0; i < cfg.shards; ++i) {
    auto* l = p.local_of(i);
    if (!l) continue;
    const pp::hex_column& q = asked[std::size_t(i)];
    if (auto s = l->answer_queries(c, q.pairs.data(), q.values(), hits[std::size_t(i)]); !s.ok()) return s.message();
    if (auto s = l->finish_candidates(c); !s.ok()) return s.message();
  }
  asked.clear();
  {
    kernels::trace::scope t("wait: query answers", tk, "column", c + 1);
    for (int i = 0; i < cfg.shards; ++i)
      for (auto& h : pending[std::size_t(i)]) {
        auto r = rq.take(i, c, h, "asking for column");
        if (!r) return r.error().message();
        pp::hex_column part;  // each answer's values coded from its own first
        if (!pp::add_hex_column_chunk(part, *r) || part.has_empty || !part.sketch.empty())
          return "column C" + std::to_string(c + 1) + ": a corrupt answer from " + rq.who(i);
        auto& to = hits[std::size_t(i)].pairs;
        to.insert(to.end(), part.pairs.begin(), part.pairs.end());
      }
  }
  for (auto& h : hits) hp.push_back(&h);
  auto file = pp::vocab_file_writer::open(cfg.output_dir, c);
  if (!file) return file.error().message();
  std::vector<pp::big_vector<int32_t>> ids;
  auto stats = pp::merge_candidates(
      cp, *u, hp, cfg.opt.min_count, [&](std::string_view s, uint64_t n) { file->add(s, n); }, ids);
  if (!stats) return "column C" + std::to_string(c + 1) + ": " + stats.error().message();
  if (auto s = file->close(); !s.ok()) return s.message();
  cands.clear();
  hits.clear();
  std::vector<int> all(S);
  for (std::size_t i = 0; i < S; ++i) all[i] = static_cast<int>(i);
  hand_ids(p, c, rq, all, ids, static_cast<int32_t>(stats->kept));
  out.distinct = stats->distinct;
  out.kept = stats->kept;
  return {};
}

// Merges one column: pulls every shard's sorted counts chunk by chunk (the
// k-way merge), writes vocab-CC.tsv, sends each shard the ids of its entries
// (their acks, like the pull each remote stream makes past its end, are
// collected by remote_requests::collect). `ahead`: the column's first pulls,
// already sent.
std::string merge_one(const merge_plan& p, int c, kernels::trace::track_id tk, remote_requests& rq,
                      std::vector<std::optional<remote_requests::handle>> ahead, column_outcome& out) {
  const auto& cfg = p.cfg;
  // One span per column: the k-way merge (pulling every shard's count
  // chunks) and the ids sent back.
  kernels::trace::scope t_column("merge column", tk, "column", c + 1);
  kernels::waits::progress();
  if (in_mask(p.threshold, c)) return merge_one_threshold(p, c, tk, rq, out);
  if (in_mask(p.hashed, c)) return merge_one_hashed(p, c, tk, rq, out);
  std::vector<std::unique_ptr<pp::count_stream>> streams;
  std::vector<pp::count_stream*> raw;
  // A remote shard's counts come one request ahead: the next chunk is served
  // and sent while the merge consumes the current one. The shard answers a
  // pull past the end with another empty chunk, so the request made as the
  // last chunk arrives is harmless. On an error the merge stops and the
  // column fails: a pull still in flight then dies with the handle.
  for (int i = 0; i < cfg.shards; ++i) {
    if (auto* l = p.local_of(i)) {
      streams.push_back(l->column_stream(c));
      raw.push_back(streams.back().get());
      continue;
    }
    auto fetch = [&, i]() -> expected<std::vector<char>> {
      auto& next = ahead[std::size_t(i)];
      remote_requests::handle h = *next;
      next.emplace(rq.pull(i, c));
      auto r = rq.take(i, c, h);
      if (!r) next.reset();
      return r;
    };
    streams.push_back(pp::chunk_stream(fetch, rq.who(i)));
    raw.push_back(streams.back().get());
  }
  auto file = pp::vocab_file_writer::open(cfg.output_dir, c);
  if (!file) return file.error().message();
  // Per shard: the id of each of its entries, delta-coded (vocabulary.hpp).
  std::vector<std::vector<std::vector<char>>> chunks(cfg.shards, std::vector<std::vector<char>>(1));
  std::vector<int32_t> prev(cfg.shards, -1);
  std::vector<std::vector<int32_t>> local_ids(cfg.shards);  // the shards held here: plain ids
  std::vector<char> is_local(cfg.shards);                    // (not a map lookup per entry)
  for (int i = 0; i < cfg.shards; ++i) is_local[std::size_t(i)] = p.local_of(i) != nullptr;
  auto stats = pp::merge_column_ids(
      raw, cfg.opt.min_count, [&](std::string_view s, uint64_t n) { file->add(s, n); },
      [&](std::size_t i, int32_t id) {
        if (is_local[i]) {
          local_ids[i].push_back(id);
          return;
        }
        auto& cs = chunks[i];
        if (cs.back().size() + 5 > cfg.chunk_bytes) cs.emplace_back();
        pp::append_id(cs.back(), id, prev[i]);
      });
  if (!stats) return stats.error().message();
  if (auto s = file->close(); !s.ok()) return s.message();
  for (auto& [i, l] : p.local) {
    l->add_column_ids(c, local_ids[std::size_t(i)].data(), local_ids[std::size_t(i)].size());
    l->set_oov_id(c, static_cast<int32_t>(stats->kept));
  }
  for (int i = 0; i < cfg.shards; ++i)
    if (auto& h = ahead[std::size_t(i)]) rq.drop_late(i, c, *h);
  // Every id chunk of the column to every other shard at once: the chunks
  // are built already (a few bytes per entry), so nothing more is held.
  for (int i = 0; i < cfg.shards; ++i) {
    if (is_local[std::size_t(i)]) continue;
    for (auto& chunk : chunks[i]) rq.send_ids(i, c, static_cast<int32_t>(stats->kept), std::move(chunk), true);
  }
  out.distinct = stats->distinct;
  out.kept = stats->kept;
  return {};
}

// The merger of one node (a thread its shard starts when every shard has
// counted; not an actor, so nothing of it outlives the shard, which joins it):
// merges this node's columns, as many at a time as the node's parallelism
// allows (the free cores when it is 0), each worker thread with its own
// blocking handle and one column claimed ahead (its first pulls sent), then
// reports each column to the vocabulary actor once every reply is in.
void merger(caf::actor_system& sys, merge_plan p) {
  auto tk = kernels::trace::track("pp_merge_" + std::to_string(p.index));
  std::vector<int> mine;
  for (int c = 0; c < pp::sparse_columns; ++c)
    if (in_mask(p.columns, c)) mine.push_back(c);
  const int in_flight = std::clamp(p.in_flight, 1, static_cast<int>(mine.size()));
  std::vector<column_outcome> outcome(mine.size());
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  auto worker = [&] {
    remote_requests rq(sys, p);
    std::size_t k = next.fetch_add(1);
    auto ahead = k < mine.size() ? rq.first_pulls(mine[k]) : decltype(rq.first_pulls(0)){};
    std::size_t last = mine.size();  // the last column this worker merged
    while (!failed.load() && k < mine.size()) {
      const std::size_t k2 = next.fetch_add(1);
      auto ahead2 = k2 < mine.size() ? rq.first_pulls(mine[k2]) : decltype(ahead){};
      auto& o = outcome[k];
      if (p.svc->stopping()) {
        o.error = "stopped";
      } else {
        // At the library boundary: a failed allocation must fail the job, not the node.
        try {
          o.error = merge_one(p, mine[k], tk, rq, std::move(ahead), o);
        } catch (const std::exception& e) {
          o.error = std::string("merging column C") + std::to_string(mine[k] + 1) + ": " + e.what();
        }
      }
      if (!o.error.empty()) {
        failed = true;
        return;  // the replies still due die with rq's handle
      }
      last = k;
      k = k2;
      ahead = std::move(ahead2);
    }
    // Another worker failed: what is still due (a claimed column's first
    // pulls among it) dies with rq's handle.
    if (failed.load()) return;
    if (auto err = rq.collect(); !err.empty()) {
      if (last < mine.size()) outcome[last].error = err;
      failed = true;
    }
  };
  {
    std::vector<std::thread> helpers;
    for (int k = 1; k < in_flight; ++k) helpers.emplace_back(worker);
    worker();
    for (auto& t : helpers) t.join();
  }
  for (std::size_t k = 0; k < mine.size(); ++k) {
    if (!outcome[k].error.empty()) {
      caf::anon_send(p.vocab, pp_merge_fail_atom::value,
                 "node '" + p.svc->node_name() + "', column C" + std::to_string(mine[k] + 1) + ": " + outcome[k].error);
      return;
    }
  }
  if (failed.load()) {
    caf::anon_send(p.vocab, pp_merge_fail_atom::value, "node '" + p.svc->node_name() + "': merge failed");
    return;
  }
  for (std::size_t k = 0; k < mine.size(); ++k)
    caf::anon_send(p.vocab, pp_column_atom::value, static_cast<uint32_t>(mine[k]), outcome[k].distinct, outcome[k].kept,
               static_cast<uint32_t>(p.index), static_cast<uint32_t>(in_flight));
}

// A hashed column of a shard this node holds, for the node merging it.
struct push_job {
  int column = 0;
  int shard = 0;
  pp::shard_counts* counts = nullptr;  // the slot's (the shard joins this thread before dropping them)
  caf::actor to;                       // the merging node's shard actor
};

// Sends each push job's entries (pphpush, chunk by chunk, in order: one
// thread, one connection per node pair); false after a failure, which goes
// to the coordinator as a failed merge.
bool push_counts(const merge_plan& p, const std::vector<push_job>& jobs, kernels::trace::track_id tk) {
  for (const push_job& j : jobs) {
    if (p.svc->stopping()) return false;
    kernels::trace::scope t_push("merge: push counts", tk, "column", j.column + 1);
    auto e = in_mask(p.threshold, j.column) ? j.counts->export_candidates(j.column, p.min_local)
                                            : j.counts->export_column(j.column);
    if (!e) {
      caf::anon_send(p.vocab, pp_merge_fail_atom::value,
                     "node '" + p.svc->node_name() + "', shard " + std::to_string(j.shard) + ": " + e.error().message());
      return false;
    }
    std::size_t next = 0;
    do {
      auto chunk = pp::next_hex_column_chunk(*e, next, p.cfg.chunk_bytes);
      caf::anon_send(j.to, pp_hpush_atom::value, static_cast<uint32_t>(j.shard), static_cast<uint32_t>(j.column),
                     std::move(chunk), next >= e->entries());
    } while (next < e->entries());
  }
  return true;
}

// ---- the shard ------------------------------------------------------------------

// One slice of the input (shard i of N) held by this node's shard actor: its
// own, or one it took over from a lost node (pp_take).
struct slot {
  int index = 0;
  bool started = false;  // start_slot ran (it waits for the split's weights)
  pp::shard_plan plan;
  // balance = "steal": a shard taken over from a lost node counts the slice
  // that node had claimed (set by pptake); its own shard claims as it goes.
  std::optional<pp::byte_range> taken;
  uint64_t claims = 0;  // ranges claimed (its own shard, steal)
  std::vector<std::string> part_names;  // steal: the part files it wrote
  std::optional<pp::shard_counts> counts;
  std::array<std::unique_ptr<pp::count_stream>, pp::sparse_columns> pulling;
  std::array<bool, pp::sparse_columns> pulled_out{};  // the column's stream has ended
  std::array<int32_t, pp::sparse_columns> prev_kept;  // decoding ppids chunks
  // A merge by count threshold: the last value asked (ppquery chunks are
  // each coded from the one before), until the last chunk.
  std::array<pp::hex_column, pp::sparse_columns> asked;
  double count_seconds = 0;
  uint64_t spills = 0, peak_table_bytes = 0;
  bool applied = false;
  uint64_t rows = 0, malformed = 0;
  double seconds = 0;
  std::string metrics;  // the part's report object, after pass 2
};

struct shard_state {
  std::shared_ptr<node_services> svc;
  std::string me;
  int index = 0;  // this node's own shard (the actor's index)
  job_config cfg;
  int merge_in_flight = 0;  // columns its merger takes at once, fixed by the first count report (0: none yet)
  pp::input_set inputs;
  std::vector<std::unique_ptr<slot>> slots;  // [0]: its own
  std::vector<uint64_t> weights;             // the split (one per node); empty until known
  std::vector<uint64_t> part_keys;           // steal: every part's first byte, in order (from ppmerge)
  std::optional<kernels::waits::scope> split_wait;  // waiting for them (watchdog)
  std::vector<int32_t> ids;                  // scratch
  clock_type::time_point t0;
  bool done = false;
  kernels::trace::track_id tk = 0;  // trace track (0: not tracing)
  // Pass 1 done, waiting for the vocabularies (watchdog and trace).
  std::optional<kernels::waits::scope> vocab_wait;
  std::thread merging;  // this node's column merger (merger()), if it has columns
  bool merge_started = false;
  bool query_held = false;  // drill_query_hold ran
  std::shared_ptr<pushed_counts> inbox = std::make_shared<pushed_counts>();

  slot* find(uint32_t shard) {
    for (auto& s : slots)
      if (s->index == static_cast<int>(shard)) return s.get();
    return nullptr;
  }
  void join_merger() {
    if (merging.joinable()) merging.join();
  }
  // balance = "steal": an earlier run's part files, removed on a thread of
  // its own while pass 1 runs (see start_clearing_parts).
  std::thread clearing;
  void join_clearing() {
    if (clearing.joinable()) clearing.join();
  }
  ~shard_state() {
    join_merger();
    join_clearing();
  }
};

void shard_fail(caf::event_based_actor* self, shard_state& st, const std::string& why) {
  if (st.done) return;
  st.done = true;
  // The merger (if any) is joined when the state goes, after this actor has
  // quit: its requests to this shard then fail at once, those to others are
  // bounded by request_timeout, and it stops between columns once the node
  // is stopping.
  st.svc->report_done(st.me, false, why, {});
  self->quit();
}

pp::preprocess_options shard_options(shard_state& st, const slot& sl) {
  pp::preprocess_options o = st.cfg.opt;
  // One node, one shard: no other counts can join its own (a job of more
  // nodes keeps every string, even after a failover left one node).
  if (st.cfg.shards == 1) o.drop_below = o.min_count;
  else o.defer_sort = o.hash_merge;  // columns may merge by hashing (merge_one_hashed)
  o.stop = &st.svc->stopping();
  o.spill_dir = st.cfg.output_dir + "/.spill-" + std::to_string(sl.index);
  const bool claiming = st.cfg.steal && st.cfg.opt.mode == pp::categorical_mode::vocab;
  auto printer = std::make_shared<progress_printer>(
      "shard " + std::to_string(sl.index) +
      (claiming ? (sl.taken ? " (" + mib(sl.taken->bytes()) + " taken over)" : std::string(" (claiming)"))
                : " (" + mib(sl.plan.bytes()) + ")"));
  // Trace: progress comes once per segment of a pass; the time since the
  // previous one (or the pass's start) is that segment's.
  auto last_us = std::make_shared<int64_t>(kernels::trace::enabled() ? kernels::trace::now_us() : 0);
  o.on_progress = [printer, last_us, tk = st.tk, me = st.me](const pp::preprocess_progress& p) {
    (*printer)(p);
    kernels::waits::progress();
    {
      const metrics::labels l{{"actor", me}, {"pass", p.pass}};
      metrics::set_gauge("hetflow_preprocess_rows", "Rows a preprocess shard has done in a pass", l,
                         static_cast<double>(p.rows));
      metrics::set_gauge("hetflow_preprocess_progress_ratio", "Fraction of a shard's input bytes done in a pass",
                         l, p.bytes_total ? double(p.bytes_done) / double(p.bytes_total) : 1.0);
      metrics::set_gauge("hetflow_preprocess_parallelism", "Threads a preprocess shard uses now", l, p.parallelism);
      metrics::set_gauge("hetflow_preprocess_memory_bytes", "Resident memory at a shard's last progress", l,
                         static_cast<double>(p.memory));
    }
    if (*last_us > 0 && kernels::trace::enabled()) {
      const int64_t now = kernels::trace::now_us();
      const char* name = std::strcmp(p.pass, "count") == 0   ? "count segment"
                         : std::strcmp(p.pass, "apply") == 0 ? "apply segment"
                                                             : "segment";
      kernels::trace::complete(tk, name, *last_us, now - *last_us, "rows", int64_t(p.rows));
      *last_us = now;
    }
  };
  return o;
}

// Pass 2 of one slot (hash mode: the only pass); tells the coordinator.
// False when the shard failed.
bool apply_slot(caf::event_based_actor* self, shard_state& st, slot& sl) {
  std::string part = st.cfg.output_dir + "/" + pp::part_file_name(sl.index);
  kernels::trace::scope t_apply("pass 2: apply", st.tk, "shard", sl.index);
  auto t0 = clock_type::now();
  const bool named_parts = sl.counts && st.cfg.steal;
  if (named_parts) {
    // Each part its file by where it begins among all the job's parts (an
    // earlier run's parts went at the start: start_clearing_parts).
    const auto keys = sl.counts->part_keys();
    for (std::size_t k = 0; k < keys.size(); ++k) {
      auto at = std::lower_bound(st.part_keys.begin(), st.part_keys.end(), keys[k]);
      if (at == st.part_keys.end() || *at != keys[k]) {
        shard_fail(self, st, "shard " + std::to_string(sl.index) + ": the coordinator's part list lacks a part");
        return false;
      }
      sl.counts->set_part_path(k, st.cfg.output_dir + "/" +
                                      pp::part_file_name(static_cast<int>(at - st.part_keys.begin())));
    }
  }
  auto r = sl.counts ? pp::finish_shard(*sl.counts, shard_options(st, sl))
                     : pp::apply_shard(st.inputs, sl.plan, nullptr, part, shard_options(st, sl));
  t_apply.end();
  sl.counts.reset();  // spill files and tables go
  std::error_code ec;
  fs::remove(st.cfg.output_dir + "/.spill-" + std::to_string(sl.index), ec);  // if empty
  if (!r) {
    if (r.error().code() == errc::cancelled) shard_fail(self, st, "stopped");
    else shard_fail(self, st, "shard " + std::to_string(sl.index) + ": " + r.error().message());
    return false;
  }
  // A shard's own slot counts from the actor's start; a taken-over one from
  // its own start (its count pass included).
  double secs = sl.index == st.index ? std::chrono::duration<double>(clock_type::now() - st.t0).count()
                                     : sl.count_seconds + std::chrono::duration<double>(clock_type::now() - t0).count();
  json_writer w;
  w.begin_object().field("shard", int64_t{sl.index}).field("node", st.svc->node_name());
  // balance = "steal": several parts a shard, named by their place in the input.
  std::string first_part = pp::part_file_name(sl.index);
  if (named_parts)
    first_part = r->parts.empty() ? std::string() : fs::path(r->parts.front().path).filename().string();
  w.field("part", first_part).field("rows", r->rows).field("lines", r->lines);
  w.field("bytes", r->bytes).field("malformed_total", r->malformed.total);
  w.field("seconds", secs).field("count_seconds", sl.count_seconds).field("apply_seconds", r->seconds);
  w.field("rows_per_s", secs > 0 ? r->rows / secs : 0.0);
  w.field("parallelism", int64_t{r->parallelism}).field("spills", sl.spills);
  w.field("peak_count_table_bytes", sl.peak_table_bytes).field("rss_bytes", pp::current_rss());
  w.field("taken_over", sl.index != st.index);
  if (named_parts) {
    w.field("claims", sl.claims);
    w.key("part_files").begin_array();
    for (const auto& pw : r->parts) sl.part_names.push_back(fs::path(pw.path).filename().string());
    for (const auto& pw : r->parts)
      w.begin_object().field("part", fs::path(pw.path).filename().string()).field("rows", pw.rows)
          .field("bytes", pw.bytes).end_object();
    w.end_array();
  }
  w.key("malformed").raw(r->malformed.to_json());
  w.end_object();
  sl.metrics = w.str();
  sl.rows = r->rows;
  sl.malformed = r->malformed.total;
  sl.seconds = secs;
  sl.applied = true;
  for (auto& e : r->malformed.examples) log_warn("malformed line skipped: " + e.to_string());
  if (r->malformed.total > r->malformed.examples.size())
    log_warn(std::to_string(r->malformed.total - r->malformed.examples.size()) +
             " more malformed lines skipped (see the report)");
  if (auto v = st.svc->find_actor(vocab_actor))
    self->send(v, pp_slot_done_atom::value, static_cast<uint32_t>(sl.index), static_cast<uint32_t>(st.index));
  return true;
}

// Every slot's part is written and the coordinator has them all: report
// (totals first, each part's object in "parts") and go.
void shard_finish(caf::event_based_actor* self, shard_state& st) {
  if (st.done) return;
  uint64_t rows = 0, malformed = 0;
  double secs = 0;
  std::string names;
  for (auto& s : st.slots) {
    if (!s->applied) return shard_fail(self, st, "told to finish before shard " + std::to_string(s->index) + "'s part was written");
    rows += s->rows;
    malformed += s->malformed;
    secs = std::max(secs, s->seconds);
    const bool named = st.cfg.steal && st.cfg.opt.mode == pp::categorical_mode::vocab;
    if (!named) names += (names.empty() ? "" : ", ") + pp::part_file_name(s->index);
    for (const auto& n : s->part_names) names += (names.empty() ? "" : ", ") + n;
  }
  json_writer w;
  w.begin_object().field("rows", rows).field("malformed_total", malformed).field("seconds", secs);
  w.key("parts").begin_array();  // last: summarize reads them back
  for (auto& s : st.slots) w.raw(s->metrics);
  w.end_array().end_object();
  st.done = true;
  st.svc->report_done(st.me, true,
                      "wrote " + std::to_string(rows) + " rows" + (names.empty() ? std::string(" (no part file)") : " to " + names) + " (" + std::to_string(malformed) +
                          " malformed lines skipped)" +
                          (st.slots.size() > 1 ? "; took over shard " + std::to_string(st.slots.back()->index) : ""),
                      w.str());
  self->quit();
}

void run_pass2(caf::event_based_actor* self, shard_state& st) {
  st.vocab_wait.reset();
  st.join_merger();  // done: every column it merged was reported before ppgo
  for (auto& s : st.slots)
    if (!s->applied && !apply_slot(self, st, *s)) return;
}

// Pass 1 (vocab) or the only pass (hash) of a slot; false when the shard failed.
bool start_slot(caf::event_based_actor* self, shard_state& st, slot& sl) {
  const auto& cfg = st.cfg;
  sl.started = true;
  sl.plan = pp::plan_shards(st.inputs.sizes(), st.weights)[static_cast<std::size_t>(sl.index)];
  auto r = pp::probe_resources();
  const std::string what = !cfg.steal ? mib(sl.plan.bytes()) + " of input"
                           : sl.taken ? "the " + mib(sl.taken->bytes()) + " of input the lost node had claimed"
                                      : "input claimed as it goes (balance = \"steal\")";
  log_info("shard " + std::to_string(sl.index) + "/" + std::to_string(cfg.shards) + ": " + what +
           (sl.index != st.index ? " (taken over from a lost node)" : "") + "; " + r.to_string());
  if (cfg.opt.mode == pp::categorical_mode::hash) return apply_slot(self, st, sl);
  std::string part = cfg.output_dir + "/" + pp::part_file_name(sl.index);
  kernels::trace::scope t_count("pass 1: count", st.tk, "shard", sl.index);
  expected<pp::shard_counts> c = make_error(errc::internal, "not counted");
  if (cfg.steal) {
    // The ranges come from pp_vocab as this node gets through them (its own
    // shard), or are the slice a lost node had claimed (a shard taken over).
    pp::next_range next;
    if (sl.taken) {
      next = [r = *sl.taken, given = false]() mutable -> expected<pp::byte_range> {
        if (given) return pp::byte_range{};
        given = true;
        return r;
      };
    } else {
      auto v = st.svc->find_actor(vocab_actor);
      if (!v) {
        shard_fail(self, st, "no vocabulary actor '" + std::string(vocab_actor) + "'");
        return false;
      }
      auto blocking = std::make_shared<caf::scoped_actor>(self->system());
      const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.request_timeout_s * 1000));
      const double delay = drill_claim_delay(st.svc->node_name());
      next = [blocking, v, timeout, delay, &sl, &sys = self->system(), tk = st.tk]() -> expected<pp::byte_range> {
        // The round trip, on the count's thread (9 claims took 6-7 ms in all
        // on the node that is not the head, 2 nodes x 1 thread, 1M rows;
        // asking one claim ahead would hide it, but with a quarter of the
        // gap a claim, the head's node then held 44% of the input after its
        // first two claims, which undoes the balance).
        kernels::trace::scope t_claim("claim", tk, "shard", sl.index);
        if (delay > 0) std::this_thread::sleep_for(std::chrono::duration<double>(delay));
        expected<pp::byte_range> out = make_error(errc::internal, "no answer to a claim");
        (*blocking)
            ->request(v, timeout, pp_claim_atom::value, static_cast<uint32_t>(sl.index))
            .receive([&](uint64_t b, uint64_t e) { out = pp::byte_range{b, e}; },
                     [&](caf::error& err) {
                       out = make_error(errc::peer_down, "claiming input from " + std::string(vocab_actor) +
                                                             " on the head: " + sys.render(err));
                     });
        if (out && !out->empty()) ++sl.claims;
        return out;
      };
    }
    c = pp::count_ranges(st.inputs, shard_options(st, sl), staged_prefix(cfg.output_dir, sl.index, st.index), next);
  } else {
    c = pp::count_shard(st.inputs, sl.plan, shard_options(st, sl), part);
  }
  t_count.end();
  if (!c) {
    if (c.error().code() == errc::cancelled) shard_fail(self, st, "stopped");
    else shard_fail(self, st, "shard " + std::to_string(sl.index) + ": " + c.error().message());
    return false;
  }
  sl.count_seconds = c->seconds;
  sl.spills = c->spills;
  sl.peak_table_bytes = c->peak_table_bytes;
  sl.counts.emplace(std::move(*c));
  sl.prev_kept.fill(-1);
  auto v = st.svc->find_actor(vocab_actor);
  if (!v) {
    shard_fail(self, st, "no vocabulary actor '" + std::string(vocab_actor) + "'");
    return false;
  }
  counted_report report;
  for (int c = 0; c < pp::sparse_columns; ++c) {
    report.sizes[std::size_t(c)] = sl.counts->column_size(c);
    if (sl.counts->hashable(c)) report.hashable |= 1u << c;
  }
  report.cap = sl.counts->memory_cap;
  report.table_bytes = sl.peak_table_bytes;
  // The merger takes as many columns at once as told here (merge_plan), so
  // that what pp_vocab fits to the cap is what runs.
  if (st.merge_in_flight == 0) st.merge_in_flight = merge_in_flight(st.cfg);
  report.in_flight = static_cast<uint32_t>(st.merge_in_flight);
  st.join_clearing();  // before the merge can start anywhere (start_clearing_parts)
  // balance = "steal": where each of its parts begins (pp_vocab numbers
  // every node's parts in input order).
  const std::vector<uint64_t> keys = cfg.steal ? sl.counts->part_keys() : std::vector<uint64_t>{};
  std::vector<char> key_wire(keys.size() * 8);
  if (!keys.empty()) std::memcpy(key_wire.data(), keys.data(), key_wire.size());
  self->send(v, pp_counted_atom::value, static_cast<uint32_t>(sl.index), static_cast<uint32_t>(st.index),
             sl.counts->rows, report.encode(), key_wire);
  if (!st.vocab_wait)
    st.vocab_wait.emplace(st.me, std::string(vocab_actor) + " on the head",
                          "the vocabularies' ids (after every shard's pass 1)",
                          kernels::waits::span{st.tk, "wait: vocabularies"});
  return true;
}

// Starts every slot that waited for the split's weights (its own, and any
// taken over meanwhile), in order; false when the shard failed.
bool start_slots(caf::event_based_actor* self, shard_state& st) {
  for (std::size_t k = 0; k < st.slots.size(); ++k)
    if (!st.slots[k]->started && !start_slot(self, st, *st.slots[k])) return false;
  return true;
}

// balance = "steal": which parts this run writes is known only after pass 1,
// so every node removes every part file in its output_dir at the start (an
// earlier run's), on a thread of its own at the lowest nice level: freeing
// a 160 MB part's page cache and blocks took ~15 ms on the 2-core VM,
// which the rename at the end of pass 2 paid otherwise. The thread is
// joined before the node reports its counts, so it is done on every node
// before the merge starts, and so before any node renames a new part.
void start_clearing_parts(shard_state& st) {
  st.clearing = std::thread([dir = st.cfg.output_dir] {
    (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);
    std::error_code ec;
    std::vector<fs::path> old;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.rfind("part-", 0) == 0 && name.size() > 4 && name.compare(name.size() - 4, 4, ".bin") == 0)
        old.push_back(it->path());
    }
    for (auto& p : old) fs::remove(p, ec);
  });
}

// What this node's shards staged in an earlier run that crashed: removed
// when it starts (only its own: another node may be writing its files).
void remove_staged_leftovers(const std::string& dir, int node) {
  const std::string mark = "-n" + std::to_string(node) + "-";
  std::error_code ec;
  std::vector<fs::path> old;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(".shard-", 0) == 0 && name.find(mark) != std::string::npos && name.size() > 4 &&
        name.compare(name.size() - 4, 4, ".tmp") == 0)
      old.push_back(it->path());
  }
  for (auto& p : old) fs::remove(p, ec);
}

void take_shard(caf::event_based_actor* self, shard_state& st, uint32_t shard, std::optional<pp::byte_range> range) {
  if (st.done) return;
  if (shard >= static_cast<uint32_t>(st.cfg.shards) || st.find(shard) || range.has_value() != st.cfg.steal)
    return shard_fail(self, st, "bad takeover of shard " + std::to_string(shard));
  log_warn("shard " + std::to_string(st.index) + " takes over shard " + std::to_string(shard) + " (its node is lost)");
  st.slots.push_back(std::make_unique<slot>());
  st.slots.back()->index = static_cast<int>(shard);
  st.slots.back()->taken = range;
  if (!st.weights.empty()) start_slot(self, st, *st.slots.back());  // else with the split
}

// A chunk of a column's ids for shard `shard` held here, decoded into
// st.ids by decode(slot) (false: corrupt), then handed to its counts.
template <class Decode>
caf::result<bool> take_ids(caf::event_based_actor* self, shard_state& st, uint32_t shard, uint32_t column,
                           int32_t oov_id, Decode&& decode) {
  kernels::trace::scope t_ids("merge: take id chunk", st.tk, "column", int64_t(column));
  st.ids.clear();
  slot* sl = st.find(shard);
  if (!sl || !sl->counts || column >= static_cast<uint32_t>(pp::sparse_columns) || oov_id < 0 || !decode(*sl)) {
    shard_fail(self, st,
               "corrupt id chunk for shard " + std::to_string(shard) + " column C" +
                   std::to_string(uint64_t{column} + 1) + " (nodes running different hetflow builds?)");
    return caf::make_error(caf::sec::invalid_argument, "corrupt id chunk");
  }
  sl->counts->add_column_ids(static_cast<int>(column), st.ids.data(), st.ids.size());
  sl->counts->set_oov_id(static_cast<int>(column), oov_id);
  return true;
}

caf::behavior shard(caf::event_based_actor* self, actor_env env) {
  auto st = std::make_shared<shard_state>();
  st->svc = env.services;
  st->me = env.spec.name;
  st->index = static_cast<int>(env.spec.args.get_int("shard", 0));
  st->cfg = config_of(env.cluster);
  st->tk = kernels::trace::track(st->me);
  self->set_default_handler(caf::skip);
  return {
    [self, st](start_atom) {
      self->set_default_handler(caf::print_and_drop);
      st->t0 = clock_type::now();
      auto& cfg = st->cfg;
      std::error_code ec;
      fs::create_directories(cfg.output_dir, ec);
      if (ec) return shard_fail(self, *st, "cannot create output_dir " + cfg.output_dir + ": " + ec.message());
      auto in = pp::input_set::open(cfg.inputs);
      if (!in) return shard_fail(self, *st, in.error().message());
      st->inputs = std::move(*in);
      if (cfg.steal) {
        remove_staged_leftovers(cfg.output_dir, st->index);
        start_clearing_parts(*st);
      } else if (st->index == 0) {
        // Part files of an earlier run with more shards would join the output.
        for (int i = cfg.shards;; ++i) {
          if (!fs::remove(cfg.output_dir + "/" + pp::part_file_name(i), ec)) break;
        }
      }
      st->slots.push_back(std::make_unique<slot>());
      st->slots.back()->index = st->index;
      if (cfg.measure_split()) {
        // The input is cut in proportion to the nodes' cores: this node's
        // go to the coordinator, which sends every node all of them.
        auto v = st->svc->find_actor(vocab_actor);
        if (!v) return shard_fail(self, *st, "no vocabulary actor '" + std::string(vocab_actor) + "'");
        const uint64_t speed = node_speed(cfg, st->svc->node_name());
        if (const double d = drill_cap_delay(st->svc->node_name()); d > 0) {
          log_info("drill: the cores report held back " + std::to_string(d).substr(0, 4) + " s");
          self->delayed_send(v, std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(d)),
                             pp_cap_atom::value, static_cast<uint32_t>(st->index), node_weight(cfg), speed);
        } else {
          self->send(v, pp_cap_atom::value, static_cast<uint32_t>(st->index), node_weight(cfg), speed);
        }
        st->split_wait.emplace(st->me, std::string(vocab_actor) + " on the head",
                               "the input's split (every node's cores)", kernels::waits::span{st->tk, "wait: split"});
        return;
      }
      st->weights = cfg.weights.empty() ? std::vector<uint64_t>(static_cast<std::size_t>(cfg.shards), 1) : cfg.weights;
      start_slots(self, *st);
    },
    // Every node's weight in the split (milli-cores): pass 1 starts.
    [self, st](pp_split_atom, const std::vector<char>& wire) {
      if (st->done || !st->weights.empty()) return;
      auto w = decode_weights(wire, st->cfg.shards);
      if (!w) return shard_fail(self, *st, "bad input split from the coordinator (nodes running different hetflow builds?)");
      st->weights = std::move(*w);
      st->split_wait.reset();
      start_slots(self, *st);
    },
    // The coordinator hands this node a lost node's shard (balance =
    // "steal": with the slice of the input that node had claimed).
    [self, st](pp_take_atom, uint32_t shard) { take_shard(self, *st, shard, std::nullopt); },
    [self, st](pp_take_atom, uint32_t shard, uint64_t begin, uint64_t end) {
      take_shard(self, *st, shard, pp::byte_range{begin, end});
    },
    [self, st](pp_pull_atom, uint32_t shard, uint32_t column, uint64_t max_bytes) -> caf::result<std::vector<char>> {
      slot* sl = st->find(shard);
      if (!sl || !sl->counts || column >= static_cast<uint32_t>(pp::sparse_columns))
        return caf::make_error(caf::sec::invalid_argument,
                               "pull of shard " + std::to_string(shard) + " column " + std::to_string(column));
      kernels::trace::scope t_chunk("merge: serve count chunk", st->tk, "column", int64_t(column));
      auto& s = sl->pulling[column];
      // The merger asks one chunk ahead: past the end it gets another empty
      // chunk (a column's stream is made once).
      if (sl->pulled_out[column]) return std::vector<char>{};
      if (!s) s = sl->counts->column_stream(static_cast<int>(column));
      auto chunk = pp::next_count_chunk(*s, std::min<uint64_t>(max_bytes, 64u << 20));
      if (!chunk) {
        std::string why = "shard " + std::to_string(shard) + ": " + chunk.error().message();
        shard_fail(self, *st, why);
        return caf::make_error(caf::sec::runtime_error, why);
      }
      if (chunk->empty()) {
        s.reset();
        sl->pulled_out[column] = true;
      }
      return std::move(*chunk);
    },
    // A merge by count threshold: the merger asks for this shard's counts of
    // values it did not send (ppquery chunks in order); the reply holds
    // those it counted, with their counts. After the last chunk the
    // column's entries are known (its ids follow) and its table goes.
    [self, st](pp_query_atom, uint32_t shard, uint32_t column, const std::vector<char>& chunk,
               bool last) -> caf::result<std::vector<char>> {
      slot* sl = st->find(shard);
      if (!sl || !sl->counts || column >= static_cast<uint32_t>(pp::sparse_columns))
        return caf::make_error(caf::sec::invalid_argument,
                               "query of shard " + std::to_string(shard) + " column " + std::to_string(column));
      if (const double d = drill_query_hold(st->svc->node_name()); d > 0 && !st->query_held) {
        st->query_held = true;
        log_info("drill: the first query held " + std::to_string(d).substr(0, 4) + " s");
        std::this_thread::sleep_for(std::chrono::duration<double>(d));
      }
      pp::hex_column& asked = sl->asked[column];
      const std::size_t before = asked.values();
      auto fail = [&](const std::string& why) -> caf::result<std::vector<char>> {
        shard_fail(self, *st, "shard " + std::to_string(shard) + ": " + why);
        return caf::make_error(caf::sec::runtime_error, why);
      };
      if (!pp::add_hex_column_chunk(asked, chunk) || asked.has_empty || !asked.sketch.empty())
        return fail("a corrupt query of column C" + std::to_string(uint64_t{column} + 1) +
                    " (nodes running different hetflow builds?)");
      pp::hex_column hits;
      const auto c = static_cast<int>(column);
      if (auto s = sl->counts->answer_queries(c, asked.pairs.data() + 2 * before, asked.values() - before, hits);
          !s.ok())
        return fail(s.message());
      if (last) {
        asked = pp::hex_column{};
        if (auto s = sl->counts->finish_candidates(c); !s.ok()) return fail(s.message());
      } else if (asked.values() > 1) {
        // Only the last value is needed: the next chunk is coded from it.
        asked.pairs.erase(asked.pairs.begin(), asked.pairs.end() - 2);
      }
      // One chunk, whole (no more hits than the chunk asked for).
      std::size_t next = 0;
      auto reply = pp::next_hex_column_chunk(hits, next, 16 + 15 * hits.values());
      if (next != hits.entries()) return fail("an answer cut short (a bug)");
      return reply;
    },
    // Shard i's entries of a column this node merges by hashing.
    [self, st](pp_hpush_atom, uint32_t shard, uint32_t column, const std::vector<char>& chunk, bool last) {
      if (shard >= static_cast<uint32_t>(st->cfg.shards) || column >= static_cast<uint32_t>(pp::sparse_columns) ||
          !st->inbox->add(static_cast<int>(shard), static_cast<int>(column), chunk, last))
        shard_fail(self, *st,
                   "corrupt or unexpected count chunk of column C" + std::to_string(uint64_t{column} + 1) +
                       " from shard " + std::to_string(shard) + " (nodes running different hetflow builds?)");
    },
    // A column's ids for one of this node's shards, in the order its entries
    // went out: plain int32 (pphids: a hashed column whose kept ids do not
    // increase in that order) or delta-coded (ppids: a sorted stream's, or
    // a hashed column pushed sorted).
    [self, st](pp_hids_atom, uint32_t shard, uint32_t column, int32_t oov_id,
               const std::vector<char>& chunk) -> caf::result<bool> {
      return take_ids(self, *st, shard, column, oov_id, [&](slot&) { return pp::decode_plain_ids(chunk, st->ids); });
    },
    [self, st](pp_ids_atom, uint32_t shard, uint32_t column, int32_t oov_id,
               const std::vector<char>& chunk) -> caf::result<bool> {
      return take_ids(self, *st, shard, column, oov_id,
                      [&](slot& sl) { return pp::decode_ids(chunk, sl.prev_kept[column], st->ids); });
    },
    [self, st](pp_merge_atom, uint32_t hashed, uint32_t threshold, const std::vector<char>& holders,
               const std::vector<char>& assign, const std::vector<char>& part_keys) {
      // Every shard has counted: merge this node's columns on a merger of
      // their own, so this actor stays free to serve pulls and ids; push
      // the hashed columns that other nodes merge to them. `holders`: u32
      // per shard, the node (shard actor) that holds it; `assign`: u32 per
      // column, the node that merges it; `part_keys` (balance = "steal"):
      // u64 per part of the job, where each begins, in input order.
      if (part_keys.size() % 8 != 0 || part_keys.empty() != !st->cfg.steal)
        return shard_fail(self, *st, "bad part list in the merge request (nodes running different hetflow builds?)");
      st->part_keys.resize(part_keys.size() / 8);
      if (!part_keys.empty()) std::memcpy(st->part_keys.data(), part_keys.data(), part_keys.size());
      if (st->part_keys.size() == 1 && st->part_keys[0] == no_parts_key) st->part_keys.clear();
      merge_plan p;
      p.cfg = st->cfg;
      p.index = st->index;
      p.hashed = hashed;
      p.threshold = threshold;
      p.min_local = pp::candidate_min_count(st->cfg.opt.min_count, st->cfg.shards);
      p.inbox = st->inbox;
      for (auto& s : st->slots)
        if (s->counts) p.local[s->index] = &*s->counts;
      p.svc = st->svc;
      p.vocab = st->svc->find_actor(vocab_actor);
      if (!p.vocab) return shard_fail(self, *st, "no vocabulary actor '" + std::string(vocab_actor) + "'");
      if (hashed >> pp::sparse_columns || (threshold & ~hashed) != 0 || p.local.empty() ||
          holders.size() != static_cast<std::size_t>(st->cfg.shards) * 4 || assign.size() != pp::sparse_columns * 4)
        return shard_fail(self, *st, "bad merge request (nodes running different hetflow builds?)");
      std::array<uint32_t, pp::sparse_columns> merger_of{};
      std::memcpy(merger_of.data(), assign.data(), assign.size());
      for (int c = 0; c < pp::sparse_columns; ++c) {
        if (merger_of[std::size_t(c)] >= static_cast<uint32_t>(st->cfg.shards))
          return shard_fail(self, *st, "bad merge request (column node)");
        if (merger_of[std::size_t(c)] == static_cast<uint32_t>(st->index)) p.columns |= 1u << c;
      }
      for (int i = 0; i < st->cfg.shards; ++i) {
        uint32_t h;
        std::memcpy(&h, holders.data() + 4 * i, 4);
        if (h >= static_cast<uint32_t>(st->cfg.shards)) return shard_fail(self, *st, "bad merge request (holder)");
        auto a = st->svc->find_actor(shard_actor(static_cast<int>(h)));
        if (!a) return shard_fail(self, *st, "no actor " + shard_actor(static_cast<int>(h)));
        p.shards.push_back(a);
        std::string node = st->svc->node_of(shard_actor(static_cast<int>(h)));
        p.shard_nodes.push_back(node.empty() ? "?" : node);
      }
      if (st->merge_started) return log_warn("shard " + std::to_string(st->index) + ": a second merge request, ignored");
      st->merge_started = true;
      // Columns pass 1 left unsorted for a merge by hashing that merge as
      // sorted streams instead (pp::fit_hashed_merge): sorted now, in
      // parallel, before the first pull.
      p.in_flight = st->merge_in_flight > 0 ? st->merge_in_flight : merge_in_flight(st->cfg);
      for (auto& sl : st->slots)
        if (sl->counts) sl->counts->sort_deferred(~hashed, p.in_flight);
      // The pushes first: the other nodes' mergers wait for them, and this
      // node's merger would share its cores with them (they touch
      // different columns of the counts). Both on a thread of their own:
      // this actor stays free to take the other nodes' pushed counts as
      // they come (pushed from this actor, they waited in its mailbox until
      // its own pushes were done: a merger waited 12-56 ms for counts
      // already sent).
      std::vector<push_job> pushes;
      for (int c = 0; c < pp::sparse_columns; ++c) {
        const auto m = static_cast<int>(merger_of[std::size_t(c)]);
        if (!in_mask(hashed, c) || m == st->index) continue;
        auto to = st->svc->find_actor(shard_actor(m));
        if (!to) return shard_fail(self, *st, "no actor " + shard_actor(m));
        for (auto& sl : st->slots)
          if (sl->counts) pushes.push_back({c, sl->index, &*sl->counts, to});
      }
      if (p.columns || !pushes.empty())
        st->merging = std::thread([&sys = self->system(), p = std::move(p), pushes = std::move(pushes)]() mutable {
          if (push_counts(p, pushes, kernels::trace::track("pp_merge_" + std::to_string(p.index))) && p.columns)
            merger(sys, std::move(p));
        });
    },
    [self, st](pp_go_atom) { run_pass2(self, *st); },
    [self, st](pp_finish_atom) { shard_finish(self, *st); },
  };
}

// ---- the coordinator (pp_vocab) ----------------------------------------------------

// On the head, in both modes: gathers the counts and runs the merge (vocab),
// knows which node holds which shard, hands a lost node's shards to the
// others (failover), and tells the shards to finish once every part is
// written.
struct vocab_state {
  std::shared_ptr<node_services> svc;
  std::string me;
  job_config cfg;
  bool vocab_mode = true;
  bool failover = true;
  std::vector<std::string> shard_nodes;  // node names by node index
  std::vector<int> holder;               // the node holding each shard
  std::set<int> lost;                    // lost nodes handled
  std::set<uint32_t> counted;
  std::array<uint64_t, pp::sparse_columns> cost{};  // entries per column over the shards
  std::vector<counted_report> reports;  // per shard (its sizes also for a recount)
  std::vector<uint64_t> rows;           // per shard: rows counted
  std::vector<double> counted_s;        // per shard: its count report's arrival, seconds after pass1_t0
  clock_type::time_point pass1_t0;      // when pass 1 began (the split sent)
  std::array<int, pp::sparse_columns> merger{};      // the node that merges each column
  uint32_t hashed = 0;                               // the columns merged by hashing
  uint32_t threshold = 0;                            // ... of them by count threshold
  bool merging = false;
  clock_type::time_point merge_t0;
  std::array<column_outcome, pp::sparse_columns> columns;
  std::set<uint32_t> merged;                  // columns reported
  std::map<uint32_t, uint32_t> merge_threads;  // merging node -> its threads
  std::set<uint32_t> applied;                 // shards whose part is written
  std::string vocabulary_json;                // after the merge
  struct reassignment {
    int shard;
    std::string from, to;
    double at_s;
  };
  std::vector<reassignment> reassigned;
  // balance = "steal": who has claimed what (from the split on), the
  // inputs' total bytes, the shards frozen (their node lost), and where
  // each shard's parts begin (from its count report).
  pp::range_claims claims;
  bool claims_ready = false;
  uint64_t total_bytes = 0;
  std::set<int> frozen;
  std::map<int, int> pending_takes;  // shard -> its taker, lost before the claims began
  std::vector<std::vector<uint64_t>> part_keys;
  std::vector<uint64_t> caps;  // measured split: each node's milli-cores (0: not yet)
  std::vector<double> speeds;  // split by speed: each node's pass-1 rows/s (0: not yet)
  bool split_sent = false;
  std::string split_json;      // how the input was cut, for the report
  clock_type::time_point split_t0;  // the job's start: request_timeout for the split counts from it
  clock_type::time_point t0 = clock_type::now();
  bool done = false;
};

void vocab_fail(caf::event_based_actor* self, vocab_state& st, const std::string& why) {
  if (st.done) return;
  st.done = true;
  st.svc->report_done(st.me, false, why, {});
  self->quit();
}

void finish_merge(caf::event_based_actor* self, vocab_state& st) {
  json_writer w;
  w.begin_object().key("columns").begin_array();
  uint64_t kept_total = 0, distinct_total = 0;
  for (int c = 0; c < pp::sparse_columns; ++c) {
    const auto& o = st.columns[std::size_t(c)];
    const bool estimated = in_mask(st.threshold, c);
    w.begin_object().field("column", "C" + std::to_string(c + 1)).field("distinct", o.distinct);
    w.field("distinct_estimated", estimated);
    w.field("kept", o.kept).field("oov_id", o.kept).field("node", st.shard_nodes[std::size_t(st.merger[std::size_t(c)])]);
    w.field("merge", estimated ? "threshold" : in_mask(st.hashed, c) ? "hash" : "sort");
    w.end_object();
    kept_total += o.kept;
    distinct_total += o.distinct;
  }
  w.end_array();
  double secs = std::chrono::duration<double>(clock_type::now() - st.merge_t0).count();
  uint64_t threads = 0;
  for (auto& [node, t] : st.merge_threads) threads += t;
  w.field("kept", kept_total).field("distinct", distinct_total).field("distinct_estimated", st.threshold != 0);
  w.field("merge_seconds", secs);
  w.field("merge_threads", threads).field("merge_nodes", static_cast<uint64_t>(st.merge_threads.size()));
  w.end_object();
  st.vocabulary_json = w.str();
  std::set<int> nodes(st.holder.begin(), st.holder.end());
  for (int n : nodes)
    if (auto a = st.svc->find_actor(shard_actor(n))) self->send(a, pp_go_atom::value);
  log_info("vocabularies merged from " + std::to_string(st.cfg.shards) + " shards on " +
           std::to_string(st.merge_threads.size()) + " node(s): " + std::to_string(kept_total) + " kept of " +
           std::to_string(distinct_total) + " distinct strings (" + std::to_string(secs).substr(0, 5) + " s)");
}

// The split as used: logged, and kept for the report ({"by", "nodes": [{node,
// weight, share}]}; by speed also each node's rows_per_s, 0 for a node lost
// before it said). Weights by cores or speed are milli-cores (by speed at
// the fastest node's speed), shown as cores.
void describe_split(vocab_state& st, const std::vector<uint64_t>& w, const std::string& by) {
  double sum = 0;
  for (uint64_t x : w) sum += static_cast<double>(x);
  const bool cores = by == "cores", speed = by == "speed";
  json_writer j;
  j.begin_object().field("by", by).key("nodes").begin_array();
  std::string line;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double weight = cores || speed ? static_cast<double>(w[i]) / 1000 : static_cast<double>(w[i]);
    const double share = sum > 0 ? static_cast<double>(w[i]) / sum : 0;
    const double rate = speed && i < st.speeds.size() ? st.speeds[i] : 0;
    j.begin_object().field("node", st.shard_nodes[i]).field("weight", weight).field("share", share);
    if (speed) j.field("rows_per_s", rate);
    j.end_object();
    char buf[128];
    if (speed)
      std::snprintf(buf, sizeof buf, "%s%s %g (%.0f%%; %.2fM rows/s a core)", i ? ", " : "", st.shard_nodes[i].c_str(),
                    weight, 100 * share, rate / 1e6);
    else
      std::snprintf(buf, sizeof buf, "%s%s %g (%.0f%%)", i ? ", " : "", st.shard_nodes[i].c_str(), weight, 100 * share);
    line += buf;
  }
  j.end_array().end_object();
  st.split_json = j.str();
  if (w.size() > 1)
    log_info("input split by " +
             std::string(cores   ? "the nodes' cores"
                         : speed ? "the nodes' cores x their pass-1 speed"
                                 : "[job] shard_weights") +
             ": " + line);
}

// balance = "steal": the claims start from the split's weights (where the
// shards between the first and the last start).
void init_claims(caf::event_based_actor* self, vocab_state& st, const std::vector<uint64_t>& w) {
  if (!st.cfg.steal || st.claims_ready) return;
  const uint64_t unit = st.cfg.claim_unit ? st.cfg.claim_unit : pp::default_claim_unit(st.total_bytes, st.cfg.shards);
  st.claims = pp::range_claims(st.total_bytes, w, unit);
  for (int i : st.frozen) st.claims.freeze(i);
  st.claims_ready = true;
  // The shards of nodes lost before now go to their takers with their
  // slices (empty, or a gap between two of them: range_claims::freeze).
  for (const auto& [i, to] : st.pending_takes) {
    const pp::byte_range r = st.claims.slice(i);
    if (auto a = st.svc->find_actor(shard_actor(to)))
      self->send(a, pp_take_atom::value, static_cast<uint32_t>(i), r.begin, r.end);
    else
      return vocab_fail(self, st, "no actor " + shard_actor(to) + " for shard " + std::to_string(i));
  }
  st.pending_takes.clear();
  const std::string unit_text =
      unit >= (uint64_t{1} << 20) ? mib(unit) : std::to_string((unit + 1023) >> 10) + " KiB";
  log_info("pass 1 balance: the nodes claim the input as they go (claims of at least " + unit_text +
           "; n0 from the start, the last node from the end)");
}

// Measured split: once every node still up has sent its cores, every node
// gets all of them (a node lost before it could counts as the mean of the
// others; its shard goes to a survivor, check_lost).
void maybe_send_split(caf::event_based_actor* self, vocab_state& st) {
  if (st.split_sent || st.done || !st.cfg.measure_split()) return;
  for (int n = 0; n < st.cfg.shards; ++n)
    if (st.caps[std::size_t(n)] == 0 && !st.lost.count(n) && !st.svc->node_lost(st.shard_nodes[std::size_t(n)]))
      return;
  const std::vector<uint64_t> w = pp::split_weights(st.caps, st.cfg.split_by_speed ? st.speeds : std::vector<double>{});
  st.split_sent = true;
  st.pass1_t0 = clock_type::now();
  describe_split(st, w, st.cfg.split_by_speed ? "speed" : "cores");
  init_claims(self, st, w);
  const auto wire = encode_weights(w);
  for (int n : std::set<int>(st.holder.begin(), st.holder.end())) {
    if (st.lost.count(n)) continue;
    auto a = st.svc->find_actor(shard_actor(n));
    if (!a) return vocab_fail(self, st, "no actor " + shard_actor(n));
    self->send(a, pp_split_atom::value, wire);
  }
}

// Every part is written: the shards may report and go, and so may this actor.
void finish_job(caf::event_based_actor* self, vocab_state& st) {
  std::set<int> nodes(st.holder.begin(), st.holder.end());
  for (int n : nodes)
    if (auto a = st.svc->find_actor(shard_actor(n))) self->send(a, pp_finish_atom::value);
  json_writer w;
  w.begin_object();
  if (!st.split_json.empty()) w.key("split").raw(st.split_json);
  if (st.cfg.steal && st.claims_ready) {
    // What each shard claimed (a lost node's slice: counted again by its taker).
    w.key("balance").begin_object().field("by", "steal");
    w.key("shards").begin_array();
    for (int i = 0; i < st.cfg.shards; ++i) {
      const pp::byte_range r = st.claims.slice(i);
      w.begin_object().field("shard", int64_t{i}).field("node", st.shard_nodes[std::size_t(st.holder[std::size_t(i)])]);
      w.field("claims", st.claims.claims(i)).field("begin", r.begin).field("end", r.end);
      w.field("share", st.total_bytes ? double(r.bytes()) / double(st.total_bytes) : 0.0).end_object();
    }
    w.end_array().end_object();
  } else if (st.vocab_mode && st.cfg.shards > 1) {
    w.key("balance").begin_object().field("by", "split").end_object();
  }
  if (st.vocab_mode) w.key("vocabulary").raw(st.vocabulary_json);
  w.key("reassigned").begin_array();
  for (const auto& r : st.reassigned)
    w.begin_object().field("shard", int64_t{r.shard}).field("from", r.from).field("to", r.to).field("at_s", r.at_s).end_object();
  w.end_array().end_object();
  st.done = true;
  std::string summary = st.vocab_mode ? "merged the vocabularies of " + std::to_string(st.cfg.shards) + " shards"
                                      : "coordinated " + std::to_string(st.cfg.shards) + " shards";
  if (!st.reassigned.empty()) summary += "; " + std::to_string(st.reassigned.size()) + " reassigned from lost nodes";
  st.svc->report_done(st.me, true, summary, w.str());
  self->quit();
}

// Sends the merge: each surviving node merges the columns it gets.
void start_merge(caf::event_based_actor* self, vocab_state& st) {
  st.merging = true;
  st.merge_t0 = clock_type::now();
  std::vector<int> alive;
  for (int n = 0; n < st.cfg.shards; ++n)
    if (!st.lost.count(n)) alive.push_back(n);
  // Each node's pass-1 speed: the rows of the shards it holds over the
  // time until its last count report (pp::assign_merge_columns).
  std::vector<double> speed;
  for (int n : alive) {
    uint64_t rows = 0;
    double s = 0;
    for (int i = 0; i < st.cfg.shards; ++i) {
      if (st.holder[std::size_t(i)] != n) continue;
      rows += st.rows[std::size_t(i)];
      s = std::max(s, st.counted_s[std::size_t(i)]);
    }
    speed.push_back(s > 0 ? double(rows) / s : 0);
  }
  auto pick = pp::assign_merge_columns(st.cost, static_cast<int>(alive.size()), speed);
  for (int c = 0; c < pp::sparse_columns; ++c) st.merger[std::size_t(c)] = alive[std::size_t(pick[std::size_t(c)])];
  // A column merges by hashing when every shard can (Criteo's hex ids, no
  // spill) and no count can pass 32 bits (the table's counters).
  uint32_t hashed = (1u << pp::sparse_columns) - 1;
  uint64_t rows = 0;
  for (int i = 0; i < st.cfg.shards; ++i) {
    hashed &= st.reports[std::size_t(i)].hashable;
    rows += st.rows[std::size_t(i)];
  }
  if (rows > pp::hashed_merge_max_rows || !st.cfg.opt.hash_merge) hashed = 0;
  // ... and when what its merging node then holds fits that node's cap (the
  // smallest of its shards' pass-1 caps): pp::fit_hashed_merge.
  pp::merge_memory mm;
  for (const auto& r : st.reports) mm.sizes.push_back(r.sizes);
  mm.holder = st.holder;
  mm.cap.assign(static_cast<std::size_t>(st.cfg.shards), 0);
  mm.held.assign(static_cast<std::size_t>(st.cfg.shards), 0);
  mm.in_flight.assign(static_cast<std::size_t>(st.cfg.shards), 1);
  for (int i = 0; i < st.cfg.shards; ++i) {
    const auto n = static_cast<std::size_t>(st.holder[std::size_t(i)]);
    const counted_report& r = st.reports[std::size_t(i)];
    mm.cap[n] = mm.cap[n] == 0 ? r.cap : std::min(mm.cap[n], r.cap);
    mm.held[n] += r.table_bytes;
    mm.in_flight[n] = std::max(mm.in_flight[n], static_cast<int>(r.in_flight));
  }
  const uint32_t fits = pp::fit_hashed_merge(hashed, mm, st.merger);
  for (int c = 0; c < pp::sparse_columns; ++c) {
    if (!in_mask(hashed & ~fits, c)) continue;
    const auto m = static_cast<std::size_t>(st.merger[std::size_t(c)]);
    log_warn("column C" + std::to_string(c + 1) + " merges as sorted streams: merging it by hashing, node '" +
             st.shard_nodes[m] + "' would pass its memory cap (" + mib(mm.cap[m]) + ", its count tables " +
             mib(mm.held[m]) + "; [job] memory_cap raises it)");
  }
  hashed = fits;
  st.hashed = hashed;
  // Hashed columns of enough entries whose shards need not send their
  // rarest ones (pp::merge_candidates): with min_count 3 on 2 nodes, a
  // string counted once on a node is kept only if the other counted it
  // twice, and such a node's candidates are its strings counted twice.
  st.threshold = 0;
  if (st.cfg.opt.threshold_merge && pp::candidate_min_count(st.cfg.opt.min_count, st.cfg.shards) >= 2)
    for (int c = 0; c < pp::sparse_columns; ++c) {
      uint64_t entries = 0;
      for (const auto& r : st.reports) entries += r.sizes[std::size_t(c)];
      if (in_mask(hashed, c) && entries >= st.cfg.opt.threshold_merge_from) st.threshold |= 1u << c;
    }
  std::vector<char> holders(static_cast<std::size_t>(st.cfg.shards) * 4);
  for (int i = 0; i < st.cfg.shards; ++i) {
    uint32_t h = static_cast<uint32_t>(st.holder[std::size_t(i)]);
    std::memcpy(holders.data() + 4 * i, &h, 4);
  }
  std::vector<char> assign(pp::sparse_columns * 4);
  for (int c = 0; c < pp::sparse_columns; ++c) {
    const auto m = static_cast<uint32_t>(st.merger[std::size_t(c)]);
    std::memcpy(assign.data() + 4 * c, &m, 4);
  }
  // balance = "steal": every part of the job, by where it begins (the
  // shards name their parts by their place in this list).
  std::vector<uint64_t> keys;
  if (st.cfg.steal) {
    // Every byte claimed once: the slices tile the input (else a bug lost
    // some of it, and the job must not end as if it had not).
    std::vector<pp::byte_range> slices;
    for (int i = 0; i < st.cfg.shards; ++i) slices.push_back(st.claims.slice(i));
    std::sort(slices.begin(), slices.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
    uint64_t at = 0;
    for (const auto& r : slices) {
      if (r.empty()) continue;
      if (r.begin != at) break;
      at = r.end;
    }
    if (!st.claims_ready || at != st.total_bytes)
      return vocab_fail(self, st, "the shards' claimed slices do not cover the input (bytes " + std::to_string(at) +
                                      " of " + std::to_string(st.total_bytes) + " in order): a bug; rerun the job");
    for (const auto& k : st.part_keys) keys.insert(keys.end(), k.begin(), k.end());
    std::sort(keys.begin(), keys.end());
    if (std::adjacent_find(keys.begin(), keys.end()) != keys.end())
      return vocab_fail(self, st, "two parts begin at the same byte (a claim handed out twice)");
    // No part at all (an empty input): one key past every byte says so (the
    // list is never empty in steal mode).
    if (keys.empty()) keys.push_back(no_parts_key);
  }
  std::vector<char> key_wire(keys.size() * 8);
  if (!keys.empty()) std::memcpy(key_wire.data(), keys.data(), key_wire.size());
  // Every node holding a shard, merging or not: it pushes hashed columns.
  for (int n : std::set<int>(st.holder.begin(), st.holder.end())) {
    auto a = st.svc->find_actor(shard_actor(n));
    if (!a) return vocab_fail(self, st, "no actor " + shard_actor(n));
    self->send(a, pp_merge_atom::value, hashed, st.threshold, holders, assign, key_wire);
  }
}

// Polled: a node the job survives losing (registry.hpp's expendable_nodes)
// went down. Its shards go to the surviving node holding the fewest, which
// processes them again from the text (hash mode: any time before the job
// ends, parts it had written included; vocab mode: before every shard has
// counted). Once the merge has begun its counts cannot be replaced, and the
// job stops naming it.
void check_lost(caf::event_based_actor* self, vocab_state& st) {
  for (int n = 1; n < st.cfg.shards; ++n) {
    if (st.lost.count(n) || !st.svc->node_lost(st.shard_nodes[std::size_t(n)])) continue;
    st.lost.insert(n);
    const std::string& name = st.shard_nodes[std::size_t(n)];
    if (st.vocab_mode && st.merging)
      return vocab_fail(self, st, "node '" + name + "' was lost after every shard had counted (its counts, the "
                                      "columns it merged and its parts cannot be replaced); rerun the job (a "
                                      "preprocess job reruns whole)");
    for (int i = 0; i < st.cfg.shards; ++i) {
      if (st.holder[std::size_t(i)] != n) continue;
      // A part it wrote counts as lost with it (its disk may be gone too):
      // the new holder writes it again.
      st.applied.erase(uint32_t(i));
      if (st.vocab_mode && st.counted.erase(uint32_t(i)))
        for (int c = 0; c < pp::sparse_columns; ++c)
          st.cost[std::size_t(c)] -= st.reports[std::size_t(i)].sizes[std::size_t(c)];
      int to = -1;
      std::size_t load = 0;
      for (int m = 0; m < st.cfg.shards; ++m) {
        if (st.lost.count(m) || st.svc->node_lost(st.shard_nodes[std::size_t(m)])) continue;
        std::size_t k = static_cast<std::size_t>(std::count(st.holder.begin(), st.holder.end(), m));
        if (to < 0 || k < load) to = m, load = k;
      }
      auto a = to < 0 ? caf::actor{} : st.svc->find_actor(shard_actor(to));
      if (!a) return vocab_fail(self, st, "node '" + name + "' was lost and no node is left for shard " + std::to_string(i));
      st.holder[std::size_t(i)] = to;
      if (st.cfg.steal) {
        // It claims no more; the taker counts what it had claimed (nothing,
        // before the split), and the gaps beside it go to its neighbours.
        st.frozen.insert(i);
        if (st.claims_ready) st.claims.freeze(i);
      }
      const double at = std::chrono::duration<double>(clock_type::now() - st.t0).count();
      st.reassigned.push_back({i, name, st.shard_nodes[std::size_t(to)], at});
      log_warn("node '" + name + "' is lost: shard " + std::to_string(i) + " goes to node '" +
               st.shard_nodes[std::size_t(to)] + "'");
      if (st.cfg.steal) {
        // Before the claims begin its slice is not known yet (a gap between
        // two lost shards may join it): init_claims sends it then.
        if (!st.claims_ready) st.pending_takes[i] = to;
        else self->send(a, pp_take_atom::value, static_cast<uint32_t>(i), st.claims.slice(i).begin,
                        st.claims.slice(i).end);
      } else {
        self->send(a, pp_take_atom::value, static_cast<uint32_t>(i));
      }
    }
  }
}

caf::behavior vocab(caf::event_based_actor* self, actor_env env) {
  auto st = std::make_shared<vocab_state>();
  st->svc = env.services;
  st->me = env.spec.name;
  st->cfg = config_of(env.cluster);
  st->vocab_mode = st->cfg.opt.mode == pp::categorical_mode::vocab;
  st->failover = env.cluster.job.params.get_bool("shard_failover", true);
  for (auto& n : env.cluster.nodes) st->shard_nodes.push_back(n.name);
  for (int i = 0; i < st->cfg.shards; ++i) st->holder.push_back(i);
  st->reports.resize(static_cast<std::size_t>(st->cfg.shards));
  st->part_keys.resize(static_cast<std::size_t>(st->cfg.shards));
  st->rows.resize(static_cast<std::size_t>(st->cfg.shards));
  st->counted_s.resize(static_cast<std::size_t>(st->cfg.shards));
  if (st->cfg.measure_split()) {  // a report may come first
    st->caps.assign(static_cast<std::size_t>(st->cfg.shards), 0);
    st->speeds.assign(static_cast<std::size_t>(st->cfg.shards), 0);
  }
  self->set_default_handler(caf::skip);
  return {
    [self, st](start_atom) {
      self->set_default_handler(caf::print_and_drop);
      st->split_t0 = clock_type::now();
      std::error_code ec;
      fs::create_directories(st->cfg.output_dir, ec);
      if (st->cfg.steal) {
        for (const auto& f : st->cfg.inputs) {
          const auto z = fs::file_size(f, ec);
          if (ec) return vocab_fail(self, *st, "cannot read the size of " + f + ": " + ec.message());
          st->total_bytes += z;
        }
      }
      if (!st->cfg.measure_split()) {
        st->split_sent = true;  // nothing to measure
        st->pass1_t0 = st->split_t0;
        describe_split(*st, st->cfg.weights.empty() ? std::vector<uint64_t>(std::size_t(st->cfg.shards), 1)
                                                    : st->cfg.weights,
                       st->cfg.weights.empty() ? "one node" : "shard_weights");
      }
      if (st->failover || !st->split_sent) self->send(self, pp_tick_atom::value);
    },
    [self, st](pp_cap_atom, uint32_t node, uint64_t milli_cores, uint64_t rows_per_s) {
      if (node >= static_cast<uint32_t>(st->cfg.shards) || !st->cfg.measure_split() ||
          (st->cfg.split_by_speed && rows_per_s == 0))
        return vocab_fail(self, *st, "bad cores report from node index " + std::to_string(node) +
                                         " (nodes running different hetflow builds?)");
      if (st->split_sent) return;  // from a node given up on
      st->caps[node] = std::max<uint64_t>(1, milli_cores);
      st->speeds[node] = double(rows_per_s);
      maybe_send_split(self, *st);
    },
    [self, st](pp_tick_atom) {
      if (st->done) return;
      if (st->failover) check_lost(self, *st);
      maybe_send_split(self, *st);
      if (!st->split_sent && std::chrono::duration<double>(clock_type::now() - st->split_t0).count() > st->cfg.request_timeout_s) {
        std::string silent;
        for (int n = 0; n < st->cfg.shards; ++n)
          if (st->caps[std::size_t(n)] == 0)
            silent += (silent.empty() ? "'" : ", '") + st->shard_nodes[std::size_t(n)] + "'";
        return vocab_fail(self, *st, "no word from node(s) " + silent + " of their cores within request_timeout (" +
                                         std::to_string(st->cfg.request_timeout_s).substr(0, 4) +
                                         " s): the input cannot be split among the nodes");
      }
      if (!st->failover && st->split_sent) return;  // the tick was only for the split
      // Every 20 ms, and every 2 ms once the job's last pass runs (every
      // column merged, or a part written in hash mode): a pending tick holds
      // this (detached) actor until it lands, and the node waits for its
      // actors to be gone before the actor system goes down
      // (node_runtime.cpp), so the period is also what the job's end may
      // wait for (7-13 ms of a 2-node 1M-row job's end at 20 ms). A check
      // is a lookup in a set.
      const bool last_pass = st->vocab_mode ? st->merged.size() == static_cast<std::size_t>(pp::sparse_columns)
                                            : !st->applied.empty();
      if (!st->done)
        self->delayed_send(self, std::chrono::milliseconds(last_pass ? 2 : 20), pp_tick_atom::value);
    },
    [self, st](pp_counted_atom, uint32_t shard_index, uint32_t from, uint64_t rows, const std::vector<char>& wire,
               const std::vector<char>& keys) {
      auto r = counted_report::decode(wire);
      if (shard_index >= static_cast<uint32_t>(st->cfg.shards) || !r || st->merging || keys.size() % 8 != 0)
        return vocab_fail(self, *st, "bad count report from shard " + std::to_string(shard_index) +
                                         " (nodes running different hetflow builds?)");
      // A report from a node that no longer holds the shard (sent just
      // before its loss was noticed): the new holder counts it again.
      if (static_cast<int>(from) != st->holder[shard_index]) return;
      if (!st->counted.insert(shard_index).second) return;
      for (int c = 0; c < pp::sparse_columns; ++c) st->cost[std::size_t(c)] += r->sizes[std::size_t(c)];
      st->reports[shard_index] = *r;
      st->rows[shard_index] = rows;
      st->counted_s[shard_index] = std::chrono::duration<double>(clock_type::now() - st->pass1_t0).count();
      st->part_keys[shard_index].resize(keys.size() / 8);
      if (!keys.empty()) std::memcpy(st->part_keys[shard_index].data(), keys.data(), keys.size());
      if (st->counted.size() == static_cast<std::size_t>(st->cfg.shards)) start_merge(self, *st);
    },
    [self, st](pp_column_atom, uint32_t column, uint64_t distinct, uint64_t kept, uint32_t node, uint32_t threads) {
      if (column >= static_cast<uint32_t>(pp::sparse_columns) || st->merger[column] != static_cast<int>(node))
        return vocab_fail(self, *st, "column report C" + std::to_string(uint64_t{column} + 1) + " from node index " +
                                         std::to_string(node) + ", which does not merge it");
      st->columns[column].distinct = distinct;
      st->columns[column].kept = kept;
      st->merged.insert(column);
      st->merge_threads[node] = threads;
      if (st->merged.size() == static_cast<std::size_t>(pp::sparse_columns)) finish_merge(self, *st);
    },
    [self, st](pp_slot_done_atom, uint32_t shard_index, uint32_t from) {
      if (shard_index >= static_cast<uint32_t>(st->cfg.shards))
        return vocab_fail(self, *st, "bad part report for shard " + std::to_string(shard_index));
      if (static_cast<int>(from) != st->holder[shard_index]) return;  // see pp_counted
      st->applied.insert(shard_index);
      if (st->applied.size() == static_cast<std::size_t>(st->cfg.shards)) finish_job(self, *st);
    },
    [self, st](pp_merge_fail_atom, const std::string& why) { vocab_fail(self, *st, why); },
    // balance = "steal": the next range for a shard's pass 1 (empty: none
    // left beside it). A shard whose node was lost gets nothing more.
    [self, st](pp_claim_atom, uint32_t shard) -> caf::result<uint64_t, uint64_t> {
      if (!st->cfg.steal || !st->claims_ready || shard >= static_cast<uint32_t>(st->cfg.shards) || st->done)
        return caf::make_error(caf::sec::invalid_argument, "claim of shard " + std::to_string(shard) +
                                                               " refused (before the split, or the job is over)");
      const pp::byte_range r = st->claims.claim(static_cast<int>(shard));
      return {r.begin, r.end};
    },
  };
}

// ---- the report -------------------------------------------------------------------

double number_field(const std::string& json, const std::string& key) {
  auto at = json.find("\"" + key + "\":");
  if (at == std::string::npos) return 0;
  return std::strtod(json.c_str() + at + key.size() + 3, nullptr);
}

std::string summarize(const std::vector<actor_result>& results) {
  double rows = 0, malformed = 0, seconds = 0;
  std::string shards, coordinator;
  for (auto& r : results) {
    if (r.metrics_json.size() < 2) continue;  // e.g. a shard lost with its node
    if (r.name == vocab_actor) {
      // {"vocabulary": {...} (vocab mode), "reassigned": [...]}: lifted to the top level.
      coordinator = r.metrics_json.substr(1, r.metrics_json.size() - 2);
      continue;
    }
    // A shard: totals first, then "parts": [one object per part it wrote].
    rows += number_field(r.metrics_json, "rows");
    malformed += number_field(r.metrics_json, "malformed_total");
    seconds = std::max(seconds, number_field(r.metrics_json, "seconds"));
    const std::string tag = "\"parts\":[";
    auto at = r.metrics_json.find(tag);
    if (at == std::string::npos || r.metrics_json.size() < at + tag.size() + 2) continue;
    std::string parts = r.metrics_json.substr(at + tag.size(), r.metrics_json.size() - 2 - (at + tag.size()));
    shards += (shards.empty() ? "" : ",") + parts;
  }
  json_writer w;
  w.begin_object();
  w.field("rows", static_cast<uint64_t>(rows)).field("malformed", static_cast<uint64_t>(malformed));
  w.field("seconds", seconds).field("rows_per_s", seconds > 0 ? rows / seconds : 0.0);
  w.end_object();
  std::string s = w.str();
  s = s.substr(1, s.size() - 2);
  s += ",\"shards\":[" + shards + "]";
  if (!coordinator.empty()) s += "," + coordinator;
  return s;
}

}  // namespace

void add_preprocess(registry& reg) {
  using topology::key_spec;
  using topology::key_type;
  topology::type_spec job{"preprocess",
                          "Criteo text -> packed records (label, 13 dense, 26 sparse ids), sharded over the nodes",
                          {}};
  auto key = [&](std::string name, key_type t, bool required, std::optional<topology::setting_value> def,
                 std::string help, std::optional<double> lo = {}, std::optional<double> hi = {},
                 std::vector<std::string> one_of = {}) {
    job.keys.push_back(key_spec{std::move(name), t, required, std::move(def), std::move(help), lo, hi,
                                std::move(one_of)});
  };
  key("inputs", key_type::path_list, true, std::nullopt, "Criteo-format text files, in order");
  key("output_dir", key_type::string, false, std::string("preprocessed"),
      "where part-NNNNN.bin and vocab-CC.tsv go (relative to the topology file)");
  {
    // categorical = { mode = "vocab", min_count = 3 } | { mode = "hash", range = 10000000 };
    // categorical = "hash" is { mode = "hash" }. The flat min_count / hash_range stay valid.
    key_spec cat{"categorical", key_type::table, false, std::nullopt,
                 "{ mode = \"vocab\", min_count = N } (two passes, contiguous ids) or { mode = \"hash\", range = N } "
                 "(one pass, FNV-1a mod range); a plain \"vocab\" / \"hash\" is the mode",
                 {}, {}, {}};
    cat.shorthand = "mode";
    cat.fields.push_back(key_spec{"mode", key_type::string, false, std::string("vocab"), "vocab or hash", {}, {},
                                  {"vocab", "hash"}});
    cat.fields.push_back(key_spec{"min_count", key_type::integer, false, std::nullopt,
                                  "vocab: strings seen fewer times map to the OOV id (default 1)", 1.0, 4e18, {}});
    cat.fields.back().only_with = {"mode", "vocab"};
    cat.fields.back().alias_of = "min_count";
    cat.fields.push_back(key_spec{"range", key_type::integer, false, std::nullopt,
                                  "hash: ids in [0, range) (default 2^24)", 1.0, 2147483647.0, {}});
    cat.fields.back().only_with = {"mode", "hash"};
    cat.fields.back().alias_of = "hash_range";
    job.keys.push_back(std::move(cat));
  }
  key("min_count", key_type::integer, false, int64_t{1},
      "flat form of categorical.min_count", 1.0, 4e18);
  key("hash_range", key_type::integer, false, int64_t{1} << 24, "flat form of categorical.range", 1.0,
      2147483647.0);
  key("malformed", key_type::string, false, std::string("skip"),
      "malformed lines: skip (count and report) or fail (stop at the first)", {}, {}, {"skip", "fail"});
  key("max_examples", key_type::integer, false, int64_t{20}, "malformed lines reported in detail per shard",
      0.0, 1e6);
  key("max_field_bytes", key_type::integer, false, int64_t{64}, "longer fields are malformed", 1.0,
      double(pp::max_chunk_string_bytes));
  key("memory_cap", key_type::size, false, int64_t{0},
      "per node, for vocabulary counting (spills to disk beyond); 0 = half the free memory");
  key("parallelism", key_type::integer, false, int64_t{0},
      "threads per node; 0 = auto (free cores, cgroup quota, load; re-checked while running)", 0.0, 4096.0);
  key("shard_weights", key_type::size_list, false, std::nullopt,
      "one positive integer per node: node i's share of the input is its weight over their sum (default: each "
      "node's cores, measured at the start, and with split_by = \"speed\" their speed)");
  key("split_by", key_type::string, false, std::string("cores"),
      "the measured split (no shard_weights): cores (each node's usable cores) or speed (its cores x its pass-1 "
      "speed, timed for split_speed_time at the start: for CPUs of different speeds or busy cores)",
      {}, {}, {"cores", "speed"});
  key("split_speed_time", key_type::duration, false, 0.03,
      "split_by = \"speed\": how long each node times pass 1 at the start (tens of ms see a shared core)", 0.001,
      10.0);
  key("balance", key_type::string, false, std::string("auto"),
      "vocab mode, several nodes: steal (pass 1 takes the input in ranges handed out as the nodes go, so a node "
      "done first counts more: node 0 from the start, the last node from the end; parts then number by their place "
      "in the input, several per node) or split (each node counts its share of the split; one part per node); "
      "auto: steal unless shard_weights or split_by = \"speed\" fix the shares",
      {}, {}, {"auto", "steal", "split"});
  key("claim_unit", key_type::size, false, int64_t{0},
      "balance = \"steal\": the smallest range a node claims (a claim takes a quarter of the gap to the "
      "neighbouring node's front, at least this); 0 = 1/64 of a node's even share, 1-64 MiB",
      0.0, double(int64_t{1} << 40));
  key("chunk_bytes", key_type::size, false, int64_t{1} << 20,
      "largest count / vocabulary message between nodes", 4096.0, double(64 << 20));
  key("request_timeout", key_type::duration, false, 60.0, "how long a node waits for a peer's reply", 0.1,
      3600.0);
  key("hash_merge", key_type::boolean, false, true,
      "vocab mode, several shards: columns of 8-hex-digit ids that no shard spilled merge by adding counts into "
      "hash tables (the node merging a column gets the other shards' counts pushed); false: every column merges "
      "as sorted streams");
  key("threshold_merge", key_type::boolean, false, true,
      "vocab mode, several shards, min_count at least the number of shards + 1: a column merged by hashing with "
      "64Ki entries or more over the shards merges by count threshold (each node sends only its strings counted "
      "ceil(min_count / shards) times, then its counts of the others' that it did not send); the same ids, the "
      "report's distinct is then estimated; false: every entry is sent");
  key("shard_failover", key_type::boolean, false, true,
      "a node other than the first that goes down: its shards go to the other nodes (hash mode: any time before "
      "its part is written; vocab mode: before the merge begins); false: the loss stops the job");
  (void)reg.add_job_kind(
      job,
      [](const topology::cluster& c) -> expected<std::vector<topology::actor_spec>> {
        if (!c.actors.empty())
          return make_error(errc::invalid_argument,
                            "the preprocess job places its own actors; remove the [[actors]] tables");
        if (const auto w = c.job.params.get_ints("shard_weights"); !w.empty()) {
          if (w.size() != c.nodes.size())
            return make_error(errc::invalid_argument, "[job] shard_weights needs one weight per node (" +
                                                          std::to_string(c.nodes.size()) + "), got " +
                                                          std::to_string(w.size()));
          for (int64_t x : w)
            if (x < 1 || x > (int64_t{1} << 32))
              return make_error(errc::invalid_argument,
                                "[job] shard_weights must be integers in [1, 4294967296], got " + std::to_string(x));
        }
        if (c.job.params.get_string("balance", "auto") == "steal" &&
            c.job.params.get_string("categorical.mode", "vocab") == "hash")
          return make_error(errc::invalid_argument,
                            "[job] balance = \"steal\" is for vocab mode (hash mode writes each node's share of "
                            "the split in its one pass); remove it or use balance = \"split\"");
        if (c.job.params.get_string("balance", "auto") == "steal" && !c.job.params.get_ints("shard_weights").empty())
          return make_error(errc::invalid_argument,
                            "[job] balance = \"steal\" cuts the input as the nodes go and shard_weights fixes each "
                            "node's share: set one of them");
        std::vector<topology::actor_spec> v;
        for (std::size_t i = 0; i < c.nodes.size(); ++i) {
          topology::actor_spec a;
          a.name = shard_actor(static_cast<int>(i));
          a.type = "preprocess_shard";
          a.node = c.nodes[i].name;
          a.args.set("shard", static_cast<int64_t>(i));
          v.push_back(std::move(a));
        }
        {
          // The coordinator (both modes; it merges the vocabularies in vocab mode).
          topology::actor_spec a;
          a.name = vocab_actor;
          a.type = "preprocess_vocab";
          a.node = c.nodes[0].name;
          v.push_back(std::move(a));
        }
        return v;
      },
      summarize);
  topology::type_spec s{"preprocess_shard", "pre-processes one node's slice of the inputs (placed by the job)", {}};
  s.keys.push_back(key_spec{"shard", key_type::integer, false, int64_t{0}, "shard index", 0.0, {}, {}});
  (void)reg.add_actor_type(s, [](caf::actor_system& sys, const actor_env& env) {
    return sys.spawn<caf::detached>(shard, env);
  });
  topology::type_spec v{"preprocess_vocab",
                        "coordinates the shards, reassigns a lost node's shards and, in vocab mode, merges the "
                        "vocabulary counts (placed by the job)",
                        {}};
  (void)reg.add_actor_type(v, [](caf::actor_system& sys, const actor_env& env) {
    return sys.spawn<caf::detached>(vocab, env);
  });
}

}  // namespace hetflow::actors::builtin
