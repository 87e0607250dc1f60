#include "kernels/preprocess/preprocess.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>
#include <utility>

#include "kernels/preprocess/line_parser.hpp"
#include "kernels/preprocess/resources.hpp"

namespace hetflow::kernels::preprocess {
namespace fs = std::filesystem;
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// log(x + 1) for small x from a table (most Criteo integers are small); the
// same function fills it, so results are bit-identical.
struct dense_table {
  static constexpr int64_t size = 1 << 16;
  float v[size];
  dense_table() {
    for (int64_t i = 0; i < size; ++i) v[i] = dense_transform(i);
  }
};
const dense_table& dense_lut() {
  static const dense_table t;
  return t;
}
inline float dense_value(int64_t x, const dense_table& t) noexcept {
  if (x <= 0) return 0.0f;
  if (x < dense_table::size) return t.v[x];
  return dense_transform(x);
}

// A line-aligned slice of one piece.
struct block {
  int piece = 0;
  const mapped_file* file = nullptr;
  uint64_t begin = 0, end = 0;  // aligned: [begin, end) holds whole lines
};

struct piece_info {
  const mapped_file* file = nullptr;
  uint64_t begin = 0;  // aligned
  int64_t line_base = -1;  // 0-based line index of the first line; -1 = not computed
  uint64_t lines_seen = 0;  // lines of earlier blocks (serial stage)
};

std::vector<block> cut_blocks(const input_set& in, const shard_plan& shard,
                              std::vector<piece_info>& pieces, std::size_t block_bytes) {
  std::vector<block> blocks;
  for (std::size_t pi = 0; pi < shard.pieces.size(); ++pi) {
    const auto& p = shard.pieces[pi];
    const mapped_file* f = in.files[p.file].get();
    uint64_t b = align_to_line(f->data(), f->size(), p.begin);
    uint64_t e = align_to_line(f->data(), f->size(), p.end);
    pieces.push_back({f, b, -1, 0});
    while (b < e) {
      uint64_t nb = b + block_bytes >= e ? e : align_to_line(f->data(), f->size(), b + block_bytes);
      if (nb > e) nb = e;
      blocks.push_back({static_cast<int>(pi), f, b, nb});
      b = nb;
    }
  }
  return blocks;
}

// Calls f(line, index_in_block, truncated) for each line of the block.
template <class F>
uint64_t for_each_line(const block& b, F&& f) {
  const char* p = b.file->data() + b.begin;
  const char* end = b.file->data() + b.end;
  uint64_t n = 0;
  while (p < end) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<std::size_t>(end - p)));
    if (nl) {
      f(std::string_view(p, static_cast<std::size_t>(nl - p)), n++, false);
      p = nl + 1;
    } else {
      f(std::string_view(p, static_cast<std::size_t>(end - p)), n++, true);
      break;
    }
  }
  return n;
}

struct hit {
  uint64_t line_in_block = 0;
  malformed_kind kind = malformed_kind::none;
  std::string detail;  // only for the first max_examples of a block
};

// Classifies a line; kind none when it parsed.
inline parse_error check_line(std::string_view line, bool truncated, std::size_t max_field,
                              parsed_line& pl) {
  if (truncated) return {malformed_kind::truncated, -1};
  return parse_criteo_line(line, max_field, pl);
}

// The serial stage's view of malformed lines: numbering and the report.
class malformed_sink {
public:
  malformed_sink(std::vector<piece_info>& pieces, const preprocess_options& opt)
      : pieces_(pieces), opt_(opt) {}

  // Takes a block's hits in order; returns an error under policy fail.
  status take(const block& b, uint64_t lines, std::vector<hit>& hits) {
    piece_info& pi = pieces_[b.piece];
    for (auto& h : hits) {
      ++report.total;
      ++report.by_kind[static_cast<int>(h.kind)];
      if (report.examples.size() < opt_.max_examples || opt_.policy == malformed_policy::fail) {
        if (pi.line_base < 0) pi.line_base = static_cast<int64_t>(count_lines_before(pi.file->data(), pi.begin));
        malformed_example ex;
        ex.file = pi.file->path();
        ex.line = static_cast<uint64_t>(pi.line_base) + pi.lines_seen + h.line_in_block + 1;
        ex.kind = h.kind;
        ex.detail = std::move(h.detail);
        if (opt_.policy == malformed_policy::fail)
          return make_error(errc::parse_error,
                            ex.to_string() + " (malformed = \"fail\"; use \"skip\" to drop such lines)");
        report.examples.push_back(std::move(ex));
      }
    }
    pi.lines_seen += lines;
    return {};
  }

  malformed_report report;

private:
  std::vector<piece_info>& pieces_;
  const preprocess_options& opt_;
};

// Chooses the degree of parallelism again at most every 0.5 s.
class dop_governor {
public:
  dop_governor(const preprocess_options& opt, uint64_t per_worker) : opt_(opt), per_worker_(per_worker) {
    dop_ = choose(0);
  }
  int current() const { return dop_; }
  int update() {
    if (opt_.parallelism > 0) return dop_;
    if (seconds_since(last_) < 0.5) return dop_;
    dop_ = choose(dop_);
    return dop_;
  }

private:
  int choose(int busy) {
    last_ = clock_type::now();
    auto r = probe_resources();
    int max_workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return choose_parallelism(r, opt_.parallelism, busy, per_worker_, 0, max_workers);
  }
  const preprocess_options& opt_;
  uint64_t per_worker_;
  int dop_ = 1;
  clock_type::time_point last_;
};

constexpr int blocks_per_worker = 4;

status stopped() { return make_error(errc::cancelled, "stopped"); }

}  // namespace

// ---- input_set -----------------------------------------------------------------

expected<input_set> input_set::open(const std::vector<std::string>& paths) {
  input_set s;
  for (auto& p : paths) {
    auto m = mapped_file::open(p);
    if (!m) return m.error();
    s.files.push_back(std::move(*m));
  }
  return s;
}

std::vector<uint64_t> input_set::sizes() const {
  std::vector<uint64_t> v;
  for (auto& f : files) v.push_back(f->size());
  return v;
}

std::string part_file_name(int index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "part-%05d.bin", index);
  return buf;
}

// ---- pass 1 --------------------------------------------------------------------

struct shard_counts::impl {
  std::array<string_key_map<uint64_t>, sparse_columns> tables;
  std::array<std::vector<std::string>, sparse_columns> runs;  // spilled run files
  std::array<std::optional<count_entries>, sparse_columns> sorted;  // tables, sorted at the end
  std::string spill_dir;
  int spill_seq = 0;

  uint64_t table_bytes() const {
    uint64_t b = 0;
    for (auto& t : tables) b += t.memory_bytes();
    return b;
  }

  status spill_column(int c) {
    if (spill_dir.empty())
      return make_error(errc::out_of_memory,
                        "vocabulary counts exceed the memory cap and no spill directory is set");
    std::error_code ec;
    fs::create_directories(spill_dir, ec);
    char name[64];
    std::snprintf(name, sizeof name, "/c%02d-%06d.run", c, spill_seq++);
    std::string path = spill_dir + name;
    auto entries = sorted_entries(tables[c]);
    tables[c].clear_and_release();
    if (auto s = write_run_file(path, entries); !s.ok()) return s;
    runs[c].push_back(path);
    return {};
  }

  // Spills the largest columns until the tables hold at most cap / 2.
  status enforce_cap(uint64_t cap, uint64_t& spills) {
    uint64_t total = table_bytes();
    if (total <= cap) return {};
    while (total > cap / 2) {
      int big = 0;
      for (int c = 1; c < sparse_columns; ++c)
        if (tables[c].memory_bytes() > tables[big].memory_bytes()) big = c;
      if (tables[big].size() == 0) break;
      if (auto s = spill_column(big); !s.ok()) return s;
      ++spills;
      total = table_bytes();
    }
    return {};
  }

  ~impl() {
    std::error_code ec;
    for (auto& rs : runs)
      for (auto& r : rs) fs::remove(r, ec);
  }
};

shard_counts::shard_counts() : impl_(std::make_unique<impl>()) {}
shard_counts::~shard_counts() = default;
shard_counts::shard_counts(shard_counts&&) noexcept = default;
shard_counts& shard_counts::operator=(shard_counts&&) noexcept = default;

std::unique_ptr<count_stream> shard_counts::column_stream(int c) {
  std::vector<std::unique_ptr<count_stream>> parts;
  for (auto& r : impl_->runs[c]) parts.push_back(file_stream(r));
  count_entries rest;
  if (impl_->sorted[c]) {
    rest = std::move(*impl_->sorted[c]);
    impl_->sorted[c].reset();
  } else {
    rest = sorted_entries(impl_->tables[c]);
  }
  impl_->tables[c].clear_and_release();
  parts.push_back(memory_stream(std::move(rest)));
  if (parts.size() == 1) return std::move(parts[0]);
  return merged_stream(std::move(parts));
}

namespace {

struct count_block_result {
  uint64_t lines = 0;
  uint64_t good = 0;
  std::vector<hit> hits;
  std::array<std::vector<small_key>, sparse_columns> small;
  std::array<std::vector<std::string_view>, sparse_columns> longs;
};

}  // namespace

expected<shard_counts> count_shard(const input_set& in, const shard_plan& shard,
                                   const preprocess_options& opt) {
  auto t0 = clock_type::now();
  shard_counts out;
  out.impl_->spill_dir = opt.spill_dir;
  std::vector<piece_info> pieces;
  auto blocks = cut_blocks(in, shard, pieces, opt.block_bytes);
  uint64_t total_bytes = 0;
  for (auto& b : blocks) total_bytes += b.end - b.begin;

  uint64_t cap = opt.memory_cap;
  if (cap == 0) cap = std::max<uint64_t>(uint64_t{64} << 20, probe_resources().free_memory() / 2);
  // A block's parsed keys take about 3.5x its bytes; blocks_per_worker at once.
  dop_governor gov(opt, opt.block_bytes * 5 * blocks_per_worker);
  malformed_sink sink(pieces, opt);
  std::vector<count_block_result> res;
  uint64_t done_bytes = 0;
  std::size_t next = 0;
  while (next < blocks.size()) {
    if (opt.stop && opt.stop->load()) return stopped();
    int dop = gov.update();
    std::size_t seg = std::min(blocks.size() - next, static_cast<std::size_t>(dop * blocks_per_worker));
    res.resize(seg);
    tbb::task_arena arena(dop);
    arena.execute([&] {
      tbb::parallel_for(std::size_t{0}, seg, [&](std::size_t i) {
        auto& r = res[i];
        r.lines = r.good = 0;
        r.hits.clear();
        for (auto& v : r.small) v.clear();
        for (auto& v : r.longs) v.clear();
        parsed_line pl;
        const block& b = blocks[next + i];
        r.lines = for_each_line(b, [&](std::string_view line, uint64_t idx, bool truncated) {
          auto e = check_line(line, truncated, opt.max_field_bytes, pl);
          if (e) {
            // Details are computed in pass 2; pass 1 only needs them to fail.
            hit h{idx, e.kind, {}};
            if (opt.policy == malformed_policy::fail) h.detail = describe_parse_error(line, e);
            r.hits.push_back(std::move(h));
            return;
          }
          ++r.good;
          for (int c = 0; c < sparse_columns; ++c) {
            std::string_view s = pl.sparse[c];
            if (s.size() <= small_key_max) r.small[c].push_back(make_small_key(s));
            else r.longs[c].push_back(s);
          }
        });
      });
      tbb::parallel_for(0, sparse_columns, [&](int c) {
        auto& t = out.impl_->tables[c];
        for (std::size_t i = 0; i < seg; ++i) {
          const auto& keys = res[i].small[c];
          const std::size_t nk = keys.size();
          for (std::size_t k = 0; k < nk; ++k) {
            if (k + 8 < nk) t.prefetch(keys[k + 8]);
            ++t[keys[k]];
          }
          for (auto s : res[i].longs[c]) {
            auto& cnt = t[s];
            if (cnt == 0) t.note_long_bytes(s.size());
            ++cnt;
          }
        }
      });
    });
    for (std::size_t i = 0; i < seg; ++i) {
      if (opt.policy == malformed_policy::fail) {
        if (auto s = sink.take(blocks[next + i], res[i].lines, res[i].hits); !s.ok()) return s;
      }
      out.rows += res[i].good;
      done_bytes += blocks[next + i].end - blocks[next + i].begin;
    }
    next += seg;
    out.peak_table_bytes = std::max<uint64_t>(out.peak_table_bytes, out.impl_->table_bytes());
    if (auto s = out.impl_->enforce_cap(cap, out.spills); !s.ok()) return s;
    if (opt.on_progress) {
      preprocess_progress p;
      p.pass = "count";
      p.bytes_done = done_bytes;
      p.bytes_total = total_bytes;
      p.rows = out.rows;
      p.parallelism = dop;
      p.memory = current_rss();
      p.table_bytes = out.impl_->table_bytes();
      opt.on_progress(p);
    }
  }
  // Sort every column's table now, in parallel (the merge then only streams).
  {
    tbb::task_arena arena(gov.update());
    arena.execute([&] {
      tbb::parallel_for(0, sparse_columns, [&](int c) {
        out.impl_->sorted[c] = sorted_entries(out.impl_->tables[c]);
        out.impl_->tables[c].clear_and_release();
      });
    });
  }
  out.seconds = seconds_since(t0);
  return out;
}

// ---- pass 2 --------------------------------------------------------------------

namespace {

struct apply_block_result {
  uint64_t lines = 0;
  std::vector<hit> hits;
  std::vector<criteo_record> records;
};

status write_all(int fd, const void* data, std::size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return make_error(errc::io_error, "cannot write " + path + ": " + std::strerror(errno));
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return {};
}

}  // namespace

expected<shard_result> apply_shard(const input_set& in, const shard_plan& shard,
                                   const vocabulary* vocab, const std::string& out_path,
                                   const preprocess_options& opt) {
  auto t0 = clock_type::now();
  if (!vocab && opt.mode == categorical_mode::vocab)
    return make_error(errc::invalid_argument, "vocab mode needs a vocabulary");
  if (opt.mode == categorical_mode::hash && opt.hash_range == 0)
    return make_error(errc::invalid_argument, "hash range must be positive");
  shard_result out;
  std::vector<piece_info> pieces;
  auto blocks = cut_blocks(in, shard, pieces, opt.block_bytes);
  uint64_t total_bytes = 0;
  for (auto& b : blocks) total_bytes += b.end - b.begin;

  std::string tmp = out_path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return make_error(errc::io_error, "cannot create " + tmp + ": " + std::strerror(errno));
  auto fail = [&](status s) -> expected<shard_result> {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };

  const dense_table& lut = dense_lut();
  dop_governor gov(opt, opt.block_bytes * 3 * blocks_per_worker);
  malformed_sink sink(pieces, opt);
  std::vector<apply_block_result> res;
  std::size_t next = 0;
  int dop = gov.current();
  while (next < blocks.size()) {
    if (opt.stop && opt.stop->load()) return fail(stopped());
    dop = gov.update();
    std::size_t seg = std::min(blocks.size() - next, static_cast<std::size_t>(dop * blocks_per_worker));
    res.resize(seg);
    tbb::task_arena arena(dop);
    arena.execute([&] {
      tbb::parallel_for(std::size_t{0}, seg, [&](std::size_t i) {
        auto& r = res[i];
        const block& b = blocks[next + i];
        r.hits.clear();
        r.records.clear();
        r.records.reserve((b.end - b.begin) / 64 + 16);
        parsed_line pl;
        r.lines = for_each_line(b, [&](std::string_view line, uint64_t idx, bool truncated) {
          auto e = check_line(line, truncated, opt.max_field_bytes, pl);
          if (e) {
            hit h{idx, e.kind, {}};
            if (r.hits.size() < opt.max_examples || opt.policy == malformed_policy::fail)
              h.detail = describe_parse_error(line, e);
            r.hits.push_back(std::move(h));
            return;
          }
          criteo_record& rec = r.records.emplace_back();
          rec.label = pl.label;
          for (int j = 0; j < dense_columns; ++j) rec.dense[j] = dense_value(pl.dense[j], lut);
          if (vocab) {
            // Keys first and their slots prefetched, so the 26 (mostly
            // cache-missing) lookups of a row overlap.
            small_key keys[sparse_columns];
            for (int c = 0; c < sparse_columns; ++c)
              if (pl.sparse[c].size() <= small_key_max) {
                keys[c] = make_small_key(pl.sparse[c]);
                vocab->columns[c].prefetch(keys[c]);
              }
            for (int c = 0; c < sparse_columns; ++c)
              rec.sparse[c] = pl.sparse[c].size() <= small_key_max ? vocab->columns[c].lookup(keys[c])
                                                                   : vocab->columns[c].lookup(pl.sparse[c]);
          } else {
            for (int c = 0; c < sparse_columns; ++c) rec.sparse[c] = hash_id(pl.sparse[c], opt.hash_range);
          }
        });
      });
    });
    for (std::size_t i = 0; i < seg; ++i) {
      const block& b = blocks[next + i];
      if (auto s = sink.take(b, res[i].lines, res[i].hits); !s.ok()) return fail(s);
      auto& recs = res[i].records;
      if (auto s = write_all(fd, recs.data(), recs.size() * sizeof(criteo_record), tmp); !s.ok())
        return fail(s);
      out.rows += recs.size();
      out.lines += res[i].lines;
      out.bytes += b.end - b.begin;
    }
    next += seg;
    if (opt.on_progress) {
      preprocess_progress p;
      p.pass = "apply";
      p.bytes_done = out.bytes;
      p.bytes_total = total_bytes;
      p.rows = out.rows;
      p.parallelism = dop;
      p.memory = current_rss();
      opt.on_progress(p);
    }
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return make_error(errc::io_error, "cannot write " + tmp + ": " + std::strerror(errno));
  }
  if (::rename(tmp.c_str(), out_path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return make_error(errc::io_error, "cannot rename " + tmp + " to " + out_path + ": " + std::strerror(errno));
  }
  out.malformed = std::move(sink.report);
  out.seconds = seconds_since(t0);
  out.parallelism = dop;
  return out;
}

// ---- vocabulary files ------------------------------------------------------------

expected<vocab_file_writer> vocab_file_writer::open(const std::string& dir, int column) {
  vocab_file_writer w;
  w.path_ = dir + "/" + vocab_file_name(column);
  w.f_ = std::fopen((w.path_ + ".tmp").c_str(), "wb");
  if (!w.f_) return make_error(errc::io_error, "cannot create " + w.path_ + ".tmp: " + std::strerror(errno));
  std::setvbuf(w.f_, nullptr, _IOFBF, 1 << 20);
  return w;
}

vocab_file_writer::vocab_file_writer(vocab_file_writer&& o) noexcept
    : f_(std::exchange(o.f_, nullptr)), path_(std::move(o.path_)), failed_(o.failed_) {}

vocab_file_writer::~vocab_file_writer() {
  if (f_) {
    std::fclose(f_);
    std::remove((path_ + ".tmp").c_str());
  }
}

void vocab_file_writer::add(std::string_view s, uint64_t count) {
  char num[32];
  int n = std::snprintf(num, sizeof num, "\t%llu\n", static_cast<unsigned long long>(count));
  if (std::fwrite(s.data(), 1, s.size(), f_) != s.size() ||
      std::fwrite(num, 1, static_cast<std::size_t>(n), f_) != static_cast<std::size_t>(n))
    failed_ = true;
}

status vocab_file_writer::close() {
  bool ok = std::fclose(std::exchange(f_, nullptr)) == 0 && !failed_;
  if (!ok || std::rename((path_ + ".tmp").c_str(), path_.c_str()) != 0) {
    std::remove((path_ + ".tmp").c_str());
    return make_error(errc::io_error, "cannot write " + path_ + " (disk full?)");
  }
  return {};
}

// ---- the local driver ------------------------------------------------------------

expected<local_result> preprocess_local(const std::vector<std::string>& inputs,
                                        const std::string& output_dir, int shards,
                                        const preprocess_options& opt_in) {
  auto t0 = clock_type::now();
  std::error_code ec;
  fs::create_directories(output_dir, ec);
  if (ec) return make_error(errc::io_error, "cannot create " + output_dir + ": " + ec.message());
  auto in = input_set::open(inputs);
  if (!in) return in.error();
  auto plan = plan_shards(in->sizes(), shards);
  local_result out;
  out.parts = static_cast<int>(plan.size());
  std::unique_ptr<vocabulary> vocab;
  if (opt_in.mode == categorical_mode::vocab) {
    std::vector<shard_counts> counts;
    for (std::size_t i = 0; i < plan.size(); ++i) {
      preprocess_options opt = opt_in;
      if (opt.spill_dir.empty()) opt.spill_dir = output_dir + "/.spill";
      opt.spill_dir += "/shard-" + std::to_string(i);
      auto c = count_shard(*in, plan[i], opt);
      if (!c) return c.error();
      counts.push_back(std::move(*c));
    }
    vocab = std::make_unique<vocabulary>();
    for (int c = 0; c < sparse_columns; ++c) {
      std::vector<std::unique_ptr<count_stream>> streams;
      std::vector<count_stream*> raw;
      for (auto& sc : counts) {
        streams.push_back(sc.column_stream(c));
        raw.push_back(streams.back().get());
      }
      auto w = vocab_file_writer::open(output_dir, c);
      if (!w) return w.error();
      auto& col = vocab->columns[c];
      auto st = merge_column(raw, opt_in.min_count, [&](std::string_view s, uint64_t n) {
        col.add(s);
        w->add(s, n);
      });
      if (!st) return st.error();
      if (auto s = w->close(); !s.ok()) return s;
      out.columns[c] = *st;
    }
    counts.clear();  // removes the run files
    std::string spill_root = opt_in.spill_dir.empty() ? output_dir + "/.spill" : opt_in.spill_dir;
    for (std::size_t i = 0; i < plan.size(); ++i) fs::remove(spill_root + "/shard-" + std::to_string(i), ec);
    if (opt_in.spill_dir.empty()) fs::remove(spill_root, ec);
  }
  for (std::size_t i = 0; i < plan.size(); ++i) {
    auto r = apply_shard(*in, plan[i], vocab.get(), output_dir + "/" + part_file_name(static_cast<int>(i)), opt_in);
    if (!r) return r.error();
    out.rows += r->rows;
    out.malformed.merge(r->malformed, opt_in.max_examples);
  }
  out.seconds = seconds_since(t0);
  return out;
}

}  // namespace hetflow::kernels::preprocess
