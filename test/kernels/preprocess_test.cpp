// kernels/preprocess: output equals a straightforward reference implementation
// (std::map, std::stoll, std::log; written here, sharing no code with the
// library) on generated files, for 1, 2 and 4 shards, vocab and hash modes,
// with min_count; spilling under a tiny memory cap; the fast paths (8-hex-digit
// keys, the fast line parser) against the generic code and the reference on
// mixed and mutated input; count chunks on the wire; shard plans; the
// resource probe on fake /proc and cgroup trees; generator determinism.
#define BOOST_TEST_MODULE preprocess
#include <boost/test/unit_test.hpp>

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test/scratch_dir.hpp"
#include "kernels/preprocess/count_stream.hpp"
#include "kernels/preprocess/hex_key.hpp"
#include "kernels/preprocess/input_split.hpp"
#include "kernels/preprocess/line_parser.hpp"
#include "kernels/preprocess/preprocess.hpp"
#include "kernels/preprocess/resources.hpp"
#include "kernels/preprocess/huge_memory.hpp"
#include "kernels/preprocess/synthetic_criteo.hpp"

namespace fs = std::filesystem;
namespace pp = hetflow::kernels::preprocess;

namespace {

const fs::path& scratch_root() { return hetflow::test::scratch_root("hetflow-pp-test"); }

fs::path scratch(const std::string& name) {
  fs::path p = scratch_root() / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_all(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary);
  out << s;
}

// ---- the reference ----------------------------------------------------------------

struct ref_options {
  bool vocab = true;
  uint64_t min_count = 1;
  uint64_t range = 1000;
  std::size_t max_field = 64;
};

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> f;
  std::string cur;
  for (char c : line) {
    if (c == '\t') {
      f.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  f.push_back(cur);
  return f;
}

bool ref_utf8(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    if (n < 0 || i + n >= s.size()) return false;  // a bad lead byte or a cut sequence
    uint32_t cp = n == 0 ? c : n == 1 ? (c & 0x1f) : n == 2 ? (c & 0x0f) : (c & 0x07);
    for (int k = 1; k <= n; ++k) {
      unsigned char cc = s[i + k];
      if ((cc >> 6) != 2) return false;
      cp = cp << 6 | (cc & 0x3f);
    }
    if (n == 1 && cp < 0x80) return false;
    if (n == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) return false;
    if (n == 3 && (cp < 0x10000 || cp > 0x10ffff)) return false;
    i += n + 1;
  }
  return true;
}

bool ref_int(const std::string& f) {
  std::size_t i = (!f.empty() && f[0] == '-') ? 1 : 0;
  if (f.size() - i < 1 || f.size() - i > 18) return false;
  for (; i < f.size(); ++i)
    if (f[i] < '0' || f[i] > '9') return false;
  return true;
}

// "" if the line is good, else the kind's name.
std::string ref_check(const std::string& line, bool has_newline, std::size_t max_field) {
  if (!has_newline) return "truncated";
  if (!ref_utf8(line)) return "invalid_utf8";
  auto f = split_tabs(line);
  if (f.size() != 40) return "field_count";
  for (std::size_t i = 0; i < f.size(); ++i) {
    if (f[i].size() > max_field) return "field_too_long";
    if (i <= 13 && !f[i].empty()) {
      if (!ref_int(f[i])) return "bad_integer";
      if (i == 0 && (std::stoll(f[i]) < INT32_MIN || std::stoll(f[i]) > INT32_MAX)) return "bad_integer";
    }
  }
  return "";
}

struct ref_bad {
  std::string file;
  uint64_t line;
  std::string kind;
};

struct ref_output {
  std::string records;  // concatenated 160-byte records
  std::vector<ref_bad> bad;
  std::vector<std::vector<std::string>> vocab;  // per column, in id order
};

ref_output reference(const std::vector<std::string>& files, const ref_options& o) {
  std::vector<std::vector<std::string>> good;  // fields of good lines
  ref_output out;
  for (auto& file : files) {
    std::string text = read_all(file);
    std::size_t pos = 0;
    uint64_t lineno = 0;
    while (pos < text.size()) {
      std::size_t nl = text.find('\n', pos);
      bool has_nl = nl != std::string::npos;
      std::string line = text.substr(pos, has_nl ? nl - pos : std::string::npos);
      pos = has_nl ? nl + 1 : text.size();
      ++lineno;
      std::string kind = ref_check(line, has_nl, o.max_field);
      if (!kind.empty()) {
        out.bad.push_back({file, lineno, kind});
        continue;
      }
      good.push_back(split_tabs(line));
    }
  }
  std::vector<std::map<std::string, int32_t>> ids(26);
  if (o.vocab) {
    for (int c = 0; c < 26; ++c) {
      std::map<std::string, uint64_t> counts;
      for (auto& f : good) ++counts[f[14 + c]];
      std::vector<std::string> kept;
      for (auto& [s, n] : counts)
        if (n >= o.min_count) {
          ids[c][s] = static_cast<int32_t>(kept.size());
          kept.push_back(s);
        }
      out.vocab.push_back(kept);
    }
  }
  for (auto& f : good) {
    int32_t label = f[0].empty() ? 0 : static_cast<int32_t>(std::stoll(f[0]));
    out.records.append(reinterpret_cast<const char*>(&label), 4);
    for (int j = 1; j <= 13; ++j) {
      long long x = f[j].empty() ? 0 : std::stoll(f[j]);
      if (x < 0) x = 0;
      float v = static_cast<float>(std::log(static_cast<double>(x) + 1.0));
      out.records.append(reinterpret_cast<const char*>(&v), 4);
    }
    for (int c = 0; c < 26; ++c) {
      const std::string& s = f[14 + c];
      int32_t id;
      if (o.vocab) {
        auto it = ids[c].find(s);
        id = it == ids[c].end() ? static_cast<int32_t>(ids[c].size()) : it->second;
      } else {
        uint64_t h = 14695981039346656037ull;
        for (unsigned char ch : s) {
          h ^= ch;
          h *= 1099511628211ull;
        }
        id = static_cast<int32_t>(h % o.range);
      }
      out.records.append(reinterpret_cast<const char*>(&id), 4);
    }
  }
  return out;
}

std::string concat_parts(const fs::path& dir, int parts) {
  std::string all;
  for (int i = 0; i < parts; ++i) {
    fs::path p = dir / pp::part_file_name(i);
    BOOST_REQUIRE_MESSAGE(fs::exists(p), p.string() + " missing");
    all += read_all(p);
  }
  BOOST_CHECK(!fs::exists(dir / pp::part_file_name(parts)));
  return all;
}

// First differing record, for a readable failure.
std::string first_difference(const std::string& a, const std::string& b) {
  if (a.size() != b.size())
    return "sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size()) + " bytes";
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return "record " + std::to_string(i / 160) + " byte " + std::to_string(i % 160);
  return "";
}

struct generated {
  std::vector<std::string> files;
};

// Two generated files (the second with a truncated-free odd size) plus
// cross-file shard boundaries.
const generated& generated_inputs() {
  static generated g = [] {
    generated g;
    fs::path d = scratch("inputs");
    pp::synthetic_options o;
    o.rows = 12000;
    o.seed = 42;
    BOOST_REQUIRE(pp::write_synthetic_criteo((d / "a.tsv").string(), o).ok());
    o.rows = 7001;
    o.seed = 43;
    BOOST_REQUIRE(pp::write_synthetic_criteo((d / "b.tsv").string(), o).ok());
    g.files = {(d / "a.tsv").string(), (d / "b.tsv").string()};
    return g;
  }();
  return g;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(preprocess_output)

BOOST_AUTO_TEST_CASE(matches_reference_all_shards_and_modes) {
  const auto& in = generated_inputs();
  struct mode_case {
    bool vocab;
    uint64_t min_count;
    uint64_t range;
  };
  for (mode_case m : {mode_case{true, 1, 0}, mode_case{true, 3, 0}, mode_case{false, 0, 1000},
                      mode_case{false, 0, 1u << 20}}) {
    ref_options ro;
    ro.vocab = m.vocab;
    ro.min_count = m.min_count;
    ro.range = m.range;
    auto ref = reference(in.files, ro);
    BOOST_REQUIRE_EQUAL(ref.records.size(), (12000 + 7001) * 160u);
    for (int shards : {1, 2, 4}) {
      for (std::size_t block : {std::size_t{1} << 20, std::size_t{4096}}) {
        // Several shards: columns merged by hashing (the default) or all as
        // sorted streams; block 4096 takes the latter.
        const bool hash_merge = block != 4096;
        BOOST_TEST_CONTEXT("vocab " << m.vocab << " min_count " << m.min_count << " range " << m.range
                                    << " shards " << shards << " block " << block << " hash_merge " << hash_merge) {
          pp::preprocess_options o;
          o.mode = m.vocab ? pp::categorical_mode::vocab : pp::categorical_mode::hash;
          o.min_count = m.min_count;
          o.hash_range = m.range;
          o.block_bytes = block;
          o.hash_merge = hash_merge;
          o.parallelism = 2;
          fs::path out = scratch("out");
          auto r = pp::preprocess_local(in.files, out.string(), shards, o);
          BOOST_REQUIRE_MESSAGE(r.has_value(), (r ? std::string() : r.error().to_string()));
          BOOST_CHECK_EQUAL(r->rows, 19001u);
          BOOST_CHECK_EQUAL(r->malformed.total, 0u);
          BOOST_CHECK_EQUAL(r->parts, shards);
          std::string got = concat_parts(out, shards);
          BOOST_CHECK_MESSAGE(got == ref.records, "records differ: " + first_difference(got, ref.records));
          if (m.vocab) {
            for (int c = 0; c < 26; ++c) {
              std::ifstream vf(out / pp::vocab_file_name(c));
              std::string line;
              std::vector<std::string> strings;
              while (std::getline(vf, line)) strings.push_back(line.substr(0, line.rfind('\t')));
              BOOST_CHECK_MESSAGE(strings == ref.vocab[c], "vocabulary of column " << c << " differs");
              BOOST_CHECK_EQUAL(r->columns[c].kept, ref.vocab[c].size());
            }
            // The vocabulary reads back and maps like the one used.
            auto v = pp::read_vocabulary(out.string());
            BOOST_REQUIRE(v.has_value());
            BOOST_CHECK_EQUAL(v->columns[2].oov_id(), static_cast<int32_t>(ref.vocab[2].size()));
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(ranges_claimed_while_counting_give_the_reference_output) {
  // balance = "steal": the shards count the ranges range_claims hands out
  // in a random order (later shards claim more often, as faster nodes
  // would); the parts, named in input order, hold the reference's records.
  const auto& in = generated_inputs();
  for (uint64_t min_count : {uint64_t{1}, uint64_t{3}}) {
    ref_options ro;
    ro.vocab = true;
    ro.min_count = min_count;
    auto ref = reference(in.files, ro);
    for (int shards : {2, 3, 4}) {
      for (uint64_t seed : {1, 2, 3}) {
        for (std::size_t block : {std::size_t{1} << 20, std::size_t{4096}}) {
          BOOST_TEST_CONTEXT("min_count " << min_count << " shards " << shards << " seed " << seed << " block " << block) {
            pp::preprocess_options o;
            o.min_count = min_count;
            o.block_bytes = block;
            o.hash_merge = block != 4096;
            o.parallelism = 2;
            o.steal_unit = 64 << 10;
            o.steal_seed = seed;
            fs::path out = scratch("steal");
            auto r = pp::preprocess_local(in.files, out.string(), shards, o);
            BOOST_REQUIRE_MESSAGE(r.has_value(), (r ? std::string() : r.error().to_string()));
            BOOST_CHECK_EQUAL(r->rows, 19001u);
            BOOST_CHECK_GT(r->parts, shards);  // backward claims start parts of their own
            std::string got = concat_parts(out, r->parts);
            BOOST_CHECK_MESSAGE(got == ref.records, "records differ: " + first_difference(got, ref.records));
            BOOST_CHECK(!fs::exists(out / pp::part_file_name(r->parts)));
            for (auto& e : fs::directory_iterator(out))
              BOOST_CHECK_MESSAGE(e.path().extension() != ".tmp", "left " << e.path());
            for (int c = 0; c < 26; ++c) BOOST_CHECK_EQUAL(r->columns[c].kept, ref.vocab[c].size());
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(blocks_denser_than_the_ones_before_are_parsed_again_with_room) {
  // Pass 1 keeps a block's row keys at the stride of the densest block so
  // far: long lines first, then the shortest good lines (a label and 39
  // tabs), so later blocks hold far more rows than that stride.
  fs::path d = scratch("denser");
  {
    std::ofstream f(d / "in.tsv", std::ios::binary);
    for (int i = 0; i < 600; ++i) {
      f << (i % 2) << '\t' << i;
      for (int j = 2; j <= 13; ++j) f << '\t' << j;
      for (int c = 0; c < 26; ++c) f << '\t' << std::string(40, char('a' + (i + c) % 26)) << (i % 7);
      f << '\n';
    }
    for (int i = 0; i < 9000; ++i) {
      f << (i % 2);
      for (int k = 1; k < 40; ++k) f << '\t';
      f << '\n';
    }
  }
  ref_options ro;
  ro.vocab = true;
  auto ref = reference({(d / "in.tsv").string()}, ro);
  BOOST_REQUIRE_EQUAL(ref.records.size(), 9600u * 160u);
  for (int shards : {1, 2}) {
    for (int par : {1, 2}) {
      BOOST_TEST_CONTEXT("shards " << shards << " parallelism " << par) {
        pp::preprocess_options o;
        o.block_bytes = 16 << 10;
        o.parallelism = par;
        fs::path out = scratch("denser-out");
        auto r = pp::preprocess_local({(d / "in.tsv").string()}, out.string(), shards, o);
        BOOST_REQUIRE_MESSAGE(r.has_value(), (r ? std::string() : r.error().to_string()));
        BOOST_CHECK_EQUAL(r->rows, 9600u);
        std::string got = concat_parts(out, shards);
        BOOST_CHECK_MESSAGE(got == ref.records, "records differ: " + first_difference(got, ref.records));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(min_count_maps_rare_strings_to_oov) {
  fs::path d = scratch("oov");
  // C1 values: "a" x3, "b" x2, "" x1; min_count 2 keeps "a" and "b" (ids 0, 1); "" -> OOV 2.
  std::string base = "0";
  for (int i = 0; i < 13; ++i) base += "\t1";
  auto line = [&](const std::string& c1) {
    std::string l = base + "\t" + c1;
    for (int i = 1; i < 26; ++i) l += "\tx";
    return l + "\n";
  };
  write_all(d / "in.tsv", line("a") + line("b") + line("a") + line("") + line("b") + line("a"));
  pp::preprocess_options o;
  o.min_count = 2;
  auto r = pp::preprocess_local({(d / "in.tsv").string()}, (d / "out").string(), 1, o);
  BOOST_REQUIRE(r.has_value());
  std::string bin = read_all(d / "out" / pp::part_file_name(0));
  BOOST_REQUIRE_EQUAL(bin.size(), 6 * 160u);
  std::vector<int32_t> c1;
  for (int i = 0; i < 6; ++i) {
    int32_t v;
    std::memcpy(&v, bin.data() + i * 160 + 4 + 13 * 4, 4);
    c1.push_back(v);
  }
  BOOST_CHECK((c1 == std::vector<int32_t>{0, 1, 0, 2, 1, 0}));
  BOOST_CHECK_EQUAL(r->columns[0].distinct, 3u);
  BOOST_CHECK_EQUAL(r->columns[0].kept, 2u);
  BOOST_CHECK_EQUAL(read_all(d / "out" / pp::vocab_file_name(0)), "a\t3\nb\t2\n");
  // Dense: 1 -> log(2).
  float f;
  std::memcpy(&f, bin.data() + 4, 4);
  BOOST_CHECK_EQUAL(f, static_cast<float>(std::log(2.0)));
}

BOOST_AUTO_TEST_CASE(spilling_under_a_tiny_memory_cap_gives_the_same_counts) {
  const auto& in = generated_inputs();
  auto files = pp::input_set::open(in.files);
  BOOST_REQUIRE(files.has_value());
  auto plan = pp::plan_shards(files->sizes(), 1);
  pp::preprocess_options big;
  big.parallelism = 2;
  pp::preprocess_options tiny = big;
  tiny.memory_cap = 64 << 10;
  tiny.block_bytes = 64 << 10;
  tiny.spill_dir = scratch("spill").string();
  {
    auto a = pp::count_shard(*files, plan[0], big);
    auto b = pp::count_shard(*files, plan[0], tiny);
    BOOST_REQUIRE(a.has_value() && b.has_value());
    BOOST_CHECK_EQUAL(a->spills, 0u);
    BOOST_CHECK_GT(b->spills, 10u);
    BOOST_CHECK_LT(b->peak_table_bytes, 4u << 20);
    for (int c = 0; c < 26; ++c) {
      auto sa = a->column_stream(c), sb = b->column_stream(c);
      std::string_view x, y;
      uint64_t nx, ny;
      uint64_t n = 0;
      for (;;) {
        bool ha = sa->next(x, nx);
        std::string xs(x);
        bool hb = sb->next(y, ny);
        BOOST_REQUIRE_EQUAL(ha, hb);
        if (!ha) break;
        BOOST_REQUIRE_EQUAL(xs, std::string(y));
        BOOST_REQUIRE_EQUAL(nx, ny);
        ++n;
      }
      BOOST_CHECK(sb->error().ok());
      BOOST_CHECK_GT(n, 0u);
    }
  }
  // The run files go with the counts.
  BOOST_CHECK(fs::is_empty(tiny.spill_dir));
}

BOOST_AUTO_TEST_CASE(a_sole_shard_dropping_rare_strings_gives_the_same_bytes_and_counts) {
  // drop_below (a job's only shard) leaves strings rarer than min_count out
  // of the sort and the merge. Everything the job writes or reports must stay
  // as when every string is streamed; a spilled column (partial counts in its
  // table) must drop nothing.
  const auto& in = generated_inputs();
  auto files = pp::input_set::open(in.files);
  BOOST_REQUIRE(files.has_value());
  auto plan = pp::plan_shards(files->sizes(), 1);
  struct outcome {
    std::string records;
    std::vector<std::string> vocab;  // vocab-CC.tsv's lines, per column
    std::vector<uint64_t> distinct, kept;
    uint64_t dropped = 0;
    uint64_t spills = 0;
  };
  auto run = [&](uint64_t drop_below, uint64_t cap, const std::string& tag) {
    pp::preprocess_options o;
    o.min_count = 3;
    o.drop_below = drop_below;
    o.parallelism = 2;
    if (cap) {
      o.memory_cap = cap;
      o.block_bytes = 64 << 10;
    }
    o.spill_dir = scratch("drop-spill-" + tag).string();
    const fs::path out = scratch("drop-" + tag);
    auto counts = pp::count_shard(*files, plan[0], o, (out / pp::part_file_name(0)).string());
    BOOST_REQUIRE_MESSAGE(counts.has_value(), (counts ? std::string() : counts.error().to_string()));
    outcome r;
    r.spills = counts->spills;
    for (int c = 0; c < 26; ++c) {
      auto stream = counts->column_stream(c);
      std::vector<int32_t> ids;
      std::string lines;
      auto st = pp::merge_column_ids(
          {stream.get()}, o.min_count,
          [&](std::string_view s, uint64_t n) { lines += std::string(s) + "\t" + std::to_string(n) + "\n"; },
          [&](std::size_t, int32_t id) { ids.push_back(id); });
      BOOST_REQUIRE(st.has_value());
      r.dropped += stream->dropped();
      counts->add_column_ids(c, ids.data(), ids.size());
      counts->set_oov_id(c, static_cast<int32_t>(st->kept));
      r.vocab.push_back(lines);
      r.distinct.push_back(st->distinct);
      r.kept.push_back(st->kept);
    }
    auto done = pp::finish_shard(*counts, o);
    BOOST_REQUIRE_MESSAGE(done.has_value(), (done ? std::string() : done.error().to_string()));
    r.records = read_all(out / pp::part_file_name(0));
    return r;
  };
  const outcome all = run(0, 0, "all");
  const outcome dropped = run(3, 0, "dropped");
  const outcome spilled = run(3, 64 << 10, "spilled");
  BOOST_CHECK_EQUAL(all.dropped, 0u);
  BOOST_CHECK_GT(dropped.dropped, 1000u);  // synthetic data: most strings are rare
  BOOST_CHECK_GT(spilled.spills, 10u);
  BOOST_CHECK_LT(spilled.dropped, dropped.dropped);
  BOOST_CHECK_EQUAL(all.records.size(), 19001u * 160u);
  for (const outcome* o : {&dropped, &spilled}) {
    BOOST_CHECK_MESSAGE(o->records == all.records, "records differ: " + first_difference(o->records, all.records));
    BOOST_CHECK(o->vocab == all.vocab);
    BOOST_CHECK(o->distinct == all.distinct);
    BOOST_CHECK(o->kept == all.kept);
  }
}

BOOST_AUTO_TEST_CASE(spilling_staged_records_still_match_the_reference) {
  // Pass 2 maps shard-local ids: strings spilled and seen again get a second
  // local id, which must map to the same id.
  const auto& in = generated_inputs();
  ref_options ro;
  ro.vocab = true;
  ro.min_count = 3;
  auto ref = reference(in.files, ro);
  for (int shards : {1, 3}) {
    BOOST_TEST_CONTEXT("shards " << shards) {
      pp::preprocess_options o;
      o.min_count = 3;
      o.parallelism = 2;
      o.memory_cap = 64 << 10;
      o.block_bytes = 64 << 10;
      fs::path out = scratch("out-spill");
      auto r = pp::preprocess_local(in.files, out.string(), shards, o);
      BOOST_REQUIRE_MESSAGE(r.has_value(), (r ? std::string() : r.error().to_string()));
      std::string got = concat_parts(out, shards);
      BOOST_CHECK_MESSAGE(got == ref.records, "records differ: " + first_difference(got, ref.records));
      BOOST_CHECK(!fs::exists(out / ".spill"));
      for (int i = 0; i < shards; ++i) BOOST_CHECK(!fs::exists(out / (pp::part_file_name(i) + ".tmp")));
    }
  }
}

BOOST_AUTO_TEST_CASE(staged_file_that_cannot_grow_is_a_clear_error_and_leaves_nothing) {
  // The staged .tmp is written by pwrite(): a file that cannot grow (here
  // RLIMIT_FSIZE, as a full disk would) is an io_error naming the file, and
  // neither a .tmp nor a part is left.
  const auto& in = generated_inputs();
  struct rlimit old{};
  BOOST_REQUIRE_EQUAL(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of the signal
  struct rlimit small = old;
  small.rlim_cur = 64 << 10;
  BOOST_REQUIRE_EQUAL(::setrlimit(RLIMIT_FSIZE, &small), 0);
  pp::preprocess_options o;
  o.min_count = 2;
  o.parallelism = 1;
  fs::path out = scratch("out-no-room");
  auto r = pp::preprocess_local(in.files, out.string(), 1, o);
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  BOOST_REQUIRE(!r.has_value());
  BOOST_CHECK(r.error().code() == hetflow::errc::io_error);
  const std::string msg = r.error().to_string();
  BOOST_CHECK_MESSAGE(msg.find("cannot write") != std::string::npos &&
                          msg.find(pp::part_file_name(0) + ".tmp") != std::string::npos,
                      msg);
  BOOST_CHECK(!fs::exists(out / (pp::part_file_name(0) + ".tmp")));
  BOOST_CHECK(!fs::exists(out / pp::part_file_name(0)));
}

BOOST_AUTO_TEST_CASE(input_that_gets_shorter_is_a_clear_error_in_both_passes) {
  // Blocks are read with pread (mapped_file::read): an input cut short after
  // it was opened is an io_error naming it, in pass 1 and in hash mode's
  // one pass, not rows made of what is no longer there. One block for the
  // whole file, so that cutting the blocks touches no mapped byte past the
  // new end (that would be SIGBUS, as for any mapping).
  fs::path d = scratch("shorter");
  fs::create_directories(d);
  const std::string file = (d / "in.tsv").string();
  pp::synthetic_options g;
  g.rows = 2000;
  g.seed = 5;
  BOOST_REQUIRE(pp::write_synthetic_criteo(file, g).ok());
  const uint64_t size = fs::file_size(file);
  for (const bool hash : {false, true}) {
    BOOST_REQUIRE(pp::write_synthetic_criteo(file, g).ok());
    auto in = pp::input_set::open({file});
    BOOST_REQUIRE(in.has_value());
    BOOST_REQUIRE_EQUAL(::truncate(file.c_str(), static_cast<off_t>(size / 2)), 0);
    pp::preprocess_options o;
    o.parallelism = 1;
    o.block_bytes = std::size_t{1} << 30;
    o.mode = hash ? pp::categorical_mode::hash : pp::categorical_mode::vocab;
    o.hash_range = 1000;
    const auto plan = pp::plan_shards(in->sizes(), 1);
    std::string msg;
    if (hash) {
      auto r = pp::apply_shard(*in, plan[0], nullptr, (d / "part").string(), o);
      BOOST_REQUIRE(!r.has_value());
      BOOST_CHECK(r.error().code() == hetflow::errc::io_error);
      msg = r.error().to_string();
      BOOST_CHECK(!fs::exists(d / "part.tmp"));
    } else {
      auto r = pp::count_shard(*in, plan[0], o);
      BOOST_REQUIRE(!r.has_value());
      BOOST_CHECK(r.error().code() == hetflow::errc::io_error);
      msg = r.error().to_string();
    }
    BOOST_CHECK_MESSAGE(msg.find(file) != std::string::npos && msg.find("shorter") != std::string::npos, msg);
  }
}

BOOST_AUTO_TEST_SUITE_END()

// ---- fast paths: hex keys and the fast line parser against the generic code ------

BOOST_AUTO_TEST_SUITE(fast_paths)

namespace {

bool ref_hex8(const std::string& s, uint32_t& v) {
  if (s.size() != 8) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  v = static_cast<uint32_t>(std::stoul(s, nullptr, 16));
  return true;
}

uint64_t next_random(uint64_t& s) {
  s = s * 6364136223846793005ull + 1442695040888963407ull;
  return s >> 17;
}

}  // namespace

BOOST_AUTO_TEST_CASE(big_vectors_keep_their_contents_across_the_huge_page_threshold) {
  // big_vector grows through operator new and then its own 2 MiB-aligned
  // mappings (huge_memory.hpp): the contents survive every reallocation,
  // and the big arrays start on a 2 MiB boundary.
  pp::big_vector<uint32_t> v;
  for (uint32_t i = 0; i < (3u << 20); ++i) {
    v.push_back(i * 2654435761u);
    if (v.size() * sizeof(uint32_t) >= pp::huge_memory_from && (i & 0xffff) == 0)
      BOOST_REQUIRE_EQUAL(reinterpret_cast<uintptr_t>(v.data()) % pp::huge_page_bytes, 0u);
  }
  for (uint32_t i = 0; i < v.size(); ++i)
    if (v[i] != i * 2654435761u) BOOST_FAIL("entry " << i << " lost");
  pp::big_vector<uint32_t> w(v);  // a copy, then a swap and a release
  pp::big_vector<uint32_t>().swap(v);
  BOOST_CHECK(v.empty());
  BOOST_CHECK_EQUAL(w.size(), std::size_t{3} << 20);
  BOOST_CHECK_EQUAL(w.back(), ((3u << 20) - 1) * 2654435761u);
  pp::huge_buffer b;
  char* p = b.reserve(100);
  std::memset(p, 1, 100);
  BOOST_CHECK(b.reserve(50) == p);  // no shrinking, no new buffer
  p = b.reserve((std::size_t{1} << 20) + 1);
  BOOST_CHECK_EQUAL(reinterpret_cast<uintptr_t>(p) % pp::huge_page_bytes, 0u);
  std::memset(p, 2, pp::huge_page_bytes);  // rounded up to a whole 2 MiB page: all of it is usable
  BOOST_CHECK(b.reserve(pp::huge_page_bytes) == p);
  pp::huge_buffer moved(std::move(b));
  BOOST_CHECK(moved.data() == p);
  BOOST_CHECK(b.data() == nullptr);
  // A freed range is kept and handed out again for the same whole pages.
  const std::size_t kept_before = pp::huge_kept_bytes();
  { pp::huge_buffer gone(std::move(moved)); }
  BOOST_CHECK_EQUAL(pp::huge_kept_bytes(), kept_before + pp::huge_page_bytes);
  pp::huge_buffer again;
  BOOST_CHECK(again.reserve(pp::huge_page_bytes - 5) == p);
  BOOST_CHECK_EQUAL(pp::huge_kept_bytes(), kept_before);
  BOOST_CHECK_EQUAL(p[0], 2);  // its contents as they were: not zeroed again
  // Without one of that size, the front of the smallest bigger one kept;
  // the rest stays kept.
  pp::huge_release_kept();
  BOOST_CHECK_EQUAL(pp::huge_kept_bytes(), 0u);
  const std::size_t hp = pp::huge_page_bytes, before = 0;
  pp::huge_buffer five;
  char* q = five.reserve(5 * hp);
  std::memset(q, 3, 5 * hp);
  { pp::huge_buffer gone(std::move(five)); }
  BOOST_CHECK_EQUAL(pp::huge_kept_bytes(), before + 5 * hp);
  pp::huge_buffer three, two;
  BOOST_CHECK(three.reserve(3 * hp) == q);
  BOOST_CHECK_EQUAL(pp::huge_kept_bytes(), before + 2 * hp);
  BOOST_CHECK(two.reserve(2 * hp) == q + 3 * hp);  // the rest, exactly that size now
  BOOST_CHECK_EQUAL(pp::huge_kept_bytes(), before);
  BOOST_CHECK_EQUAL(q[3 * hp], 3);
}

BOOST_AUTO_TEST_CASE(hex8_is_exactly_eight_lowercase_hex_digits) {
  // Every byte value at every position of a valid id.
  const std::string base = "09af5c3e";
  uint32_t v = 0;
  BOOST_REQUIRE(pp::hex8_value(base, v));
  BOOST_CHECK_EQUAL(v, 0x09af5c3eu);
  for (int pos = 0; pos < 8; ++pos)
    for (int b = 0; b < 256; ++b) {
      std::string s = base;
      s[pos] = static_cast<char>(b);
      uint32_t want = 0, got = 0;
      bool ok = ref_hex8(s, want);
      BOOST_REQUIRE_EQUAL(pp::hex8_value(s, got), ok);
      if (ok) BOOST_REQUIRE_EQUAL(got, want);
    }
  // Other lengths, upper case, edges.
  for (std::string s : {"", "0", "0123456", "012345678", "0123456789abcdef", "ABCDEF12", "abcdeF12", "0000000g",
                        "0000000/", "0000000:", "0000000`", " 1234567", "1234567\r", "-1234567"}) {
    BOOST_TEST_CONTEXT(s) { BOOST_CHECK(!pp::hex8_value(s, v)); }
  }
  BOOST_CHECK(pp::hex8_value(std::string("00000000"), v) && v == 0);
  BOOST_CHECK(pp::hex8_value(std::string("ffffffff"), v) && v == 0xffffffffu);
}

BOOST_AUTO_TEST_CASE(hex8_pairs_agree_with_one_at_a_time) {
  // hex8_value2 (SSE) against hex8_value: every byte value at every position
  // of either word, next to valid and invalid partners, and random words.
  auto word = [](const std::string& s) {
    uint64_t w;
    std::memcpy(&w, s.data(), 8);
    return w;
  };
  auto check = [](uint64_t a, uint64_t b) {
    uint32_t v0 = 0, v1 = 0, s0 = 0, s1 = 0;
    bool ok0, ok1;
    pp::hex8_value2(a, b, v0, ok0, v1, ok1);
    bool q0 = pp::hex8_value(a, s0), q1 = pp::hex8_value(b, s1);
    BOOST_REQUIRE_EQUAL(ok0, q0);
    BOOST_REQUIRE_EQUAL(ok1, q1);
    if (q0) BOOST_REQUIRE_EQUAL(v0, s0);
    if (q1) BOOST_REQUIRE_EQUAL(v1, s1);
  };
  const std::vector<std::string> partners = {"09af5c3e", "ffffffff", "00000000", "0123456G", std::string(8, '\0')};
  for (int pos = 0; pos < 8; ++pos)
    for (int byte = 0; byte < 256; ++byte) {
      std::string s = "7b3e9d01";
      s[pos] = static_cast<char>(byte);
      for (auto& other : partners) {
        check(word(s), word(other));
        check(word(other), word(s));
      }
    }
  uint64_t seed = 5;
  const char* digits = "0123456789abcdef";
  for (int i = 0; i < 200000; ++i) {
    std::string a(8, '0'), b(8, '0');
    for (int k = 0; k < 8; ++k) {
      a[k] = digits[next_random(seed) % 16];
      b[k] = digits[next_random(seed) % 16];
    }
    if (i % 3 == 1) a[next_random(seed) % 8] = static_cast<char>(next_random(seed));
    if (i % 5 == 2) b[next_random(seed) % 8] = static_cast<char>(next_random(seed));
    check(word(a), word(b));
  }
}

BOOST_AUTO_TEST_CASE(hex8_round_trips_and_keeps_byte_order) {
  uint64_t seed = 7;
  std::vector<uint32_t> vals = {0, 1, 9, 10, 15, 16, 0x99999999u, 0xaaaaaaaau, 0x0a0a0a0au, 0xfffffffeu, 0xffffffffu};
  for (int i = 0; i < 20000; ++i) vals.push_back(static_cast<uint32_t>(next_random(seed)));
  std::vector<std::string> strs;
  for (uint32_t x : vals) {
    char buf[8], want[9];
    pp::hex8_chars(x, buf);
    std::snprintf(want, sizeof want, "%08x", x);
    std::string s(buf, 8);
    BOOST_REQUIRE_EQUAL(s, std::string(want));
    uint32_t back = 0;
    BOOST_REQUIRE(pp::hex8_value(s, back));
    BOOST_REQUIRE_EQUAL(back, x);
    strs.push_back(s);
  }
  for (std::size_t i = 1; i < vals.size(); ++i)
    BOOST_REQUIRE_EQUAL(vals[i - 1] < vals[i], strs[i - 1] < strs[i]);
}

BOOST_AUTO_TEST_CASE(fast_line_parser_agrees_with_the_generic_one) {
  // Synthetic lines and mutations of them (bytes that matter to either
  // parser at random places, digit runs, long fields, int32 edges): whatever
  // the fast path accepts, the generic parser accepts with the same values;
  // unmutated lines always take the fast path.
  const std::vector<std::string> pieces = {
      "\t", "\n", "\r", "-", "+", " ", "0", "7", "9", "a", "f", "A", "F", "g", "x", "\x80", "\xc3\xa9", "\xff",
      std::string(1, '\0'), "~", "123456789012345678", "1234567890123456789", "12345678", "1234567", "-0",
      "2147483647", "2147483648", "-2147483648", "-2147483649", "abcdef0123456789abcdef", "\t\t", ""};
  uint64_t seed = 11;
  std::size_t fast_taken = 0, tried = 0;
  for (std::size_t max_field : {std::size_t{19}, std::size_t{20}, std::size_t{24}, std::size_t{64}}) {
    const std::size_t bound = pp::fast_parse_read_bound(max_field);
    for (uint64_t row = 0; row < 3000; ++row) {
      std::string line;
      pp::synthetic_criteo_line(5, row, line);
      line.pop_back();  // the '\n'
      const bool mutated = row % 4 != 0;
      if (mutated) {
        int edits = 1 + static_cast<int>(next_random(seed) % 3);
        for (int e = 0; e < edits; ++e) {
          std::size_t at = next_random(seed) % (line.size() + 1);
          const std::string& piece = pieces[next_random(seed) % pieces.size()];
          switch (next_random(seed) % 4) {
            case 0: line.insert(at, piece); break;
            case 1: line.replace(at, std::min<std::size_t>(piece.size(), line.size() - at), piece); break;
            case 2: line.erase(at, 1 + next_random(seed) % 9); break;
            default: {  // a whole field: empty, or a long one
              std::size_t tab = line.find('\t', at);
              if (tab == std::string::npos) break;
              std::size_t end = line.find('\t', tab + 1);
              std::string f = next_random(seed) % 2 ? "" : std::string(max_field + next_random(seed) % 3 - 1, 'b');
              line.replace(tab + 1, (end == std::string::npos ? line.size() : end) - tab - 1, f);
            }
          }
        }
      }
      // The line in the middle of other bytes, as in a file.
      std::string buf = line + "\n" + std::string(bound, 'z') + "\t\n";
      const char* p = buf.data();
      pp::parsed_line fast{}, slow{};
      const char* next = pp::parse_criteo_line_fast(p, max_field, fast);
      ++tried;
      std::size_t nl = buf.find('\n');
      std::string_view first(buf.data(), nl);
      auto e = pp::parse_criteo_line(first, max_field, slow);
      if (!mutated) {
        BOOST_REQUIRE_MESSAGE(next != nullptr, "the fast path refused a synthetic line: " << line);
        BOOST_REQUIRE(!e);
      }
      if (!next) continue;
      ++fast_taken;
      BOOST_TEST_CONTEXT("max_field " << max_field << " line " << first) {
        BOOST_REQUIRE_EQUAL(next - p, static_cast<std::ptrdiff_t>(nl + 1));
        BOOST_REQUIRE(!e);
        BOOST_REQUIRE_EQUAL(fast.label, slow.label);
        for (int j = 0; j < 13; ++j) {
          BOOST_REQUIRE_EQUAL(fast.dense[j], slow.dense[j]);
          BOOST_REQUIRE_EQUAL(fast.dense_missing[j], slow.dense_missing[j]);
        }
        for (int c = 0; c < 26; ++c) {
          BOOST_REQUIRE_EQUAL(fast.sparse[c], slow.sparse[c]);
          BOOST_REQUIRE(fast.sparse[c].data() == slow.sparse[c].data());
        }
      }
    }
  }
  BOOST_TEST_MESSAGE("fast path took " << fast_taken << " of " << tried << " lines");
  BOOST_CHECK_GT(fast_taken, tried / 4);
  BOOST_CHECK_LT(fast_taken, tried * 2 / 3);  // the mutations reach the generic path too
}

BOOST_AUTO_TEST_CASE(fast_line_parser_decimal_fields_of_every_length) {
  // The label and I5 with 0..20 characters: digits, an optional '-', and
  // each position in turn replaced by a byte next to the digits ('/', ':')
  // or another separator-free byte; the fast path must agree with the
  // generic parser on every one (accept or refuse, and the values).
  uint64_t seed = 23;
  std::string base;
  pp::synthetic_criteo_line(9, 1, base);
  base.pop_back();
  const std::size_t max_field = 64;
  const std::size_t bound = pp::fast_parse_read_bound(max_field);
  std::size_t accepted = 0, checked = 0;
  for (int field : {0, 5})
    for (std::size_t len = 0; len <= 20; ++len)
      for (int neg = 0; neg < 2; ++neg)
        for (std::size_t bad = 0; bad <= len; ++bad) {  // bad == len: no bad byte
          std::string f = neg ? "-" : "";
          for (std::size_t k = 0; k < len; ++k) f += static_cast<char>('0' + next_random(seed) % 10);
          if (bad < len) f[neg + bad] = "/:a \r+"[next_random(seed) % 6];
          std::string line = base;
          std::size_t at = 0;
          for (int k = 0; k < field; ++k) at = line.find('\t', at) + 1;
          line.replace(at, line.find('\t', at) - at, f);
          // After the line: bytes the fast path must not look at (high ones
          // in the same 64-byte window as the '\n' among them).
          std::string buf = line + "\n";
          while (buf.size() < line.size() + 1 + bound) buf += "\xff\t9\n";
          pp::parsed_line fast{}, slow{};
          const char* next = pp::parse_criteo_line_fast(buf.data(), max_field, fast);
          auto e = pp::parse_criteo_line(line, max_field, slow);
          ++checked;
          BOOST_TEST_CONTEXT("field " << field << " = \"" << f << "\"") {
            BOOST_REQUIRE_EQUAL(next != nullptr, !e);  // every line here is ASCII: the fast path refuses only bad ones
            if (!next) continue;
            ++accepted;
            BOOST_REQUIRE_EQUAL(next - buf.data(), static_cast<std::ptrdiff_t>(line.size() + 1));
            BOOST_REQUIRE_EQUAL(fast.label, slow.label);
            for (int j = 0; j < 13; ++j) {
              BOOST_REQUIRE_EQUAL(fast.dense[j], slow.dense[j]);
              BOOST_REQUIRE_EQUAL(fast.dense_missing[j], slow.dense_missing[j]);
            }
          }
        }
  BOOST_TEST_MESSAGE("decimal fields: " << accepted << " of " << checked << " accepted");
  BOOST_CHECK_GT(accepted, 30u);  // every length 1..18 in I5 at least, and small labels
}

BOOST_AUTO_TEST_CASE(fast_line_parser_reads_within_its_bound) {
  // The line starts exactly fast_parse_read_bound bytes before a page that
  // may not be read; adversarial lines (no tabs, endless digits, no '\n')
  // must not touch it.
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  for (std::size_t max_field : {std::size_t{19}, std::size_t{64}, std::size_t{300}}) {
    const std::size_t bound = pp::fast_parse_read_bound(max_field);
    const std::size_t room = (bound + page - 1) / page * page;
    char* m = static_cast<char*>(::mmap(nullptr, room + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    BOOST_REQUIRE(m != MAP_FAILED);
    BOOST_REQUIRE_EQUAL(::mprotect(m + room, page, PROT_NONE), 0);
    char* p = m + room - bound;
    std::string good;
    pp::synthetic_criteo_line(3, 0, good);
    std::vector<std::string> lines = {std::string(bound, '1'), std::string(bound, 'a'), std::string(bound, '-'),
                                      std::string(bound, '\t'), std::string(bound, ' ')};
    for (auto fill : {'7', 'c', ' ', '\r'}) {  // the first 14 fields fine, then one endless field
      std::string l = "1";
      for (int i = 0; i < 13; ++i) l += "\t12";
      l += '\t';
      while (l.size() < bound) l += fill;
      lines.push_back(l);
      std::string d = "1\t";  // an endless decimal field
      while (d.size() < bound) d += fill;
      lines.push_back(d);
    }
    {
      std::string l = good.substr(0, good.size() - 1);  // tabs all the way, no '\n'
      while (l.size() < bound) l += "\tabcdef01";
      lines.push_back(l.substr(0, bound));
    }
    for (auto& l : lines) {
      std::memcpy(p, l.data(), bound);
      pp::parsed_line pl;
      BOOST_CHECK(pp::parse_criteo_line_fast(p, max_field, pl) == nullptr);
    }
    // A good line at the very end of the readable bytes parses, and so does
    // the longest good line there is (the label -2^31, 13 fields of '-' and
    // 18 digits, 26 of max_field bytes).
    std::memset(p, 'z', bound);
    std::memcpy(p, good.data(), good.size());
    pp::parsed_line pl;
    BOOST_CHECK(pp::parse_criteo_line_fast(p, max_field, pl) == p + good.size());
    std::string longest = "-2147483648";  // the longest label
    for (int i = 0; i < 13; ++i) longest += "\t-123456789012345678";
    for (int i = 0; i < 26; ++i) longest += "\t" + std::string(max_field, 'q');
    longest += '\n';
    BOOST_REQUIRE_LE(longest.size(), bound);
    std::memset(p, 'z', bound);
    std::memcpy(p, longest.data(), longest.size());
    BOOST_CHECK(pp::parse_criteo_line_fast(p, max_field, pl) == p + longest.size());
    BOOST_CHECK_EQUAL(pl.label, INT32_MIN);
    BOOST_CHECK_EQUAL(pl.dense[12], -123456789012345678);
    ::munmap(m, room + page);
  }
}

BOOST_AUTO_TEST_CASE(vocab_file_lines_are_string_tab_count) {
  // The writer formats "%s\t%llu\n" by hand: short, 64-byte and longer
  // strings, counts 0 .. 2^64-1.
  fs::path d = scratch("vocab-writer");
  auto w = pp::vocab_file_writer::open(d.string(), 3);
  BOOST_REQUIRE(w.has_value());
  std::string want;
  const std::vector<std::string> strs = {"", "0123abcd", std::string(64, 'x'), std::string(65, 'y'), std::string(300, 'z')};
  const std::vector<uint64_t> counts = {0, 1, 9, 10, 12345678901234ull, ~uint64_t{0}};
  for (auto& s : strs)
    for (uint64_t n : counts) {
      w->add(s, n);
      char num[32];
      std::snprintf(num, sizeof num, "\t%llu\n", static_cast<unsigned long long>(n));
      want += s + num;
    }
  BOOST_REQUIRE(w->close().ok());
  BOOST_CHECK(read_all(d / pp::vocab_file_name(3)) == want);
}

// Rows whose hex ids come from small pools, so a string's count crosses
// min_count only when the shards' counts are added; the empty string in the
// first 40 rows of every other column (so in some shards and not others);
// C3 holds only the empty string.
std::string skewed_hex_text(int rows) {
  uint64_t seed = 11;
  std::string text;
  for (int row = 0; row < rows; ++row) {
    std::string line;
    pp::synthetic_criteo_line(5, static_cast<uint64_t>(row), line);
    line.pop_back();
    std::vector<std::string> f = split_tabs(line);
    for (int c = 14; c < 40; ++c) {
      const uint64_t pool = c % 3 == 0 ? 7 : c % 3 == 1 ? 300 : 5000;  // few, some, many distinct
      char buf[9];
      std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>((next_random(seed) % pool) * 2654435761u));
      f[c] = buf;
      if (row < 40 && c % 2 == 0) f[c].clear();
      if (c == 16) f[c].clear();  // C3: the empty string only (a merge that keeps no value)
    }
    line.clear();
    for (std::size_t i = 0; i < f.size(); ++i) line += (i ? "\t" : "") + f[i];
    text += line + "\n";
  }
  return text;
}

BOOST_AUTO_TEST_CASE(hashed_merge_equals_sorted_merge_on_skewed_shards) {
  // Hex ids from small pools, so a string's count crosses min_count only
  // when the shards' counts are added; the empty string in the first rows
  // only (so in some shards and not others); a last shard of a few rows.
  // Merging by hashing and as sorted streams give the same bytes, and the
  // same vocabularies, for 2, 3 and 5 shards and min_count 1, 2, 5 and one
  // above every count; C3 holds only the empty string.
  fs::path d = scratch("hashed");
  const int rows = 4003;
  write_all(d / "skewed.tsv", skewed_hex_text(rows));
  const std::vector<std::string> files = {(d / "skewed.tsv").string()};
  // (100000: no string is kept, the empty one included.)
  for (uint64_t min_count : {uint64_t{1}, uint64_t{2}, uint64_t{5}, uint64_t{100000}})
    for (int shards : {2, 3, 5}) {
      BOOST_TEST_CONTEXT("min_count " << min_count << " shards " << shards) {
        std::string bytes[2];
        std::vector<std::string> vocab[2];
        for (int hashed = 0; hashed < 2; ++hashed) {
          pp::preprocess_options o;
          o.min_count = min_count;
          o.parallelism = 2;
          o.block_bytes = 16 << 10;
          o.hash_merge = hashed == 1;
          fs::path out = scratch("hashed-out");
          auto r = pp::preprocess_local(files, out.string(), shards, o);
          BOOST_REQUIRE_MESSAGE(r.has_value(), (r ? std::string() : r.error().to_string()));
          BOOST_REQUIRE_EQUAL(r->rows, static_cast<uint64_t>(rows));
          bytes[hashed] = concat_parts(out, shards);
          for (int c = 0; c < 26; ++c) vocab[hashed].push_back(read_all(out / pp::vocab_file_name(c)));
        }
        BOOST_CHECK_MESSAGE(bytes[0] == bytes[1], "records differ: " + first_difference(bytes[1], bytes[0]));
        for (int c = 0; c < 26; ++c) BOOST_CHECK_MESSAGE(vocab[0][c] == vocab[1][c], "vocabulary of column " << c);
        // The empty string is kept (id 0) where it was counted often enough.
        BOOST_CHECK_EQUAL(vocab[1][0].rfind("\t", 0) == 0, min_count <= 40);
        BOOST_CHECK_EQUAL(vocab[1][2], min_count <= rows ? "\t" + std::to_string(rows) + "\n" : std::string());
      }
    }
}

BOOST_AUTO_TEST_CASE(threshold_merge_equals_the_merge_of_every_entry) {
  // Merging hashed columns by count threshold (each shard sends only the
  // entries it counted ceil(min_count / shards) times, then answers for the
  // others') gives the bytes and vocabularies of the merge of every entry;
  // its `distinct` is an estimate, close to the exact one. The pools of
  // skewed_hex_text make most strings rare in a shard and kept only when
  // the shards' counts are added. Also with a claimed split (steal).
  fs::path d = scratch("threshold");
  const int rows = 4003;
  write_all(d / "skewed.tsv", skewed_hex_text(rows));
  const std::vector<std::string> files = {(d / "skewed.tsv").string()};
  struct run_case {
    uint64_t min_count;
    int shards;
    uint64_t steal_unit;
  };
  for (run_case rc : {run_case{3, 2, 0}, run_case{5, 2, 0}, run_case{5, 3, 0}, run_case{7, 3, 0}, run_case{4, 2, 4096},
                      run_case{100000, 2, 0}}) {
    BOOST_TEST_CONTEXT("min_count " << rc.min_count << " shards " << rc.shards << " steal " << rc.steal_unit) {
      BOOST_REQUIRE_GE(pp::candidate_min_count(rc.min_count, rc.shards), 2u);
      std::string bytes[2];
      std::vector<std::string> vocab[2];
      pp::local_result res[2];
      for (int threshold = 0; threshold < 2; ++threshold) {
        pp::preprocess_options o;
        o.min_count = rc.min_count;
        o.parallelism = 2;
        o.block_bytes = 16 << 10;
        o.steal_unit = rc.steal_unit;
        o.threshold_merge = threshold == 1;
        o.threshold_merge_from = 0;
        fs::path out = scratch("threshold-out");
        auto r = pp::preprocess_local(files, out.string(), rc.shards, o);
        BOOST_REQUIRE_MESSAGE(r.has_value(), (r ? std::string() : r.error().to_string()));
        BOOST_REQUIRE_EQUAL(r->rows, static_cast<uint64_t>(rows));
        bytes[threshold] = concat_parts(out, r->parts > 0 ? r->parts : rc.shards);
        for (int c = 0; c < 26; ++c) vocab[threshold].push_back(read_all(out / pp::vocab_file_name(c)));
        res[threshold] = *r;
      }
      BOOST_CHECK_MESSAGE(bytes[0] == bytes[1], "records differ: " + first_difference(bytes[1], bytes[0]));
      int estimated = 0;
      for (int c = 0; c < 26; ++c) {
        BOOST_CHECK_MESSAGE(vocab[0][c] == vocab[1][c], "vocabulary of column " << c);
        const auto& exact = res[0].columns[c];
        const auto& est = res[1].columns[c];
        BOOST_CHECK(!exact.distinct_estimated);
        BOOST_CHECK_EQUAL(est.kept, exact.kept);
        estimated += est.distinct_estimated;
        // Linear counting at these sizes: within 2% (or 2 strings).
        BOOST_CHECK_MESSAGE(std::llabs(int64_t(est.distinct) - int64_t(exact.distinct)) <=
                                std::max<int64_t>(2, int64_t(exact.distinct) / 50),
                            "column " << c << ": distinct " << est.distinct << " estimated, " << exact.distinct
                                      << " exact");
      }
      BOOST_CHECK_EQUAL(estimated, 26);
    }
  }
}

BOOST_AUTO_TEST_CASE(threshold_merge_rounds_refuse_what_was_not_asked) {
  // The merger side: hits that were not asked for, a hit it had sent as a
  // candidate, candidates out of order. The shard side: a value asked that
  // it sent, values asked out of order, a column not exported that way.
  auto col = [](std::vector<uint32_t> pairs, bool empty = false) {
    pp::hex_column h;
    h.pairs.assign(pairs.begin(), pairs.end());
    h.has_empty = empty;
    h.empty_count = empty ? 2 : 0;
    return h;
  };
  pp::hex_column a = col({10, 2, 20, 5}, true), b = col({20, 3, 30, 2});
  std::vector<const pp::hex_column*> cands = {&a, &b};
  auto q = pp::candidate_queries(cands);
  BOOST_REQUIRE(q);
  BOOST_REQUIRE_EQUAL(q->queries.size(), 2u);
  BOOST_CHECK((q->queries[0].pairs == pp::big_vector<uint32_t>{30, 0}));
  BOOST_CHECK((q->queries[1].pairs == pp::big_vector<uint32_t>{10, 0}));
  BOOST_CHECK((q->values == pp::big_vector<uint32_t>{10, 20, 30}));
  BOOST_CHECK((q->totals == pp::big_vector<uint64_t>{2, 8, 2}));
  auto merge = [&](const pp::hex_column& ha, const pp::hex_column& hb, uint64_t min_count,
                   std::vector<std::string>* kept = nullptr) {
    std::vector<pp::big_vector<int32_t>> ids;
    auto u = pp::candidate_queries(cands);
    BOOST_REQUIRE(u);
    auto r = pp::merge_candidates(cands, *u, {&ha, &hb}, min_count,
                                  [&](std::string_view s, uint64_t n) {
                                    if (kept) kept->push_back(std::string(s) + "=" + std::to_string(n));
                                  },
                                  ids);
    return std::make_pair(r, ids);
  };
  {
    // 30 counted once on shard 0: 3 in all; 10 not on shard 1.
    std::vector<std::string> kept;
    auto [r, ids] = merge(col({30, 1}), col({}), 3, &kept);
    BOOST_REQUIRE(r);
    BOOST_CHECK_EQUAL(r->kept, 2u);  // 20 (8), 30 (3); 10 (2) and the empty string (2) out
    BOOST_CHECK((kept == std::vector<std::string>{"00000014=8", "0000001e=3"}));
    // Shard 0: the empty string, 10, 20, 30 (a hit); shard 1: 20, 30.
    BOOST_CHECK((ids[0] == pp::big_vector<int32_t>{-1, -1, 0, 1}));
    BOOST_CHECK((ids[1] == pp::big_vector<int32_t>{0, 1}));
    BOOST_CHECK(r->distinct_estimated);
  }
  BOOST_CHECK(!merge(col({40, 1}), col({}), 3).first);  // not asked
  BOOST_CHECK(!merge(col({20, 1}), col({}), 3).first);  // a candidate of its own
  BOOST_CHECK(!merge(col({}), col({10, 1, 10, 1}), 3).first);  // twice
  pp::hex_column unsorted = col({20, 3, 10, 2});
  BOOST_CHECK(!pp::candidate_queries({&unsorted, &b}));
  {
    // Three shards (the k-way union).
    pp::hex_column c3 = col({5, 4, 30, 1});
    auto u3 = pp::candidate_queries({&a, &b, &c3});
    BOOST_REQUIRE(u3);
    BOOST_CHECK((u3->values == pp::big_vector<uint32_t>{5, 10, 20, 30}));
    BOOST_CHECK((u3->totals == pp::big_vector<uint64_t>{4, 2, 8, 3}));
    BOOST_CHECK((u3->queries[2].pairs == pp::big_vector<uint32_t>{10, 0, 20, 0}));
  }

  // The shard side, on a counted shard.
  fs::path d = scratch("threshold-shard");
  write_all(d / "in.tsv", skewed_hex_text(500));
  auto in = pp::input_set::open({(d / "in.tsv").string()});
  BOOST_REQUIRE(in);
  pp::preprocess_options o;
  o.min_count = 3;
  o.defer_sort = true;
  o.spill_dir = (d / "spill").string();
  auto plan = pp::plan_shards(in->sizes(), 1);
  auto sc = pp::count_shard(*in, plan[0], o);
  BOOST_REQUIRE(sc);
  const int c = 2;  // C3: the empty string only
  const int c2 = 4;  // a pool of 5000 values
  auto e = sc->export_candidates(c2, 2);
  BOOST_REQUIRE(e);
  BOOST_CHECK_EQUAL(e->sketch.size(), pp::sketch_registers);
  BOOST_REQUIRE_GT(e->values(), 0u);
  pp::hex_column hits;
  const uint32_t sent[2] = {e->pairs[0], 0};
  BOOST_CHECK(!sc->answer_queries(c2, sent, 1, hits).ok());  // a value it sent
  auto e2 = sc->export_candidates(c, 2);
  BOOST_REQUIRE(e2);
  BOOST_CHECK(e2->has_empty && e2->values() == 0);
  const uint32_t down[4] = {50, 0, 40, 0};
  BOOST_CHECK(!sc->answer_queries(c, down, 2, hits).ok());  // out of order
  BOOST_CHECK(sc->finish_candidates(c).ok());
  BOOST_CHECK(!sc->finish_candidates(c).ok());  // twice
  BOOST_CHECK(!sc->answer_queries(c, down, 1, hits).ok());  // after the end
  BOOST_CHECK(!sc->answer_queries(0, down, 1, hits).ok());  // never exported so
}

BOOST_AUTO_TEST_CASE(sketches_estimate_distinct_values_and_cross_the_wire) {
  // Within 3% from 1 to 10^6 values (standard error ~0.8%); merged sketches
  // of overlapping sets estimate their union.
  for (uint32_t n : {1u, 10u, 1000u, 50000u, 1000000u}) {
    std::vector<uint8_t> r(pp::sketch_registers, 0);
    for (uint32_t v = 0; v < n; ++v) pp::sketch_add(r.data(), v * 2654435761u);
    const double e = pp::sketch_estimate(r.data());
    BOOST_CHECK_MESSAGE(std::fabs(e - n) <= std::max(1.0, 0.03 * n), n << " values estimated at " << e);
  }
  std::vector<uint8_t> x(pp::sketch_registers, 0), y(pp::sketch_registers, 0);
  for (uint32_t v = 0; v < 300000; ++v) pp::sketch_add(x.data(), v);
  for (uint32_t v = 200000; v < 500000; ++v) pp::sketch_add(y.data(), v);
  pp::sketch_merge(x.data(), y.data());
  BOOST_CHECK_CLOSE(pp::sketch_estimate(x.data()), 500000.0, 3.0);
  // On the wire: in the first chunk, once; a column with no entries still
  // sends it; a register past 64 or a second sketch is corrupt.
  pp::hex_column h;
  h.sketch = y;
  h.pairs = {5, 1, 9, 2};
  std::size_t next = 0;
  pp::hex_column got;
  do {
    auto chunk = pp::next_hex_column_chunk(h, next, 4096);
    BOOST_REQUIRE(pp::add_hex_column_chunk(got, chunk));
  } while (next < h.entries());
  BOOST_CHECK(got.sketch == h.sketch && got.pairs == h.pairs);
  pp::hex_column bare;
  bare.sketch = y;
  next = 0;
  auto only = pp::next_hex_column_chunk(bare, next, 1 << 20);
  pp::hex_column g2;
  BOOST_CHECK(pp::add_hex_column_chunk(g2, only));
  BOOST_CHECK(g2.sketch == y && g2.entries() == 0);
  BOOST_CHECK(!pp::add_hex_column_chunk(g2, only));  // twice
  auto bad = only;
  bad[5] = static_cast<char>(65);
  pp::hex_column g3;
  BOOST_CHECK(!pp::add_hex_column_chunk(g3, bad));
  bad.resize(100);
  pp::hex_column g4;
  BOOST_CHECK(!pp::add_hex_column_chunk(g4, bad));  // cut short
}

BOOST_AUTO_TEST_CASE(hashed_merge_of_sorted_and_shuffled_exports_agree) {
  // export_column gives a column's values in increasing order, and
  // merge_hashed then merges every shard's entries in one pass over sorted
  // arrays; others in any other order are added into its table (hashing).
  // Both give the same vocabulary, the same id for every other shard's
  // entry, and the same records for the merging shard, for min_count 1, 2
  // and 5 (shards 1 and 2 merged into shard 0, counted twice).
  fs::path d = scratch("sorted-merge");
  write_all(d / "skewed.tsv", skewed_hex_text(3001));
  auto in = pp::input_set::open({(d / "skewed.tsv").string()});
  BOOST_REQUIRE(in.has_value());
  const auto plan = pp::plan_shards(in->sizes(), 3);
  BOOST_REQUIRE_EQUAL(plan.size(), 3u);
  for (uint64_t min_count : {uint64_t{1}, uint64_t{2}, uint64_t{5}}) {
    BOOST_TEST_CONTEXT("min_count " << min_count) {
      pp::preprocess_options o;
      o.min_count = min_count;
      o.parallelism = 1;
      o.block_bytes = 16 << 10;
      o.defer_sort = true;
      o.spill_dir = (d / "spill").string();
      const fs::path part[2] = {d / "sorted.bin", d / "shuffled.bin"};
      auto a = pp::count_shard(*in, plan[0], o, part[0].string());
      auto b = pp::count_shard(*in, plan[0], o, part[1].string());
      auto s1 = pp::count_shard(*in, plan[1], o);
      auto s2 = pp::count_shard(*in, plan[2], o);
      BOOST_REQUIRE(a && b && s1 && s2);
      std::mt19937_64 rng(min_count);
      int shuffled_columns = 0;
      for (int c = 0; c < 26; ++c) {
        BOOST_TEST_CONTEXT("column " << c) {
          BOOST_REQUIRE(a->hashable(c) && s1->hashable(c) && s2->hashable(c));
          auto e1 = s1->export_column(c);
          auto e2 = s2->export_column(c);
          BOOST_REQUIRE(e1 && e2);
          std::vector<const pp::hex_column*> sorted = {&*e1, &*e2}, shuffled;
          std::vector<pp::hex_column> copies;
          std::vector<std::vector<std::size_t>> perms;
          for (const pp::hex_column* e : sorted) {
            for (std::size_t j = 1; j < e->values(); ++j) BOOST_REQUIRE_LT(e->pairs[2 * j - 2], e->pairs[2 * j]);
            std::vector<std::size_t> perm(e->values());
            for (std::size_t j = 0; j < perm.size(); ++j) perm[j] = j;
            std::shuffle(perm.begin(), perm.end(), rng);
            pp::hex_column h;
            h.has_empty = e->has_empty;
            h.empty_count = e->empty_count;
            for (std::size_t j : perm) h.pairs.insert(h.pairs.end(), {e->pairs[2 * j], e->pairs[2 * j + 1]});
            copies.push_back(std::move(h));
            perms.push_back(std::move(perm));
          }
          for (auto& h : copies) shuffled.push_back(&h);
          if (e1->values() > 2 && perms[0] != std::vector<std::size_t>(perms[0].size())) ++shuffled_columns;
          std::vector<std::pair<std::string, uint64_t>> kept[2];
          std::vector<pp::big_vector<int32_t>> ids[2];
          auto ra = a->merge_hashed(c, sorted, min_count, [&](std::string_view s, uint64_t n) { kept[0].emplace_back(s, n); }, ids[0]);
          auto rb = b->merge_hashed(c, shuffled, min_count, [&](std::string_view s, uint64_t n) { kept[1].emplace_back(s, n); }, ids[1]);
          BOOST_REQUIRE_MESSAGE(ra && rb, (ra ? rb.error().to_string() : ra.error().to_string()));
          BOOST_CHECK_EQUAL(ra->distinct, rb->distinct);
          BOOST_CHECK_EQUAL(ra->kept, rb->kept);
          BOOST_CHECK(kept[0] == kept[1]);
          for (std::size_t k = 0; k < 2; ++k) {
            const std::size_t skip = sorted[k]->has_empty ? 1 : 0;
            BOOST_REQUIRE_EQUAL(ids[0][k].size(), sorted[k]->entries());
            BOOST_REQUIRE_EQUAL(ids[1][k].size(), sorted[k]->entries());
            if (skip) BOOST_CHECK_EQUAL(ids[0][k][0], ids[1][k][0]);
            for (std::size_t j = 0; j < perms[k].size(); ++j)
              BOOST_CHECK_EQUAL(ids[1][k][skip + j], ids[0][k][skip + perms[k][j]]);
          }
        }
      }
      BOOST_CHECK_GT(shuffled_columns, 10);
      auto fa = pp::finish_shard(*a, o);
      auto fb = pp::finish_shard(*b, o);
      BOOST_REQUIRE(fa && fb);
      const std::string ra = read_all(part[0]), rb = read_all(part[1]);
      BOOST_CHECK_GT(ra.size(), 0u);
      BOOST_CHECK_MESSAGE(ra == rb, "records differ: " + first_difference(rb, ra));
    }
  }
}

BOOST_AUTO_TEST_CASE(mixed_strings_get_ids_in_byte_order) {
  // Hex ids next to strings that are not (upper case, 7 and 9 digits, long
  // strings, control and high bytes, strings sorting between hex ids), the
  // empty string, and mutated lines: records and vocabularies equal the
  // reference for 1, 2 and 4 shards, min_count 1 and 2, with and without
  // spilling, and in hash mode.
  fs::path d = scratch("mixed");
  const std::vector<std::string> odd = {
      "",          "ABCDEF12",  "abcdeF12",  "0123abc",   "0123abcd0", "0123abcd!", "0123abcg",   "0123abcd\r",
      "~~~~~~~~",  "00000000",  "ffffffff",  "fffffffff", "G",         "zzzzzzzzzzzzzzzzzzzz", "0123abcd0123abcd",
      "0123ab cd", "\xc3\xa9t\xc3\xa9", "0",  "12345678",  "1234567A",  "0000000",   "/0000000",  ":0000000",
      "`0000000",  "g0000000", "0123abce"};
  uint64_t seed = 3;
  std::string text;
  for (uint64_t row = 0; row < 6000; ++row) {
    std::string line;
    pp::synthetic_criteo_line(9, row, line);
    // Replace some sparse fields with the odd strings or with hex ids from a
    // small pool (so that some repeat).
    line.pop_back();
    std::vector<std::string> f = split_tabs(line);
    for (int c = 14; c < 40; ++c) {
      uint64_t r = next_random(seed) % 8;
      if (r == 0) f[c] = odd[next_random(seed) % odd.size()];
      else if (r == 1) {
        char buf[9];
        std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(0x0123abc0 + next_random(seed) % 32));
        f[c] = buf;
      }
    }
    if (row % 97 == 5) f[3] = "12x";                // malformed
    if (row % 89 == 7) f[20] = std::string(70, 'q');  // too long
    line.clear();
    for (std::size_t i = 0; i < f.size(); ++i) line += (i ? "\t" : "") + f[i];
    text += line + "\n";
  }
  write_all(d / "mixed.tsv", text);
  std::vector<std::string> files = {(d / "mixed.tsv").string()};
  for (uint64_t min_count : {uint64_t{1}, uint64_t{2}, uint64_t{0}}) {  // 0: hash mode
    ref_options ro;
    ro.vocab = min_count > 0;
    ro.min_count = min_count;
    ro.range = 1u << 20;
    auto ref = reference(files, ro);
    for (int shards : {1, 2, 4}) {
      for (uint64_t cap : {uint64_t{0}, uint64_t{16} << 10}) {
        BOOST_TEST_CONTEXT("min_count " << min_count << " shards " << shards << " cap " << cap) {
          pp::preprocess_options o;
          o.mode = ro.vocab ? pp::categorical_mode::vocab : pp::categorical_mode::hash;
          o.min_count = min_count;
          o.hash_range = ro.range;
          o.parallelism = 2;
          o.memory_cap = cap;
          o.block_bytes = 16 << 10;
          fs::path out = scratch("mixed-out");
          auto r = pp::preprocess_local(files, out.string(), shards, o);
          BOOST_REQUIRE_MESSAGE(r.has_value(), (r ? std::string() : r.error().to_string()));
          BOOST_CHECK_EQUAL(r->malformed.total, ref.bad.size());
          std::string got = concat_parts(out, shards);
          BOOST_CHECK_MESSAGE(got == ref.records, "records differ: " + first_difference(got, ref.records));
          if (ro.vocab)
            for (int c = 0; c < 26; ++c) {
              std::ifstream vf(out / pp::vocab_file_name(c), std::ios::binary);
              std::string l;
              std::vector<std::string> strings;
              while (std::getline(vf, l)) strings.push_back(l.substr(0, l.rfind('\t')));
              BOOST_CHECK_MESSAGE(strings == ref.vocab[c], "vocabulary of column " << c << " differs");
            }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(count_chunks)

// `src`'s count chunks, each at most max_bytes (only a first chunk may be
// larger: one entry that does not fit).
std::vector<std::vector<char>> chunks_of(pp::count_stream& src, std::size_t max_bytes) {
  std::vector<std::vector<char>> chunks;
  for (;;) {
    auto c = pp::next_count_chunk(src, max_bytes);
    BOOST_REQUIRE(c.has_value());
    if (c->empty()) return chunks;
    BOOST_CHECK(c->size() <= max_bytes || chunks.empty());
    chunks.push_back(std::move(*c));
  }
}

// A chunk stream over `chunks`, then the empty chunk that ends it.
std::unique_ptr<pp::count_stream> stream_over(std::vector<std::vector<char>> chunks, std::string who = "test") {
  return pp::chunk_stream(
      [chunks = std::move(chunks), next = std::size_t{0}]() mutable -> hetflow::expected<std::vector<char>> {
        return next < chunks.size() ? chunks[next++] : std::vector<char>{};
      },
      std::move(who));
}

BOOST_AUTO_TEST_CASE(chunks_are_bounded_and_round_trip) {
  pp::count_entries e;
  for (int i = 0; i < 5000; ++i) e.emplace_back("key" + std::to_string(100000 + i), i + 1);
  auto chunks = chunks_of(*pp::memory_stream(e), 4096);
  BOOST_CHECK_GT(chunks.size(), 10u);
  auto in = stream_over(chunks);
  std::string_view s;
  uint64_t n;
  std::size_t i = 0;
  while (in->next(s, n)) {
    BOOST_REQUIRE_LT(i, e.size());
    BOOST_CHECK_EQUAL(std::string(s), e[i].first);
    BOOST_CHECK_EQUAL(n, e[i].second);
    ++i;
  }
  BOOST_CHECK_EQUAL(i, e.size());
  BOOST_CHECK(in->error().ok());
}

BOOST_AUTO_TEST_CASE(corrupt_chunks_are_errors_not_crashes) {
  std::vector<char> bad = {5, 0, 'a', 'b'};  // says 5 bytes, has 2, no count
  auto in = stream_over({bad}, "node 'n1'");
  std::string_view s;
  uint64_t n;
  BOOST_CHECK(!in->next(s, n));
  BOOST_CHECK(in->error().code() == hetflow::errc::wire_corrupt);
  BOOST_CHECK_NE(in->error().message().find("node 'n1'"), std::string::npos);
  // Out of order is corrupt too.
  pp::count_entries e = {{"b", 1}, {"a", 1}};
  auto in2 = stream_over({*pp::next_count_chunk(*pp::memory_stream(e), 1 << 20)});
  BOOST_CHECK(in2->next(s, n));
  BOOST_CHECK(!in2->next(s, n));
  BOOST_CHECK(in2->error().code() == hetflow::errc::wire_corrupt);
}

// Merges `raw` (the streams of the maps `in`, in order) and checks the kept
// strings, their counts and every input's ids against a std::map reference.
void check_merge_against_maps(const std::vector<pp::count_stream*>& raw,
                              const std::vector<std::map<std::string, uint64_t>>& in, uint64_t min_count,
                              const std::string& what) {
  std::map<std::string, uint64_t> total;
  for (auto& m : in)
    for (auto& [s, c] : m) total[s] += c;
  std::vector<std::string> kept;
  std::vector<std::vector<int32_t>> ids(in.size());
  auto st = pp::merge_column_ids(
      raw, min_count,
      [&](std::string_view s, uint64_t c) { kept.push_back(std::string(s) + ":" + std::to_string(c)); },
      [&](std::size_t i, int32_t id) { ids[i].push_back(id); });
  BOOST_REQUIRE(st.has_value());
  std::vector<std::string> want;
  std::map<std::string, int32_t> id_of;
  for (auto& [s, c] : total)
    if (c >= min_count) {
      id_of[s] = static_cast<int32_t>(want.size());
      want.push_back(s + ":" + std::to_string(c));
    }
  BOOST_CHECK_MESSAGE(kept == want, what);
  BOOST_CHECK_EQUAL(st->distinct, total.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    std::vector<int32_t> w;
    for (auto& [s, c] : in[i]) w.push_back(id_of.count(s) ? id_of[s] : -1);
    BOOST_CHECK_MESSAGE(ids[i] == w, what << ": input " << i);
  }
}

// Counts the entries a stream hands out in batches (next_hex).
class counting_hex final : public pp::count_stream {
public:
  counting_hex(std::unique_ptr<pp::count_stream> in, std::size_t& batched) : in_(std::move(in)), batched_(batched) {}
  bool next(std::string_view& s, uint64_t& count) override { return in_->next(s, count); }
  std::size_t next_hex(uint32_t* values, uint64_t* counts, std::size_t max) override {
    const std::size_t n = in_->next_hex(values, counts, max);
    batched_ += n;
    return n;
  }
  hetflow::status error() const override { return in_->error(); }

private:
  std::unique_ptr<pp::count_stream> in_;
  std::size_t& batched_;
};

// Hides a stream's next_hex: entries come one by one, as strings.
class one_by_one final : public pp::count_stream {
public:
  explicit one_by_one(std::unique_ptr<pp::count_stream> in) : in_(std::move(in)) {}
  bool next(std::string_view& s, uint64_t& count) override { return in_->next(s, count); }
  hetflow::status error() const override { return in_->error(); }

private:
  std::unique_ptr<pp::count_stream> in_;
};

BOOST_AUTO_TEST_CASE(hex_column_chunks_and_plain_ids_round_trip_and_refuse_corruption) {
  // A hashed merge's counts on the wire: with and without the empty string,
  // cut at many sizes (a chunk always holds at least one entry).
  for (bool with_empty : {false, true}) {
    pp::hex_column h;
    h.has_empty = with_empty;
    h.empty_count = with_empty ? 12345678901ull : 0;
    for (uint32_t v = 0; v < 1000; ++v) h.pairs.insert(h.pairs.end(), {v * 2654435761u, v % 7 + 1});
    for (std::size_t max : {std::size_t{1}, std::size_t{20}, std::size_t{100}, std::size_t{1} << 20}) {
      BOOST_TEST_CONTEXT("empty " << with_empty << " max " << max) {
        pp::hex_column got;
        std::size_t next = 0, chunks = 0;
        for (;;) {
          auto c = pp::next_hex_column_chunk(h, next, max);
          if (c.empty()) break;
          ++chunks;
          if (max >= 32) BOOST_CHECK_LE(c.size(), max);
          BOOST_REQUIRE(pp::add_hex_column_chunk(got, c));
        }
        BOOST_CHECK_EQUAL(next, h.entries());
        BOOST_CHECK(got.has_empty == h.has_empty && got.empty_count == h.empty_count && got.pairs == h.pairs);
        if (max == 20) BOOST_CHECK_GE(chunks, 1000u / 2);
      }
    }
  }
  // Corrupt chunks: truncated, an unknown tag, the empty string after values
  // or twice, a run longer than its bytes.
  pp::hex_column h;
  h.has_empty = true;
  h.empty_count = 4;
  h.pairs = {1, 2, 3, 4};
  std::size_t next = 0;
  auto good = pp::next_hex_column_chunk(h, next, 1 << 20);
  {
    pp::hex_column g;
    BOOST_CHECK(pp::add_hex_column_chunk(g, good));
    BOOST_CHECK(!pp::add_hex_column_chunk(g, good));  // the empty string after values
    // The empty string twice, with no values between.
    const std::vector<char> empty_only(good.begin(), good.begin() + 9);
    pp::hex_column twice;
    BOOST_CHECK(pp::add_hex_column_chunk(twice, empty_only));
    BOOST_CHECK(!pp::add_hex_column_chunk(twice, empty_only));
    // A column with no entries at all, and one with only the empty string.
    pp::hex_column none, only_empty;
    only_empty.has_empty = true;
    only_empty.empty_count = 7;
    std::size_t at = 0;
    BOOST_CHECK(pp::next_hex_column_chunk(none, at, 64).empty());
    at = 0;
    auto c1 = pp::next_hex_column_chunk(only_empty, at, 64);
    BOOST_CHECK_EQUAL(at, 1u);
    BOOST_CHECK(pp::next_hex_column_chunk(only_empty, at, 64).empty());
    pp::hex_column back;
    BOOST_CHECK(pp::add_hex_column_chunk(back, c1) && back.has_empty && back.empty_count == 7 && back.pairs.empty());
  }
  for (std::size_t cut = 1; cut < good.size(); ++cut) {
    pp::hex_column g;
    BOOST_CHECK_MESSAGE(!pp::add_hex_column_chunk(g, std::vector<char>(good.begin(), good.begin() + cut)) ||
                            cut == 9,  // the empty string's record alone is whole
                        "cut at " << cut);
  }
  {
    auto bad = good;
    bad[0] = 9;  // no such record tag
    pp::hex_column g;
    BOOST_CHECK(!pp::add_hex_column_chunk(g, bad));
    std::vector<char> run(good.begin() + 9, good.end());
    BOOST_CHECK(pp::add_hex_column_chunk(g, run));
    BOOST_CHECK(!pp::add_hex_column_chunk(g, std::vector<char>(good.begin(), good.begin() + 9)));  // empty after values
    uint32_t huge = 1u << 30;
    std::memcpy(run.data() + 1, &huge, 4);
    BOOST_CHECK(!pp::add_hex_column_chunk(g, run));
  }
  // Ids: int32 each, -1 for OOV; a ragged size or an id below -1 is refused.
  std::vector<int32_t> ids = {-1, 0, 5, 2147483647, -1};
  std::vector<char> c;
  pp::append_plain_ids(c, ids.data(), ids.size());
  std::vector<int32_t> back;
  BOOST_CHECK(pp::decode_plain_ids(c, back) && back == ids);
  BOOST_CHECK(!pp::decode_plain_ids(std::vector<char>(c.begin(), c.end() - 1), back));
  int32_t minus2 = -2;
  std::memcpy(c.data() + 4, &minus2, 4);
  BOOST_CHECK(!pp::decode_plain_ids(c, back));
}

BOOST_AUTO_TEST_CASE(sorted_hex_columns_go_delta_coded_and_refuse_corruption) {
  // export_column sends a column's values in increasing order: they go as
  // LEB128 gaps and counts, a few bytes an entry, across chunk boundaries;
  // values out of order go plain, and a column mixing both round-trips.
  std::mt19937 rng(7);
  pp::hex_column sorted;
  sorted.has_empty = true;
  sorted.empty_count = 99;
  {
    std::vector<uint32_t> v;
    for (int k = 0; k < 200000; ++k) v.push_back(static_cast<uint32_t>(rng()));
    v.push_back(0);
    v.push_back(UINT32_MAX);
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    for (uint32_t x : v) sorted.pairs.insert(sorted.pairs.end(), {x, x % 3 == 0 ? 1000000u : 1u + x % 4});
  }
  pp::hex_column mixed;  // increasing stretches and out-of-order ones
  for (uint32_t k = 0; k < 3000; ++k) {
    const uint32_t x = (k / 100) % 2 ? k * 2654435761u : k * 1000u;
    mixed.pairs.insert(mixed.pairs.end(), {x, k % 5 + 1});
  }
  for (const pp::hex_column* h : {&sorted, &mixed}) {
    for (std::size_t max : {std::size_t{1}, std::size_t{24}, std::size_t{100}, std::size_t{4096}, std::size_t{1} << 20}) {
      BOOST_TEST_CONTEXT("column " << (h == &sorted ? "sorted" : "mixed") << " max " << max) {
        pp::hex_column got;
        std::size_t next = 0, bytes = 0;
        for (;;) {
          auto c = pp::next_hex_column_chunk(*h, next, max);
          if (c.empty()) break;
          bytes += c.size();
          if (max >= 32) BOOST_CHECK_LE(c.size(), max);
          BOOST_REQUIRE(pp::add_hex_column_chunk(got, c));
        }
        BOOST_CHECK_EQUAL(next, h->entries());
        BOOST_CHECK(got.has_empty == h->has_empty && got.empty_count == h->empty_count && got.pairs == h->pairs);
        // ~200k random 32-bit values: gaps of ~21k take 3 bytes, counts 1-3.
        if (h == &sorted && max == (std::size_t{1} << 20)) BOOST_CHECK_LT(bytes, 5 * sorted.values());
      }
    }
  }
  // Corrupt delta records: every truncation, a value past 2^32 - 1, a
  // count past it, a LEB128 of more than 5 bytes, more entries than bytes.
  pp::hex_column h;
  h.pairs = {5, 1, 300, 2, 70000, 3};
  std::size_t next = 0;
  const auto good = pp::next_hex_column_chunk(h, next, 1 << 20);
  BOOST_REQUIRE_EQUAL(good[0], char(3));
  BOOST_CHECK_LT(good.size(), 5u + 3 * 8);
  for (std::size_t cut = 1; cut < good.size(); ++cut) {
    pp::hex_column g;
    BOOST_CHECK_MESSAGE(!pp::add_hex_column_chunk(g, std::vector<char>(good.begin(), good.begin() + cut)),
                        "cut at " << cut);
  }
  auto record = [](std::vector<uint8_t> body, uint32_t n) {
    std::vector<char> c(5 + body.size());
    c[0] = char(3);
    std::memcpy(c.data() + 1, &n, 4);
    for (std::size_t k = 0; k < body.size(); ++k) c[5 + k] = static_cast<char>(body[k]);
    return c;
  };
  {
    pp::hex_column g;  // UINT32_MAX, then a gap of 0: 2^32
    BOOST_CHECK(!pp::add_hex_column_chunk(g, record({0xff, 0xff, 0xff, 0xff, 0x0f, 1, 0, 1}, 2)));
    pp::hex_column g2;  // a count of 2^32
    BOOST_CHECK(!pp::add_hex_column_chunk(g2, record({1, 0x80, 0x80, 0x80, 0x80, 0x10}, 1)));
    pp::hex_column g3;  // a 6-byte LEB128
    BOOST_CHECK(!pp::add_hex_column_chunk(g3, record({0x81, 0x80, 0x80, 0x80, 0x80, 0x00, 1}, 1)));
    pp::hex_column g4;  // 3 entries promised, 2 given
    BOOST_CHECK(!pp::add_hex_column_chunk(g4, record({1, 1, 1, 1}, 3)));
    pp::hex_column g5;  // the gap counts from the previous chunk's last value
    BOOST_CHECK(pp::add_hex_column_chunk(g5, record({7, 1}, 1)));
    BOOST_CHECK(pp::add_hex_column_chunk(g5, record({0, 2}, 1)));
    BOOST_CHECK((g5.pairs == pp::big_vector<uint32_t>{7, 1, 8, 2}));
  }
  // A sorted export's ids go delta-coded (one byte for OOV and for small
  // steps): kept_ids_increase says when append_id can code them.
  const std::vector<int32_t> up = {-1, 0, 3, -1, 4, 100000, -1};
  BOOST_CHECK(pp::kept_ids_increase(up.data(), up.size()));
  const std::vector<int32_t> down = {-1, 5, -1, 2};
  BOOST_CHECK(!pp::kept_ids_increase(down.data(), down.size()));
  const std::vector<int32_t> twice = {3, 3};
  BOOST_CHECK(!pp::kept_ids_increase(twice.data(), twice.size()));
  std::vector<char> c;
  int32_t prev = -1;
  for (int32_t id : up) pp::append_id(c, id, prev);
  BOOST_CHECK_LE(c.size(), up.size() + 3);
  std::vector<int32_t> back;
  int32_t dec = -1;
  BOOST_CHECK(pp::decode_ids(c, dec, back) && back == up);
}

BOOST_AUTO_TEST_CASE(hex_runs_round_trip_mixed_with_strings) {
  // Strings around and between 8-hex-digit ones: "", upper case, 7 and 9
  // digits, a 'g'. The hex entries after the last other string go as runs.
  pp::count_entries e = {{"", 3}, {"0000000", 1}, {"00000000", 2}, {"0000000g", 1}, {"00000001", 4},
                         {"ABCDEF12", 5}, {"a", 1}};
  for (uint32_t v = 0xa0000000u; v < 0xa0000000u + 3000; v += 7) {
    char b[8];
    pp::hex8_chars(v, b);
    e.emplace_back(std::string(b, 8), v % 5 + 1);
  }
  e.emplace_back("ffffffff", 9);
  std::sort(e.begin(), e.end());
  for (std::size_t max : {std::size_t{20}, std::size_t{64}, std::size_t{4096}}) {
    auto chunks = chunks_of(*pp::memory_stream(e), max);
    std::size_t bytes = 0;
    for (auto& c : chunks) bytes += c.size();
    // Most entries are hex: 12 bytes each, not 18 (in chunks that hold runs).
    if (max == 4096) BOOST_CHECK_LT(bytes, e.size() * 13);
    auto in = stream_over(chunks);
    // Alternate next_hex (3 at a time) and next.
    std::vector<std::pair<std::string, uint64_t>> got;
    uint32_t vals[3];
    uint64_t cnts[3];
    for (bool by_hex = true;; by_hex = !by_hex) {
      if (by_hex) {
        std::size_t n = in->next_hex(vals, cnts, 3);
        for (std::size_t k = 0; k < n; ++k) {
          char b[8];
          pp::hex8_chars(vals[k], b);
          got.emplace_back(std::string(b, 8), cnts[k]);
        }
        continue;
      }
      std::string_view s;
      uint64_t n;
      if (!in->next(s, n)) break;
      got.emplace_back(std::string(s), n);
    }
    BOOST_CHECK(in->error().ok());
    BOOST_CHECK_MESSAGE(got == e, "chunks of at most " << max);
  }
}

BOOST_AUTO_TEST_CASE(corrupt_hex_runs_are_errors) {
  auto run = [](std::vector<uint32_t> values, uint32_t n_said, std::size_t cut) {
    std::vector<char> c(6 + values.size() * 12);
    const uint16_t mark = 0xffff;
    std::memcpy(c.data(), &mark, 2);
    std::memcpy(c.data() + 2, &n_said, 4);
    for (std::size_t k = 0; k < values.size(); ++k) {
      const uint64_t one = 1;
      std::memcpy(c.data() + 6 + 12 * k, &values[k], 4);
      std::memcpy(c.data() + 10 + 12 * k, &one, 8);
    }
    c.resize(c.size() - cut);
    return c;
  };
  auto drain = [](std::vector<char> chunk, bool batch) {
    auto in = stream_over({std::move(chunk)}, "node 'n1'");
    uint32_t v[8];
    uint64_t c[8];
    std::string_view s;
    uint64_t n;
    if (batch)
      while (in->next_hex(v, c, 8) > 0) {
      }
    while (in->next(s, n)) {
    }
    return in->error();
  };
  for (bool batch : {false, true}) {
    BOOST_CHECK(drain(run({1, 2, 3}, 3, 0), batch).ok());
    BOOST_CHECK(drain(run({1, 2, 3}, 4, 0), batch).code() == hetflow::errc::wire_corrupt);   // says more
    BOOST_CHECK(drain(run({1, 2, 3}, 3, 5), batch).code() == hetflow::errc::wire_corrupt);   // cut short
    BOOST_CHECK(drain(run({1, 3, 2}, 3, 0), batch).code() == hetflow::errc::wire_corrupt);   // out of order
    BOOST_CHECK(drain(run({1, 1}, 2, 0), batch).code() == hetflow::errc::wire_corrupt);      // twice
    BOOST_CHECK(drain(run({}, 0, 0), batch).code() == hetflow::errc::wire_corrupt);          // empty run
    BOOST_CHECK(drain(run({1}, 1, 14), batch).code() == hetflow::errc::wire_corrupt);        // half a header
  }
  // A run after a string that sorts after its first value, and a string
  // after a run whose last value sorts after it; a string that sorts after
  // the run is fine.
  auto string_chunk = [](const char* s) { return *pp::next_count_chunk(*pp::memory_stream({{s, 1}}), 1 << 20); };
  std::vector<char> chunk = string_chunk("b");
  auto tail = run({0x10u}, 1, 0);  // "00000010" < "b"
  chunk.insert(chunk.end(), tail.begin(), tail.end());
  for (bool batch : {false, true}) BOOST_CHECK(drain(chunk, batch).code() == hetflow::errc::wire_corrupt);
  for (const char* after : {"0", "g"}) {
    chunk = run({0xa0000000u}, 1, 0);  // "a0000000"
    auto str = string_chunk(after);
    chunk.insert(chunk.end(), str.begin(), str.end());
    for (bool batch : {false, true})
      BOOST_CHECK_MESSAGE(drain(chunk, batch).ok() == (std::string(after) == "g"), "a run, then \"" << after << "\"");
  }
}

BOOST_AUTO_TEST_CASE(strings_too_long_for_a_count_chunk_are_errors) {
  auto too_long = pp::next_count_chunk(*pp::memory_stream({{std::string(65535, 'x'), 1}}), 1 << 20);
  BOOST_REQUIRE(!too_long.has_value());
  BOOST_CHECK_NE(too_long.error().message().find("65535 bytes"), std::string::npos);
  auto longest = pp::next_count_chunk(*pp::memory_stream({{std::string(65534, 'x'), 1}}), 1 << 20);
  BOOST_REQUIRE(longest.has_value());
  BOOST_CHECK_EQUAL(longest->size(), 2u + 65534u + 8u);
}

BOOST_AUTO_TEST_CASE(merge_ids_with_and_without_hex_batches_agree) {
  // Every input either batches its hex entries (memory streams, chunked) or
  // hands them out one by one, in every combination: the merge compares
  // hex heads as integers and everything else as strings.
  std::mt19937 rng(5);
  for (std::size_t n = 1; n <= 4; ++n) {
    for (unsigned mask = 0; mask < (1u << n); ++mask) {
      std::vector<std::map<std::string, uint64_t>> in(n);
      for (auto& m : in)
        for (int k = 0; k < 400; ++k) {
          char buf[16];
          std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(rng() % 900) * 4099u);
          std::string s(buf);
          switch (rng() % 9) {
            case 0: s = s.substr(0, rng() % 8); break;   // shorter
            case 1: s[0] = 'A'; break;                    // upper case
            case 2: s += "x"; break;                      // longer
            default: break;
          }
          m[s] += 1 + rng() % 3;
        }
      std::vector<std::unique_ptr<pp::count_stream>> owned;
      std::vector<pp::count_stream*> raw;
      std::size_t batched = 0;
      for (std::size_t i = 0; i < n; ++i) {
        auto mem = pp::memory_stream(pp::count_entries(in[i].begin(), in[i].end()));
        if (mask & (1u << i)) owned.push_back(std::make_unique<counting_hex>(std::move(mem), batched));
        else owned.push_back(std::make_unique<one_by_one>(std::move(mem)));
        raw.push_back(owned.back().get());
      }
      check_merge_against_maps(raw, in, 3,
                               std::to_string(n) + " inputs, batching mask " + std::to_string(mask));
      // The batching inputs did hand out most of their (hex) entries in batches.
      if (mask != 0) BOOST_CHECK_GT(batched, 100u);
    }
  }
}

BOOST_AUTO_TEST_CASE(sorted_entries_order_is_byte_order) {
  using namespace std::string_literals;
  std::vector<std::string> keys = {""s, "a"s, "a\0"s, "a\0b"s, "ab"s, "b"s, "\xff"s, "\x7f"s,
                                   "abcdefghijklmno"s, "abcdefghijklmnop"s, "abcdefghijklmnoq"s,
                                   "abcdefgh"s, "abcdefgi"s, "abcdefg"s, "zzzzzzzzzzzzzzzzzzzzzz"s, "0"s};
  pp::string_key_map<uint64_t> m;
  for (std::size_t i = 0; i < keys.size(); ++i) m[keys[i]] += i + 1;
  auto e = pp::sorted_entries(m);
  std::vector<std::string> want = keys;
  std::sort(want.begin(), want.end());
  BOOST_REQUIRE_EQUAL(e.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) BOOST_CHECK_EQUAL(e[i].first, want[i]);
}

BOOST_AUTO_TEST_CASE(merge_sums_equal_strings) {
  auto a = pp::memory_stream({{"a", 1}, {"c", 2}});
  auto b = pp::memory_stream({{"a", 3}, {"b", 1}, {"c", 1}});
  std::vector<std::string> kept;
  auto st = pp::merge_column({a.get(), b.get()}, 3, [&](std::string_view s, uint64_t n) {
    kept.push_back(std::string(s) + ":" + std::to_string(n));
  });
  BOOST_REQUIRE(st.has_value());
  BOOST_CHECK((kept == std::vector<std::string>{"a:4", "c:3"}));
  BOOST_CHECK_EQUAL(st->distinct, 3u);
  BOOST_CHECK_EQUAL(st->kept, 2u);
}

BOOST_AUTO_TEST_CASE(merge_tells_each_input_the_ids_of_its_entries) {
  auto a = pp::memory_stream({{"a", 1}, {"c", 2}, {"d", 5}});
  auto b = pp::memory_stream({{"a", 3}, {"b", 1}, {"c", 1}});
  std::vector<std::string> kept;
  std::vector<std::vector<int32_t>> ids(2);
  auto st = pp::merge_column_ids(
      {a.get(), b.get()}, 3, [&](std::string_view s, uint64_t) { kept.emplace_back(s); },
      [&](std::size_t i, int32_t id) { ids[i].push_back(id); });
  BOOST_REQUIRE(st.has_value());
  BOOST_CHECK((kept == std::vector<std::string>{"a", "c", "d"}));
  BOOST_CHECK((ids[0] == std::vector<int32_t>{0, 1, 2}));
  BOOST_CHECK((ids[1] == std::vector<int32_t>{0, -1, 1}));
  BOOST_CHECK_EQUAL(st->kept, 3u);
  // The same ids through the wire coding, cut into two chunks.
  std::vector<char> c1, c2;
  int32_t prev = -1;
  for (int32_t id : {5, -1, 6, 300, -1}) pp::append_id(c1, id, prev);
  for (int32_t id : {100000, INT32_MAX - 1}) pp::append_id(c2, id, prev);
  std::vector<int32_t> back;
  int32_t p = -1;
  BOOST_REQUIRE(pp::decode_ids(c1, p, back));
  BOOST_REQUIRE(pp::decode_ids(c2, p, back));
  BOOST_CHECK((back == std::vector<int32_t>{5, -1, 6, 300, -1, 100000, INT32_MAX - 1}));
  // Truncated varints and ids past INT32_MAX are corrupt, not crashes.
  std::vector<char> bad(c2.begin(), c2.end() - 1);
  p = -1;
  BOOST_CHECK(!pp::decode_ids(bad, p, back));
  p = INT32_MAX - 1;
  BOOST_CHECK(!pp::decode_ids(std::vector<char>{5}, p, back));
  BOOST_CHECK(!pp::decode_ids(std::vector<char>{char(0xff), char(0xff), char(0xff), char(0xff), char(0xff), 1}, p, back));
}

BOOST_AUTO_TEST_CASE(key_compare_is_memcmp_order) {
  // Strings around the 8-byte fast path: hex ids, prefixes of each other,
  // high bytes (unsigned order), NULs, lengths 0..12.
  std::mt19937 rng(7);
  const char alphabet[] = {'0', '9', 'a', 'f', 'g', '\0', '\x7f', '\x80', '\xff'};
  std::vector<std::string> v{"", "0", "00000000", "000000000", "0000000", "ffffffff", "fffffffe", "ffffffff0"};
  for (int i = 0; i < 3000; ++i) {
    std::string s(rng() % 13, '0');
    for (char& c : s) c = alphabet[rng() % sizeof alphabet];
    v.push_back(s);
  }
  auto ref = [](std::string_view a, std::string_view b) {
    int c = std::memcmp(a.data(), b.data(), std::min(a.size(), b.size()));
    if (c != 0) return c < 0 ? -1 : 1;
    return a.size() == b.size() ? 0 : (a.size() < b.size() ? -1 : 1);
  };
  for (std::size_t i = 0; i < v.size(); ++i)
    for (std::size_t j = i; j < std::min(v.size(), i + 40); ++j) {
      int k = pp::key_compare(v[i], v[j]);
      BOOST_REQUIRE_EQUAL((k > 0) - (k < 0), ref(v[i], v[j]));
      BOOST_REQUIRE_EQUAL(pp::key_equal(v[i], v[j]), v[i] == v[j]);
    }
}

BOOST_AUTO_TEST_CASE(merge_ids_of_1_to_12_inputs_match_a_map) {
  // Both merge paths (a linear scan up to 8 inputs, a heap above), through
  // chunked streams whose views die on the next call.
  std::mt19937 rng(11);
  for (std::size_t n = 1; n <= 12; ++n) {
    std::vector<std::map<std::string, uint64_t>> in(n);
    for (auto& m : in)
      for (int k = 0; k < 300; ++k) {
        char buf[16];
        std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(rng() % 500));
        std::string s = rng() % 7 == 0 ? std::string(buf, rng() % 10) : std::string(buf);
        m[s] += 1 + rng() % 3;
      }
    std::vector<std::unique_ptr<pp::count_stream>> owned;
    std::vector<pp::count_stream*> raw;
    for (auto& m : in) {
      auto mem = std::make_shared<std::unique_ptr<pp::count_stream>>(
          pp::memory_stream(pp::count_entries(m.begin(), m.end())));
      owned.push_back(pp::chunk_stream([mem]() { return pp::next_count_chunk(**mem, 64); }, "test"));
      raw.push_back(owned.back().get());
    }
    check_merge_against_maps(raw, in, 4, std::to_string(n) + " inputs");
  }
}

BOOST_AUTO_TEST_CASE(merge_columns_are_spread_by_size) {
  // Criteo-like: a few big columns and many small ones.
  std::array<uint64_t, pp::sparse_columns> cost{};
  for (int c = 0; c < pp::sparse_columns; ++c) cost[std::size_t(c)] = 100 + c;
  cost[2] = 900000;
  cost[4] = 800000;
  cost[11] = 700000;
  cost[20] = 600000;
  for (int nodes : {1, 2, 3, 4, 26, 30}) {
    auto a = pp::assign_merge_columns(cost, nodes);
    std::vector<uint64_t> load(std::size_t(nodes), 0);
    uint64_t total = 0, biggest = 0;
    for (int c = 0; c < pp::sparse_columns; ++c) {
      BOOST_REQUIRE(a[std::size_t(c)] >= 0 && a[std::size_t(c)] < nodes);
      load[std::size_t(a[std::size_t(c)])] += cost[std::size_t(c)];
      total += cost[std::size_t(c)];
      biggest = std::max(biggest, cost[std::size_t(c)]);
    }
    // Longest-first: no node carries more than the even share plus the
    // biggest column.
    const uint64_t worst = *std::max_element(load.begin(), load.end());
    BOOST_TEST_CONTEXT("nodes " << nodes) {
      BOOST_CHECK_LE(worst, total / uint64_t(nodes) + biggest);
      if (nodes == 2) BOOST_CHECK_LT(worst, total * 6 / 10);  // (c mod 2 would give node 0 columns 2, 4 and 20: 77%)
      if (nodes >= 4) {  // each big column on its own node
        std::set<int> big{a[2], a[4], a[11], a[20]};
        BOOST_CHECK_EQUAL(big.size(), 4u);
      }
      int used = 0;
      for (auto l : load) used += l > 0;
      BOOST_CHECK_EQUAL(used, std::min(nodes, pp::sparse_columns));  // every node merges when it can
    }
    BOOST_CHECK(a == pp::assign_merge_columns(cost, nodes));  // deterministic
  }
}

BOOST_AUTO_TEST_CASE(merge_columns_go_to_the_faster_node_by_its_speed) {
  std::array<uint64_t, pp::sparse_columns> cost{};
  for (int c = 0; c < pp::sparse_columns; ++c) cost[std::size_t(c)] = 10000 + 1000 * uint64_t(c);
  cost[2] = 300000;
  cost[4] = 250000;
  // Equal speeds (or none usable: a zero, the wrong count) plan as by size alone.
  const auto plain = pp::assign_merge_columns(cost, 2);
  BOOST_CHECK(plain == pp::assign_merge_columns(cost, 2, {5.0, 5.0}));
  BOOST_CHECK(plain == pp::assign_merge_columns(cost, 2, {1.0, 0.0}));
  BOOST_CHECK(plain == pp::assign_merge_columns(cost, 2, {1.0, 2.0, 3.0}));
  for (double fast : {1.5, 3.0}) {
    const auto a = pp::assign_merge_columns(cost, 2, {1.0, fast});
    double load[2] = {0, 0}, total = 0;
    for (int c = 0; c < pp::sparse_columns; ++c) {
      load[a[std::size_t(c)]] += double(cost[std::size_t(c)] + 8192);
      total += double(cost[std::size_t(c)] + 8192);
    }
    BOOST_TEST_CONTEXT("node 1 " << fast << "x as fast") {
      // Node 1 takes about its share of the work, fast / (1 + fast), and
      // the two finish within one column of each other.
      BOOST_CHECK_CLOSE(load[1] / total, fast / (1 + fast), 12.0);
      BOOST_CHECK_LE(std::abs(load[0] - load[1] / fast), 300000.0 + 8192);
    }
  }
}

BOOST_AUTO_TEST_CASE(hashed_merge_keeps_each_merging_node_under_its_cap) {
  // 3 shards: 0 and 1 on node 0, 2 on node 1. Node 0 merges columns 0-12,
  // node 1 columns 13-25; every shard has 1000 entries of each column, 50k
  // of column 3 (node 0's) and 40k of column 20 (node 1's).
  pp::merge_memory mm;
  mm.sizes.resize(3);
  for (auto& s : mm.sizes) {
    s.fill(1000);
    s[3] = 50000;
    s[20] = 40000;
  }
  mm.holder = {0, 0, 1};
  mm.held = {5000, 7000};
  mm.in_flight = {1, 1};
  std::array<int, pp::sparse_columns> merger{};
  for (int c = 0; c < pp::sparse_columns; ++c) merger[std::size_t(c)] = c < 13 ? 0 : 1;
  const uint32_t all = (1u << pp::sparse_columns) - 1;
  uint32_t node1 = 0;
  for (int c = 13; c < pp::sparse_columns; ++c) node1 |= 1u << c;
  const uint64_t e = pp::pushed_entry_bytes, m = pp::merge_entry_bytes;
  // Node 0 merges on shard 0's table: shard 2's entries are pushed to it,
  // shard 1's (its own) are added too. Node 1 merges on shard 2's: shards 0
  // and 1's are pushed and added.
  const uint64_t need0 = 5000 + (12 * 1000 + 50000) * e + 100000 * m;
  const uint64_t need1 = 7000 + (12 * 2000 + 80000) * e + 80000 * m;
  auto fit = [&](uint32_t hashed, std::vector<uint64_t> cap) {
    mm.cap = std::move(cap);
    return pp::fit_hashed_merge(hashed, mm, merger);
  };
  BOOST_CHECK_EQUAL(fit(all, {need0, need1}), all);
  BOOST_CHECK_EQUAL(fit(all, {0, 0}), all);  // no limit
  // A byte less on node 1: its biggest column (20) merges sorted, and the
  // rest fits.
  BOOST_CHECK_EQUAL(fit(all, {need0, need1 - 1}), all & ~(1u << 20));
  BOOST_CHECK_EQUAL(fit(all, {need0 - 1, need1 - 1}), all & ~(1u << 20) & ~(1u << 3));
  // Columns that were not hashable stay that way and cost nothing.
  BOOST_CHECK_EQUAL(fit(all & ~(1u << 20), {need0, 7000 + 12 * 2000 * e + 2000 * m}), all & ~(1u << 20));
  // Two columns merged at once: the two largest count (column 3 and a small one).
  mm.in_flight = {2, 1};
  BOOST_CHECK_EQUAL(fit(all, {need0 + 2000 * m, need1}), all);
  BOOST_CHECK_EQUAL(fit(all, {need0 + 2000 * m - 1, need1}), all & ~(1u << 3));
  mm.in_flight = {1, 1};
  // A node whose own tables take its cap merges nothing by hashing.
  BOOST_CHECK_EQUAL(fit(all, {5000, need1}), node1);
  // Every shard on node 0: nothing is pushed, but its other shards' entries
  // are still added into the base table.
  mm.holder = {0, 0, 0};
  std::array<int, pp::sparse_columns> on_node0{};
  mm.cap = {5000 + 100000 * m};  // (held: node 0's 5000 only, as reported)
  BOOST_CHECK_EQUAL(pp::fit_hashed_merge(all, mm, on_node0), all);
  mm.cap = {5000 + 100000 * m - 1};
  BOOST_CHECK_EQUAL(pp::fit_hashed_merge(all, mm, on_node0), all & ~(1u << 3));
  // A node merging while holding no shard gets every shard's entries.
  const uint64_t need_none = 7000 + (12 * 3000 + 120000) * e + 120000 * m;
  BOOST_CHECK_EQUAL(fit(all, {0, need_none}), all);
  BOOST_CHECK_EQUAL(fit(all, {0, need_none - 1}), all & ~(1u << 20));
}

BOOST_AUTO_TEST_CASE(range_reducer_is_the_modulo) {
  uint64_t x = 12345;
  auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  for (uint64_t d : {uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{1000}, uint64_t{1} << 20, uint64_t{10000000},
                     uint64_t{16777216}, uint64_t{2147483647}, uint64_t{4294967295}}) {
    pp::range_reducer r(d);
    for (uint64_t h : {uint64_t{0}, uint64_t{1}, d - 1, d, d + 1, ~uint64_t{0}, ~uint64_t{0} - 1})
      BOOST_REQUIRE_EQUAL(r(h), h % d);
    for (int i = 0; i < 200000; ++i) {
      uint64_t h = next();
      BOOST_REQUIRE_EQUAL(r(h), h % d);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(shards)

BOOST_AUTO_TEST_CASE(plan_covers_every_byte_once_in_order) {
  auto plan = pp::plan_shards({100, 0, 50, 7}, 4);
  BOOST_REQUIRE_EQUAL(plan.size(), 4u);
  uint64_t total = 0;
  int last_file = 0;
  uint64_t last_end = 0;
  for (auto& s : plan)
    for (auto& p : s.pieces) {
      BOOST_CHECK(p.file > last_file || (p.file == last_file && p.begin == last_end));
      if (p.file != last_file) BOOST_CHECK_EQUAL(p.begin, 0u);
      last_file = p.file;
      last_end = p.end;
      total += p.end - p.begin;
    }
  BOOST_CHECK_EQUAL(total, 157u);
}

// Shard i's global byte range [lo, hi) in a plan over one concatenation.
std::vector<std::pair<uint64_t, uint64_t>> global_ranges(const std::vector<pp::shard_plan>& plan,
                                                         const std::vector<uint64_t>& sizes) {
  std::vector<uint64_t> start(sizes.size() + 1, 0);
  for (std::size_t f = 0; f < sizes.size(); ++f) start[f + 1] = start[f] + sizes[f];
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (auto& s : plan) {
    if (s.pieces.empty()) {
      out.push_back({0, 0});
      continue;
    }
    out.push_back({start[std::size_t(s.pieces.front().file)] + s.pieces.front().begin,
                   start[std::size_t(s.pieces.back().file)] + s.pieces.back().end});
  }
  return out;
}

BOOST_AUTO_TEST_CASE(weighted_plan_cuts_in_proportion_and_equal_weights_are_the_old_plan) {
  const std::vector<uint64_t> sizes{100, 0, 50, 7};
  // Equal weights (any value) give exactly the plan by count.
  for (int n : {1, 2, 3, 4, 7}) {
    auto a = pp::plan_shards(sizes, n);
    for (uint64_t w : {uint64_t{1}, uint64_t{5}}) {
      auto b = pp::plan_shards(sizes, std::vector<uint64_t>(std::size_t(n), w));
      BOOST_REQUIRE_EQUAL(a.size(), b.size());
      for (std::size_t i = 0; i < a.size(); ++i) {
        BOOST_REQUIRE_EQUAL(a[i].pieces.size(), b[i].pieces.size());
        for (std::size_t k = 0; k < a[i].pieces.size(); ++k) {
          BOOST_CHECK_EQUAL(a[i].pieces[k].file, b[i].pieces[k].file);
          BOOST_CHECK_EQUAL(a[i].pieces[k].begin, b[i].pieces[k].begin);
          BOOST_CHECK_EQUAL(a[i].pieces[k].end, b[i].pieces[k].end);
        }
      }
    }
  }
  // 3 : 1 of 157 bytes: the cut at 157 * 3 / 4 = 117 (file 2, offset 17).
  auto p = pp::plan_shards(sizes, std::vector<uint64_t>{3, 1});
  auto r = global_ranges(p, sizes);
  BOOST_CHECK_EQUAL(r[0].first, 0u);
  BOOST_CHECK_EQUAL(r[0].second, 117u);
  BOOST_CHECK_EQUAL(r[1].first, 117u);
  BOOST_CHECK_EQUAL(r[1].second, 157u);
  BOOST_CHECK_EQUAL(p[0].bytes() + p[1].bytes(), 157u);
  // 1 : 2 : 1, and a weight of 0 counts as 1; the ranges tile [0, 157).
  p = pp::plan_shards(sizes, std::vector<uint64_t>{1, 2, 0});
  r = global_ranges(p, sizes);
  BOOST_CHECK_EQUAL(r[0].second, 157u * 1 / 4);
  BOOST_CHECK_EQUAL(r[1].first, r[0].second);
  BOOST_CHECK_EQUAL(r[1].second, 157u * 3 / 4);
  BOOST_CHECK_EQUAL(r[2].first, r[1].second);
  BOOST_CHECK_EQUAL(r[2].second, 157u);
  // Huge inputs and weights: no overflow, the last shard ends at the total.
  const std::vector<uint64_t> big{uint64_t{1} << 62, uint64_t{1} << 61};
  p = pp::plan_shards(big, std::vector<uint64_t>{~uint64_t{0}, ~uint64_t{0} / 2});
  r = global_ranges(p, big);
  BOOST_CHECK_EQUAL(r.back().second, (uint64_t{1} << 62) + (uint64_t{1} << 61));
  BOOST_CHECK_EQUAL(r[0].second, r[1].first);
}

BOOST_AUTO_TEST_CASE(range_claims_hand_out_every_byte_once_in_contiguous_slices) {
  std::mt19937_64 rng(7);
  for (int n = 1; n <= 5; ++n) {
    for (int trial = 0; trial < 40; ++trial) {
      const uint64_t total = 1 + rng() % 5000;
      const uint64_t unit = 1 + rng() % 64;
      std::vector<uint64_t> w;
      for (int i = 0; i < n; ++i) w.push_back(1 + rng() % 4);
      pp::range_claims rc(total, w, unit);
      BOOST_TEST_CONTEXT("n " << n << " trial " << trial << " total " << total << " unit " << unit) {
        std::vector<uint64_t> owner(total, ~uint64_t{0});
        std::vector<bool> done(std::size_t(n), false);
        // Shards lost part way (one, or two side by side) stop claiming; the
        // others take the gaps beside them, and a gap between two lost ones
        // joins the slice of the one lost last.
        const int lost = trial % 3 == 0 && n > 1 ? int(rng() % uint64_t(n)) : -1;
        const int lost2 = trial % 2 == 0 && lost >= 0 && lost + 1 < n ? lost + 1 : -1;
        int left = n, claims = 0;
        while (left > 0) {
          const int k = int(rng() % uint64_t(n));
          if (done[std::size_t(k)]) continue;
          if ((k == lost && claims > 2 * n) || (k == lost2 && claims > 3 * n)) {
            rc.freeze(k);
            BOOST_CHECK(rc.claim(k).empty());
            // What its slice took in from a gap beside the other lost one.
            const pp::byte_range sl = rc.slice(k);
            for (uint64_t b = sl.begin; b < sl.end; ++b) {
              BOOST_REQUIRE(owner[b] == ~uint64_t{0} || owner[b] == uint64_t(k));
              owner[b] = uint64_t(k);
            }
            done[std::size_t(k)] = true, --left;
            continue;
          }
          const pp::byte_range r = rc.claim(k);
          ++claims;
          if (r.empty()) {
            done[std::size_t(k)] = true, --left;
            continue;
          }
          BOOST_REQUIRE_LE(r.end, total);
          for (uint64_t b = r.begin; b < r.end; ++b) {
            BOOST_REQUIRE_EQUAL(owner[b], ~uint64_t{0});
            owner[b] = uint64_t(k);
          }
          // Each shard's claims stay one contiguous slice.
          const pp::byte_range sl = rc.slice(k);
          BOOST_REQUIRE(sl.begin <= r.begin && r.end <= sl.end);
        }
        for (uint64_t b = 0; b < total; ++b) BOOST_REQUIRE_NE(owner[b], ~uint64_t{0});
        for (int k = 0; k < n; ++k) {
          const pp::byte_range sl = rc.slice(k);
          for (uint64_t b = sl.begin; b < sl.end; ++b) BOOST_REQUIRE_EQUAL(owner[b], uint64_t(k));
        }
        // The first shard's slice starts at the first byte, the last's ends
        // at the end.
        BOOST_CHECK_EQUAL(rc.slice(0).begin, 0u);
        BOOST_CHECK_EQUAL(rc.slice(n - 1).end, total);
      }
    }
  }
  // Two neighbours lost before they claimed anything: the gap between their
  // start points goes to the one frozen last, the rest to the live shard.
  {
    pp::range_claims rc(1000, {1, 1, 1}, 10);
    rc.freeze(1);
    rc.freeze(2);
    const pp::byte_range s1 = rc.slice(1), s2 = rc.slice(2);
    BOOST_CHECK(s1.empty());
    BOOST_CHECK_EQUAL(s2.end, 1000u);
    uint64_t covered = s2.bytes();
    for (pp::byte_range r = rc.claim(0); !r.empty(); r = rc.claim(0)) covered += r.bytes();
    BOOST_CHECK_EQUAL(covered, 1000u);
    BOOST_CHECK_EQUAL(rc.slice(0).end, s2.begin);
  }
  // A lone shard takes everything at once.
  pp::range_claims one(1000, {1}, 10);
  const pp::byte_range all = one.claim(0);
  BOOST_CHECK(all.begin == 0 && all.end == 1000);
  BOOST_CHECK(one.claim(0).empty());
  // Two alike shards: the claims shrink as the gap closes, down to the unit.
  pp::range_claims two(1 << 20, {1, 1}, 1 << 12);
  const pp::byte_range a = two.claim(0), b = two.claim(1);
  BOOST_CHECK_EQUAL(a.begin, 0u);
  BOOST_CHECK_EQUAL(a.bytes(), (1u << 20) / 4);
  BOOST_CHECK_EQUAL(b.end, 1u << 20);
  BOOST_CHECK_EQUAL(b.bytes(), ((1u << 20) - a.end) / 4);
  BOOST_CHECK_EQUAL(pp::default_claim_unit(uint64_t{251} << 20, 2), (uint64_t{251} << 20) / 128);
  BOOST_CHECK_EQUAL(pp::default_claim_unit(1000, 2), uint64_t{1} << 20);
}

BOOST_AUTO_TEST_CASE(align_to_line_owns_lines_starting_in_range) {
  const char* t = "ab\ncd\nef";
  BOOST_CHECK_EQUAL(pp::align_to_line(t, 8, 0), 0u);
  BOOST_CHECK_EQUAL(pp::align_to_line(t, 8, 1), 3u);
  BOOST_CHECK_EQUAL(pp::align_to_line(t, 8, 3), 3u);
  BOOST_CHECK_EQUAL(pp::align_to_line(t, 8, 7), 8u);
  BOOST_CHECK_EQUAL(pp::count_lines_before(t, 6), 2u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(resources)

void fake_file(const fs::path& root, const std::string& rel, const std::string& text) {
  fs::create_directories((root / rel).parent_path());
  write_all(root / rel, text);
}

BOOST_AUTO_TEST_CASE(cgroup_v2_limits) {
  fs::path r = scratch("fake-v2");
  fake_file(r, "cores", "8\n");
  fake_file(r, "proc/meminfo", "MemTotal:       16000000 kB\nMemAvailable:   12000000 kB\n");
  fake_file(r, "proc/loadavg", "3.00 2.00 1.00 2/300 1234\n");
  fake_file(r, "proc/self/status", "Name: x\nVmRSS:     2048 kB\n");
  fake_file(r, "proc/self/cgroup", "0::/job\n");
  fake_file(r, "sys/fs/cgroup/job/cpu.max", "150000 100000\n");
  fake_file(r, "sys/fs/cgroup/job/memory.max", "2147483648\n");
  fake_file(r, "sys/fs/cgroup/job/memory.current", "1073741824\n");
  auto s = pp::probe_resources(r.string());
  BOOST_CHECK_EQUAL(s.cores, 8);
  BOOST_CHECK_CLOSE(s.cpu_quota, 1.5, 1e-9);
  BOOST_CHECK_EQUAL(s.mem_available, 12000000ull * 1024);
  BOOST_CHECK_EQUAL(s.cgroup_mem_limit, 2147483648ull);
  BOOST_CHECK_EQUAL(s.free_memory(), 1073741824ull);  // the cgroup's headroom binds
  BOOST_CHECK_EQUAL(s.rss, 2048ull * 1024);
  // Quota 1.5 cores, load 3 of which 2 are ours: 1.5 - 1 = 0.5 -> at least 1.
  BOOST_CHECK_EQUAL(pp::choose_parallelism(s, 0, 2, 0, 0, 64), 1);
  BOOST_CHECK_EQUAL(pp::choose_parallelism(s, 3, 0, 0, 0, 64), 3);  // forced
  fake_file(r, "sys/fs/cgroup/job/cpu.max", "max 100000\n");
  fake_file(r, "proc/loadavg", "0.00 0.00 0.00 1/300 1234\n");
  s = pp::probe_resources(r.string());
  BOOST_CHECK_EQUAL(s.cpu_quota, 0.0);
  BOOST_CHECK_EQUAL(pp::choose_parallelism(s, 0, 0, 0, 0, 64), 8);
  // Memory: 1 GiB free, 300 MiB per worker -> 3 workers.
  BOOST_CHECK_EQUAL(pp::choose_parallelism(s, 0, 0, 300u << 20, 0, 64), 3);
  BOOST_CHECK_EQUAL(pp::choose_parallelism(s, 0, 0, 300u << 20, 600u << 20, 64), 2);
}

BOOST_AUTO_TEST_CASE(split_by_speed_weighs_each_nodes_cores_by_its_pass1_speed) {
  // [job] split_by = "speed": milli-cores x rows/s over the fastest node's.
  using w = std::vector<uint64_t>;
  BOOST_CHECK(pp::split_weights({1000, 1000}, {4e6, 2e6}) == (w{1000, 500}));
  BOOST_CHECK(pp::split_weights({2000, 1000}, {2e6, 4e6}) == (w{1000, 1000}));  // 2 slow cores = 1 fast one
  BOOST_CHECK(pp::split_weights({500, 4000}, {3e6, 3e6}) == (w{500, 4000}));    // alike CPUs: the cores alone
  // A node lost before it said (0 cores, or no speed) weighs the others' mean.
  BOOST_CHECK(pp::split_weights({1000, 0, 1000}, {4e6, 0, 2e6}) == (w{1000, 750, 500}));
  BOOST_CHECK(pp::split_weights({1000, 1000, 1000}, {4e6, 0, 2e6}) == (w{1000, 750, 500}));
  BOOST_CHECK(pp::split_weights({0, 0}, {}) == (w{1000, 1000}));
  BOOST_CHECK(pp::split_weights({1000, 1000}, {1e9, 1}) == (w{1000, 1}));  // at least 1
  // split_by = "cores": no speeds, the cores alone, a lost node the others' mean.
  BOOST_CHECK(pp::split_weights({2000, 1000}, {}) == (w{2000, 1000}));
  BOOST_CHECK(pp::split_weights({2000, 0, 1000}, {}) == (w{2000, 1500, 1000}));
  // The speed itself: parsing and counting real rows for the time asked.
  const auto t0 = std::chrono::steady_clock::now();
  const double r = pp::pass1_rows_per_s(0.02);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_TEST(r > 1e4);   // any machine parses more than 10k rows a second
  BOOST_TEST(r < 1e9);
  BOOST_TEST(took >= 0.02);
  BOOST_TEST(took < 5.0);
}

BOOST_AUTO_TEST_CASE(governor_follows_the_free_cores_and_pins_when_forced) {
  // The stream shards' and the preprocess job's degree of parallelism: chosen
  // again on update() (every_s = 0 here) from a changing fake /proc.
  fs::path r = scratch("fake-gov");
  fake_file(r, "cores", "8\n");
  fake_file(r, "proc/meminfo", "MemTotal:       16000000 kB\nMemAvailable:   12000000 kB\n");
  fake_file(r, "proc/loadavg", "0.00 0.00 0.00 1/300 1234\n");
  fake_file(r, "proc/self/cgroup", "0::/\n");
  pp::parallelism_governor g(0, 0, 0.0, r.string() + "/", 64);
  BOOST_CHECK_EQUAL(g.current(), 8);
  // Others load 6 of the 8 cores (load 14 with our 8 busy): 2 left.
  fake_file(r, "proc/loadavg", "14.00 0.00 0.00 1/300 1234\n");
  BOOST_CHECK_EQUAL(g.update(), 2);
  // The others leave (load = our 2): all 8 again.
  fake_file(r, "proc/loadavg", "2.00 0.00 0.00 1/300 1234\n");
  BOOST_CHECK_EQUAL(g.update(), 8);
  BOOST_CHECK_EQUAL(g.min_seen(), 2);
  BOOST_CHECK_EQUAL(g.max_seen(), 8);
  // A cgroup quota of 3 cores binds.
  fake_file(r, "sys/fs/cgroup/cpu.max", "300000 100000\n");
  fake_file(r, "proc/loadavg", "8.00 0.00 0.00 1/300 1234\n");
  BOOST_CHECK_EQUAL(g.update(), 3);
  // Not again before every_s.
  pp::parallelism_governor slow(0, 0, 3600.0, r.string() + "/", 64);
  const int first = slow.current();
  fake_file(r, "proc/loadavg", "60.00 0.00 0.00 1/300 1234\n");
  BOOST_CHECK_EQUAL(slow.update(), first);
  // Forced: pinned whatever the load, capped by max_workers.
  pp::parallelism_governor pinned(5, 0, 0.0, r.string() + "/", 64);
  BOOST_CHECK_EQUAL(pinned.update(), 5);
  BOOST_CHECK_EQUAL(pp::parallelism_governor(100, 0, 0.0, r.string() + "/", 4).current(), 4);
}

BOOST_AUTO_TEST_CASE(cgroup_v1_limits_and_no_limit) {
  fs::path r = scratch("fake-v1");
  fake_file(r, "cores", "4\n");
  fake_file(r, "proc/meminfo", "MemTotal:       8000000 kB\nMemAvailable:   6000000 kB\n");
  fake_file(r, "proc/loadavg", "0.50 0.50 0.50 1/100 1\n");
  fake_file(r, "proc/self/cgroup", "4:memory:/a/b\n1:cpu,cpuacct:/a/b\n0::/\n");
  // The process's own path is missing: the controller's root is used.
  fake_file(r, "sys/fs/cgroup/cpu/cpu.cfs_quota_us", "200000\n");
  fake_file(r, "sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n");
  fake_file(r, "sys/fs/cgroup/memory/a/b/memory.limit_in_bytes", "9223372036854771712\n");
  auto s = pp::probe_resources(r.string());
  BOOST_CHECK_CLOSE(s.cpu_quota, 2.0, 1e-9);
  BOOST_CHECK_EQUAL(s.cgroup_mem_limit, 0u);  // "unlimited"
  BOOST_CHECK_EQUAL(s.free_memory(), 6000000ull * 1024);
  BOOST_CHECK_EQUAL(pp::choose_parallelism(s, 0, 0, 0, 0, 64), 2);  // min(4, quota 2) - 0.5 -> 2
}

BOOST_AUTO_TEST_CASE(capacity_for_the_split_across_nodes) {
  // What a preprocess job cuts its input by (one weight per node).
  fs::path r = scratch("fake-cap");
  fake_file(r, "cores", "4\n");
  fake_file(r, "machine_cores", "16\n");
  fake_file(r, "proc/meminfo", "MemTotal:       8000000 kB\nMemAvailable:   6000000 kB\n");
  fake_file(r, "proc/loadavg", "0.00 0.00 0.00 1/100 1\n");
  fake_file(r, "proc/self/cgroup", "0::/\n");
  auto s = pp::probe_resources(r.string());
  BOOST_CHECK_EQUAL(s.machine_cores, 16);
  BOOST_CHECK_EQUAL(s.capacity_cores(0), 4.0);  // an idle machine: the affinity's 4 cores
  BOOST_CHECK_EQUAL(s.capacity_cores(2), 2.0);  // 2 threads forced
  BOOST_CHECK_EQUAL(s.capacity_cores(9), 4.0);  // more threads than cores
  // Load 8 on 16 cores: a quarter of it on our 4 -> 2 cores.
  fake_file(r, "proc/loadavg", "8.00 0.00 0.00 1/100 1\n");
  BOOST_CHECK_EQUAL(pp::probe_resources(r.string()).capacity_cores(0), 2.0);
  // A full machine: still one core.
  fake_file(r, "proc/loadavg", "40.00 0.00 0.00 1/100 1\n");
  BOOST_CHECK_EQUAL(pp::probe_resources(r.string()).capacity_cores(0), 1.0);
  // A quota of 2.6 cores (no load), rounded to quarter cores; of 0.3: 0.25.
  fake_file(r, "proc/loadavg", "0.00 0.00 0.00 1/100 1\n");
  fake_file(r, "sys/fs/cgroup/cpu.max", "260000 100000\n");
  BOOST_CHECK_EQUAL(pp::probe_resources(r.string()).capacity_cores(0), 2.5);
  fake_file(r, "sys/fs/cgroup/cpu.max", "30000 100000\n");
  BOOST_CHECK_EQUAL(pp::probe_resources(r.string()).capacity_cores(0), 0.25);
  // Without a machine_cores file the machine is the affinity's cores.
  fs::path r2 = scratch("fake-cap2");
  fake_file(r2, "cores", "2\n");
  fake_file(r2, "proc/loadavg", "1.00 0.00 0.00 1/100 1\n");
  fake_file(r2, "proc/self/cgroup", "0::/\n");
  s = pp::probe_resources(r2.string());
  BOOST_CHECK_EQUAL(s.machine_cores, 2);
  BOOST_CHECK_EQUAL(s.capacity_cores(0), 1.0);
}

BOOST_AUTO_TEST_CASE(this_machine) {
  auto s = pp::probe_resources();
  BOOST_CHECK_GE(s.cores, 1);
  BOOST_CHECK_GT(s.mem_total, 0u);
  BOOST_CHECK_GT(s.rss, 0u);
  BOOST_TEST_MESSAGE("this machine: " << s.to_string());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(generator)

BOOST_AUTO_TEST_CASE(same_rows_and_seed_same_bytes) {
  fs::path d = scratch("gen");
  pp::synthetic_options o;
  o.rows = 50000;
  o.seed = 9;
  o.threads = 1;
  BOOST_REQUIRE(pp::write_synthetic_criteo((d / "a").string(), o).ok());
  o.threads = 2;
  BOOST_REQUIRE(pp::write_synthetic_criteo((d / "b").string(), o).ok());
  o.seed = 10;
  BOOST_REQUIRE(pp::write_synthetic_criteo((d / "c").string(), o).ok());
  std::string a = read_all(d / "a"), b = read_all(d / "b"), c = read_all(d / "c");
  BOOST_CHECK(a == b);
  BOOST_CHECK(a != c);
  // A prefix of a longer run is the shorter run.
  o.seed = 9;
  o.rows = 1000;
  BOOST_REQUIRE(pp::write_synthetic_criteo((d / "p").string(), o).ok());
  std::string p = read_all(d / "p");
  BOOST_CHECK(a.compare(0, p.size(), p) == 0);

  // Shape: every line valid; missing values, negatives, skew, high cardinality.
  std::istringstream in(a);
  std::string line;
  uint64_t lines = 0, missing_dense = 0, missing_sparse = 0, negatives = 0;
  std::vector<std::map<std::string, uint64_t>> counts(26);
  while (std::getline(in, line)) {
    ++lines;
    BOOST_REQUIRE_EQUAL(ref_check(line, true, 64), "");
    auto f = split_tabs(line);
    for (int j = 1; j <= 13; ++j) {
      missing_dense += f[j].empty();
      negatives += !f[j].empty() && f[j][0] == '-';
    }
    for (int c = 0; c < 26; ++c) {
      missing_sparse += f[14 + c].empty();
      ++counts[c][f[14 + c]];
    }
  }
  BOOST_CHECK_EQUAL(lines, 50000u);
  BOOST_CHECK_GT(missing_dense, 10000u);
  BOOST_CHECK_GT(missing_sparse, 10000u);
  BOOST_CHECK_GT(negatives, 1000u);
  // C3 (cardinality ~10^7): many distinct values, yet the top value is frequent (Zipf-like).
  uint64_t top = 0;
  for (auto& [s, n] : counts[2]) top = std::max(top, s.empty() ? 0 : n);
  BOOST_CHECK_GT(counts[2].size(), 10000u);
  BOOST_CHECK_GT(top, 500u);
  BOOST_CHECK_LT(counts[8].size(), 5u);  // C9: 3 values
}

BOOST_AUTO_TEST_SUITE_END()
