#include "kernels/criteo_text.hpp"

#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "kernels/criteo_dataset.hpp"
#include "kernels/trainer.hpp"
#include "kernels/preprocess/input_split.hpp"
#include "kernels/preprocess/line_parser.hpp"
#include "kernels/preprocess/vocabulary.hpp"

namespace hetflow::kernels {

namespace pp = preprocess;

struct criteo_text::impl {
  criteo_text_options opt;
  std::vector<std::shared_ptr<const pp::mapped_file>> files;
  std::vector<int64_t> first_row;  // per file: its first row's id; then the total
  std::vector<uint64_t> offsets;   // per row: its line's byte offset in its file
  int64_t rows = 0;                // used (max_rows applied)
  uint64_t lines = 0, bytes = 0;
  double seconds = 0;
  pp::malformed_report malformed;
  pp::range_reducer reduce{1};

  // Lines starting at offsets <= fast_last(f) may take the fast parser: the
  // rule of preprocess's parse_block, so the same lines take the same path.
  bool fast_ok(const pp::mapped_file& f, uint64_t off) const noexcept {
    const uint64_t bound = pp::fast_parse_read_bound(opt.max_field_bytes);
    return opt.max_field_bytes >= pp::fast_parse_min_field && f.size() >= bound && off <= f.size() - bound;
  }

  // The row at `off` of file `fi`, transformed as preprocess's apply_shard
  // (hash mode) writes it and load_criteo reads it back.
  status read_row(std::size_t fi, uint64_t off, float* x, int32_t* y) const {
    const pp::mapped_file& f = *files[fi];
    const char* p = f.data() + off;
    pp::parsed_line pl;
    bool ok = fast_ok(f, off) && pp::parse_criteo_line_fast(p, opt.max_field_bytes, pl) != nullptr;
    if (!ok) {
      const char* nl = static_cast<const char*>(std::memchr(p, '\n', std::size_t(f.size() - off)));
      ok = nl != nullptr &&
           !pp::parse_criteo_line(std::string_view(p, std::size_t(nl - p)), opt.max_field_bytes, pl);
    }
    if (!ok)
      return make_error(errc::internal, "criteo text: the line at byte " + std::to_string(off) + " of " + f.path() +
                                            " no longer parses; was the file changed during training?");
    *y = pl.label;
    for (int j = 0; j < pp::dense_columns; ++j)
      x[j] = pl.dense[j] <= 0 ? 0.0f : pp::dense_transform(pl.dense[j]);  // = preprocess's dense_value
    for (int c = 0; c < pp::sparse_columns; ++c)
      x[pp::dense_columns + c] = float(reduce(pp::fnv1a64(pl.sparse[c])));  // = hash_id(s, range)
    return {};
  }

  std::size_t file_of(int64_t row) const noexcept {
    return std::size_t(std::upper_bound(first_row.begin(), first_row.end(), row) - first_row.begin() - 1);
  }
};

namespace {

using clock_type = std::chrono::steady_clock;

// One line-aligned block of a file, indexed on its own.
struct text_block {
  std::size_t file = 0;
  uint64_t begin = 0, end = 0;
  // results
  std::vector<uint64_t> offsets;  // well-formed lines
  uint64_t lines = 0;
  struct hit {
    uint64_t line = 0;  // in the block, 0-based
    pp::malformed_kind kind = pp::malformed_kind::none;
    std::string detail;
  };
  std::vector<hit> hits;
  int64_t bad_label_line = -1;  // first line in the block with a label other than 0/1
  int32_t bad_label = 0;
};

constexpr uint64_t block_bytes = uint64_t{4} << 20;

void index_block(const pp::mapped_file& f, const criteo_text_options& opt, text_block& b) {
  const char* const base = f.data();
  const char* p = base + b.begin;
  const char* const end = base + b.end;
  const uint64_t bound = pp::fast_parse_read_bound(opt.max_field_bytes);
  const bool fast = opt.max_field_bytes >= pp::fast_parse_min_field && f.size() >= bound;
  const uint64_t fast_last = fast ? f.size() - bound : 0;
  pp::parsed_line pl;
  b.offsets.reserve((b.end - b.begin) / 150 + 16);
  while (p < end) {
    const uint64_t off = uint64_t(p - base);
    const char* next = nullptr;
    bool good = false;
    if (fast && off <= fast_last && (next = pp::parse_criteo_line_fast(p, opt.max_field_bytes, pl)) != nullptr) {
      good = true;
    } else {
      const char* nl = static_cast<const char*>(std::memchr(p, '\n', std::size_t(end - p)));
      std::string_view line(p, std::size_t((nl ? nl : end) - p));
      pp::parse_error e =
          nl ? pp::parse_criteo_line(line, opt.max_field_bytes, pl) : pp::parse_error{pp::malformed_kind::truncated, -1};
      if (e) {
        text_block::hit h{b.lines, e.kind, {}};
        if (b.hits.size() < opt.max_examples) h.detail = pp::describe_parse_error(line, e);
        b.hits.push_back(std::move(h));
      } else {
        good = true;
      }
      next = nl ? nl + 1 : end;
    }
    if (good) {
      if ((pl.label != 0 && pl.label != 1) && b.bad_label_line < 0) {
        b.bad_label_line = int64_t(b.lines);
        b.bad_label = pl.label;
      }
      b.offsets.push_back(off);
    }
    ++b.lines;
    p = next;
  }
}

}  // namespace

criteo_text_options criteo_text_options_of(const dataset_config& d) {
  criteo_text_options o;
  o.inputs = d.inputs;
  o.hash_range = d.hash_range;
  o.max_field_bytes = d.max_field_bytes;
  o.max_rows = d.max_rows;
  return o;
}

expected<criteo_split> split_criteo_rows(int64_t rows, double test_fraction, const std::string& what) {
  criteo_split s;
  s.test = std::llround(double(rows) * test_fraction);
  s.train = rows - s.test;
  if (s.test < 1 || s.train < 1)
    return make_error(errc::invalid_argument, "criteo data: " + std::to_string(rows) + " rows of " + what +
                                                  " at test_fraction " + std::to_string(test_fraction) + " leave " +
                                                  std::to_string(s.train) + " training and " +
                                                  std::to_string(s.test) + " test rows; both must be >= 1");
  return s;
}

expected<criteo_text> criteo_text::open(const criteo_text_options& o) {
  auto t0 = clock_type::now();
  if (o.inputs.empty()) return make_error(errc::invalid_argument, "criteo text: no input files (inputs = [...])");
  if (o.hash_range < 1 || o.hash_range > uint64_t(criteo_max_id) + 1)
    return make_error(errc::invalid_argument, "criteo text: the hash range must be in [1, 2^24] (ids travel as "
                                              "float32), got " + std::to_string(o.hash_range));
  if (o.max_rows < 0) return make_error(errc::invalid_argument, "criteo text: max_rows must be >= 0");
  auto m = std::make_shared<impl>();
  m->opt = o;
  m->reduce = pp::range_reducer(o.hash_range);
  std::vector<text_block> blocks;
  for (std::size_t fi = 0; fi < o.inputs.size(); ++fi) {
    HF_ASSIGN_OR_RETURN(auto f, pp::mapped_file::open(o.inputs[fi]));
    m->bytes += f->size();
    for (uint64_t b = 0; b < f->size();) {
      uint64_t e = b + block_bytes >= f->size() ? f->size() : pp::align_to_line(f->data(), f->size(), b + block_bytes);
      text_block tb;
      tb.file = fi;
      tb.begin = b;
      tb.end = e;
      blocks.push_back(std::move(tb));
      b = e;
    }
    m->files.push_back(std::move(f));
  }
  tbb::parallel_for(std::size_t{0}, blocks.size(),
                    [&](std::size_t i) { index_block(*m->files[blocks[i].file], o, blocks[i]); });
  // Serially, in input order: row ids, line numbers, the report.
  uint64_t file_lines = 0;
  std::size_t cur = std::size_t(-1);
  m->first_row.assign(o.inputs.size() + 1, 0);
  for (auto& b : blocks) {
    if (b.file != cur) {
      for (std::size_t f = cur + 1; f <= b.file; ++f) m->first_row[f] = int64_t(m->offsets.size());
      cur = b.file;
      file_lines = 0;
    }
    if (b.bad_label_line >= 0)
      return make_error(errc::parse_error, o.inputs[b.file] + ":" +
                                               std::to_string(file_lines + uint64_t(b.bad_label_line) + 1) +
                                               ": label " + std::to_string(b.bad_label) +
                                               "; click labels must be 0 or 1");
    for (auto& h : b.hits) {
      ++m->malformed.total;
      ++m->malformed.by_kind[std::size_t(h.kind)];
      if (m->malformed.examples.size() < o.max_examples) {
        pp::malformed_example ex;
        ex.file = o.inputs[b.file];
        ex.line = file_lines + h.line + 1;
        ex.kind = h.kind;
        ex.detail = std::move(h.detail);
        m->malformed.examples.push_back(std::move(ex));
      }
    }
    m->offsets.insert(m->offsets.end(), b.offsets.begin(), b.offsets.end());
    file_lines += b.lines;
    m->lines += b.lines;
    std::vector<uint64_t>().swap(b.offsets);
  }
  for (std::size_t f = cur + 1; f <= o.inputs.size(); ++f) m->first_row[f] = int64_t(m->offsets.size());
  const int64_t total = int64_t(m->offsets.size());
  if (total == 0)
    return make_error(errc::not_found, "criteo text: the inputs hold no well-formed line (" +
                                           std::to_string(m->lines) + " lines, " +
                                           std::to_string(m->malformed.total) + " malformed)");
  m->rows = o.max_rows > 0 ? std::min(o.max_rows, total) : total;
  m->seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  criteo_text t;
  t.impl_ = std::move(m);
  return t;
}

int64_t criteo_text::rows() const noexcept { return impl_->rows; }
int64_t criteo_text::total_rows() const noexcept { return int64_t(impl_->offsets.size()); }
uint64_t criteo_text::lines() const noexcept { return impl_->lines; }
uint64_t criteo_text::bytes() const noexcept { return impl_->bytes; }
double criteo_text::index_seconds() const noexcept { return impl_->seconds; }
const preprocess::malformed_report& criteo_text::malformed() const noexcept { return impl_->malformed; }
const criteo_text_options& criteo_text::options() const noexcept { return impl_->opt; }

namespace {

// Rows in chunks, in parallel when there are enough of them; fn(i) reads row i
// of the request. The first error in request order wins.
template <class Fn>
status for_rows(int64_t n, Fn&& fn) {
  constexpr int64_t chunk = 256;
  const int64_t chunks = (n + chunk - 1) / chunk;
  std::vector<status> st(std::size_t(std::max<int64_t>(chunks, 0)));
  auto run = [&](std::size_t c) {
    const int64_t e = std::min(n, int64_t(c + 1) * chunk);
    for (int64_t i = int64_t(c) * chunk; i < e; ++i)
      if (auto s = fn(i); !s.ok()) {
        st[c] = std::move(s);
        return;
      }
  };
  if (chunks <= 1) {
    if (chunks == 1) run(0);
  } else {
    tbb::parallel_for(std::size_t{0}, std::size_t(chunks), run);
  }
  for (auto& s : st)
    if (!s.ok()) return s;
  return {};
}

}  // namespace

status criteo_text::read_rows(std::span<const int64_t> ids, std::span<float> x, std::span<int32_t> y) const {
  const int64_t n = int64_t(ids.size());
  if (int64_t(x.size()) != n * criteo_columns || int64_t(y.size()) != n)
    return make_error(errc::invalid_argument, "criteo text: read_rows got buffers of the wrong size");
  const impl& m = *impl_;
  return for_rows(n, [&](int64_t i) -> status {
    const int64_t r = ids[std::size_t(i)];
    if (r < 0 || r >= m.rows)
      return make_error(errc::invalid_argument, "criteo text: row " + std::to_string(r) + " is not in [0, " +
                                                    std::to_string(m.rows) + ")");
    return m.read_row(m.file_of(r), m.offsets[std::size_t(r)], x.data() + i * criteo_columns, y.data() + i);
  });
}

status criteo_text::read_range(int64_t first, int64_t last, std::span<float> x, std::span<int32_t> y) const {
  const impl& m = *impl_;
  if (first < 0 || last < first || last > m.rows)
    return make_error(errc::invalid_argument, "criteo text: rows [" + std::to_string(first) + ", " +
                                                  std::to_string(last) + ") are not within [0, " +
                                                  std::to_string(m.rows) + ")");
  const int64_t n = last - first;
  if (int64_t(x.size()) != n * criteo_columns || int64_t(y.size()) != n)
    return make_error(errc::invalid_argument, "criteo text: read_range got buffers of the wrong size");
  return for_rows(n, [&](int64_t i) -> status {
    const int64_t r = first + i;
    return m.read_row(m.file_of(r), m.offsets[std::size_t(r)], x.data() + i * criteo_columns, y.data() + i);
  });
}

expected<image_dataset> criteo_text::load_range(int64_t first, int64_t last) const {
  image_dataset d;
  d.classes = 2;
  const int64_t n = std::max<int64_t>(0, last - first);
  d.images = tensor::empty(shape{n, criteo_columns});
  d.labels.resize(std::size_t(n));
  HF_RETURN_IF_ERROR(read_range(first, last, d.images.f32_span(), d.labels));
  return d;
}

std::string criteo_text::to_json() const {
  const impl& m = *impl_;
  char buf[200];
  std::snprintf(buf, sizeof buf, "{\"rows\":%lld,\"total_rows\":%lld,\"lines\":%llu,\"bytes\":%llu,\"index_seconds\":%.6f,",
                static_cast<long long>(m.rows), static_cast<long long>(m.offsets.size()),
                static_cast<unsigned long long>(m.lines), static_cast<unsigned long long>(m.bytes), m.seconds);
  return std::string(buf) + "\"malformed\":" + m.malformed.to_json() + "}";
}

}  // namespace hetflow::kernels
