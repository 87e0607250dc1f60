// kernels/preprocess: output equals a straightforward reference implementation
// (std::map, std::stoll, std::log; written here, sharing no code with the
// library) on generated files, for 1, 2 and 4 shards, vocab and hash modes,
// with min_count; spilling under a tiny memory cap; count chunks on the wire;
// shard plans; the resource probe on fake /proc and cgroup trees; generator
// determinism.
#define BOOST_TEST_MODULE preprocess
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/preprocess/count_stream.hpp"
#include "kernels/preprocess/input_split.hpp"
#include "kernels/preprocess/line_parser.hpp"
#include "kernels/preprocess/preprocess.hpp"
#include "kernels/preprocess/resources.hpp"
#include "kernels/preprocess/synthetic_criteo.hpp"

namespace fs = std::filesystem;
namespace pp = hetflow::kernels::preprocess;

namespace {

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("hetflow-pp-test-" + std::to_string(::getpid())) / name;
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
        BOOST_TEST_CONTEXT("vocab " << m.vocab << " min_count " << m.min_count << " range " << m.range
                                    << " shards " << shards << " block " << block) {
          pp::preprocess_options o;
          o.mode = m.vocab ? pp::categorical_mode::vocab : pp::categorical_mode::hash;
          o.min_count = m.min_count;
          o.hash_range = m.range;
          o.block_bytes = block;
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

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(count_chunks)

BOOST_AUTO_TEST_CASE(chunks_are_bounded_and_round_trip) {
  pp::count_entries e;
  for (int i = 0; i < 5000; ++i) e.emplace_back("key" + std::to_string(100000 + i), i + 1);
  auto src = pp::memory_stream(e);
  std::vector<std::vector<char>> chunks;
  for (;;) {
    auto c = pp::next_count_chunk(*src, 4096);
    BOOST_REQUIRE(c.has_value());
    if (c->empty()) break;
    BOOST_CHECK_LE(c->size(), 4096u);
    chunks.push_back(std::move(*c));
  }
  BOOST_CHECK_GT(chunks.size(), 10u);
  std::size_t next = 0;
  auto in = pp::chunk_stream(
      [&]() -> hetflow::expected<std::vector<char>> {
        return next < chunks.size() ? chunks[next++] : std::vector<char>{};
      },
      "test");
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
  bool once = false;
  auto in = pp::chunk_stream(
      [&]() -> hetflow::expected<std::vector<char>> {
        if (once) return std::vector<char>{};
        once = true;
        return bad;
      },
      "node 'n1'");
  std::string_view s;
  uint64_t n;
  BOOST_CHECK(!in->next(s, n));
  BOOST_CHECK(in->error().code() == hetflow::errc::wire_corrupt);
  BOOST_CHECK_NE(in->error().message().find("node 'n1'"), std::string::npos);
  // Out of order is corrupt too.
  pp::count_entries e = {{"b", 1}, {"a", 1}};
  std::vector<char> chunk = *pp::next_count_chunk(*pp::memory_stream(e), 1 << 20);
  once = false;
  bad = chunk;
  auto in2 = pp::chunk_stream(
      [&]() -> hetflow::expected<std::vector<char>> {
        if (once) return std::vector<char>{};
        once = true;
        return bad;
      },
      "x");
  BOOST_CHECK(in2->next(s, n));
  BOOST_CHECK(!in2->next(s, n));
  BOOST_CHECK(in2->error().code() == hetflow::errc::wire_corrupt);
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
