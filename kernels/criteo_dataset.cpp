#include "kernels/criteo_dataset.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "kernels/preprocess/criteo_record.hpp"

namespace hetflow::kernels {
namespace {

namespace fs = std::filesystem;
using record = preprocess::criteo_record;
static_assert(sizeof(record) == criteo_record_bytes);
static_assert(preprocess::dense_columns == criteo_dense_columns && preprocess::sparse_columns == criteo_tables);

struct file_closer {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};
using file_ptr = std::unique_ptr<std::FILE, file_closer>;

// Records per read: 64Ki records = 10 MiB, large enough that the syscalls
// cost nothing next to the copy, small enough that the staging buffer is a
// small fraction of the (N, 39) output.
constexpr int64_t chunk_records = int64_t{1} << 16;

struct part_set {
  std::vector<std::string> files;
  std::vector<int64_t> records;  // per file
  int64_t total = 0;
};

expected<part_set> open_parts(const std::string& dir) {
  part_set p;
  HF_ASSIGN_OR_RETURN(p.files, criteo_part_files(dir));
  for (const auto& f : p.files) {
    std::error_code ec;
    const auto bytes = fs::file_size(f, ec);
    if (ec) return make_error(errc::io_error, "criteo data: cannot read the size of " + f + ": " + ec.message());
    if (bytes % uint64_t(criteo_record_bytes) != 0)
      return make_error(errc::parse_error, "criteo data: " + f + " has " + std::to_string(bytes) +
                                               " bytes, not a multiple of the 160-byte record; it is not a complete "
                                               "preprocess output (an interrupted run?)");
    p.records.push_back(int64_t(bytes / uint64_t(criteo_record_bytes)));
    p.total += p.records.back();
  }
  return p;
}

// Checks one record: errors name the file and the record's index in it.
status check_record(const record& r, const std::string& file, int64_t index) {
  if (r.label != 0 && r.label != 1)
    return make_error(errc::parse_error, "criteo data: " + file + " record " + std::to_string(index) +
                                             " has label " + std::to_string(r.label) + "; labels must be 0 or 1");
  for (int t = 0; t < int(criteo_tables); ++t) {
    const int32_t id = r.sparse[t];
    if (id < 0)
      return make_error(errc::parse_error, "criteo data: " + file + " record " + std::to_string(index) +
                                               " has negative id " + std::to_string(id) + " in column C" +
                                               std::to_string(t + 1));
    if (id > criteo_max_id)
      return make_error(errc::unsupported,
                        "criteo data: " + file + " record " + std::to_string(index) + " has id " + std::to_string(id) +
                            " in column C" + std::to_string(t + 1) +
                            ", beyond 2^24 - 1 where float32 ids stop being exact; preprocess with a smaller hash "
                            "range (categorical = { mode = \"hash\", range = N <= 16777216 }) or a higher min_count");
  }
  return {};
}

// Checks `count` records, the first being record `first` of `file`: one
// OR-reduction over labels and ids (vectorises: a label other than 0/1 has a
// bit above bit 0, an id out of [0, 2^24) one of the top 8 bits, sign
// included), then, only when something is wrong, the slow path that names it.
status check_chunk(const record* r, int64_t count, const std::string& file, int64_t first) {
  uint32_t labels = 0, ids = 0;
  for (int64_t i = 0; i < count; ++i) {
    labels |= uint32_t(r[i].label);
    for (int t = 0; t < int(criteo_tables); ++t) ids |= uint32_t(r[i].sparse[t]);
  }
  static_assert(criteo_max_id == 0x00FFFFFF);
  if ((labels & ~1u) == 0 && (ids & 0xFF000000u) == 0) return {};
  for (int64_t i = 0; i < count; ++i) HF_RETURN_IF_ERROR(check_record(r[i], file, first + i));
  return make_error(errc::internal, "criteo data: the check of " + file + " found no bad record twice");
}

// Streams the first `limit` records of `p` in chunks: fn(records, n, file
// index, index of the first record in its file). One pass, large reads.
template <class Fn>
status for_each_chunk(const part_set& p, int64_t limit, Fn&& fn) {
  std::vector<record> buf(std::size_t(std::min(chunk_records, std::max<int64_t>(limit, 1))));
  int64_t left = limit;
  for (std::size_t f = 0; f < p.files.size() && left > 0; ++f) {
    file_ptr in(std::fopen(p.files[f].c_str(), "rb"));
    if (!in) return make_error(errc::io_error, "criteo data: cannot open " + p.files[f] + ": " + std::strerror(errno));
    // Our own buffer is large: stdio's would only add a copy.
    std::setvbuf(in.get(), nullptr, _IONBF, 0);
    int64_t first = 0;
    const int64_t in_file = std::min(left, p.records[f]);
    while (first < in_file) {
      const int64_t n = std::min<int64_t>(int64_t(buf.size()), in_file - first);
      if (std::fread(buf.data(), sizeof(record), std::size_t(n), in.get()) != std::size_t(n))
        return make_error(errc::io_error, "criteo data: short read of " + p.files[f] + " at record " +
                                              std::to_string(first) + " (the file changed while reading?)");
      HF_RETURN_IF_ERROR(fn(buf.data(), n, f, first));
      first += n;
    }
    left -= in_file;
  }
  return {};
}

expected<int64_t> count_lines(const std::string& path) {
  file_ptr in(std::fopen(path.c_str(), "rb"));
  if (!in) return make_error(errc::io_error, "criteo data: cannot open " + path + ": " + std::strerror(errno));
  std::vector<char> buf(std::size_t(1) << 20);
  int64_t lines = 0;
  char last = '\n';
  for (;;) {
    const std::size_t n = std::fread(buf.data(), 1, buf.size(), in.get());
    if (n == 0) break;
    lines += std::count(buf.data(), buf.data() + n, '\n');
    last = buf[n - 1];
  }
  if (std::ferror(in.get())) return make_error(errc::io_error, "criteo data: cannot read " + path);
  return lines + (last != '\n' ? 1 : 0);  // a last line without newline still names an id
}

}  // namespace

std::string criteo_part_name(int index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "part-%05d.bin", index);
  return buf;
}

std::string criteo_vocab_name(int column) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "vocab-%02d.tsv", column);
  return buf;
}

expected<std::vector<std::string>> criteo_part_files(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return make_error(errc::not_found, "criteo data: no directory " + dir +
                                           " (data_dir must be a preprocess job's output_dir)");
  std::vector<int> indices;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    // part-<digits>.bin exactly: staged part-*.bin.tmp files are not data.
    if (name.size() < 10 || name.compare(0, 5, "part-") != 0 || name.compare(name.size() - 4, 4, ".bin") != 0)
      continue;
    const std::string digits = name.substr(5, name.size() - 9);
    if (digits.empty() || digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), [](char c) {
          return c >= '0' && c <= '9';
        }))
      continue;
    indices.push_back(std::stoi(digits));
  }
  if (ec) return make_error(errc::io_error, "criteo data: cannot list " + dir + ": " + ec.message());
  if (indices.empty())
    return make_error(errc::not_found, "criteo data: no part-NNNNN.bin files in " + dir +
                                           "; run a preprocess job with output_dir = " + dir + " first");
  std::sort(indices.begin(), indices.end());
  std::vector<std::string> files;
  for (std::size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] != int(i))
      return make_error(errc::not_found, "criteo data: " + dir + " has no " + criteo_part_name(int(i)) +
                                             " but has " + criteo_part_name(indices[i]) +
                                             "; a part of the input is missing");
    files.push_back((fs::path(dir) / criteo_part_name(int(i))).string());
  }
  return files;
}

expected<criteo_rows> load_criteo(const std::string& dir, int64_t max_rows) {
  if (max_rows < 0) return make_error(errc::invalid_argument, "criteo data: max_rows must be >= 0");
  HF_ASSIGN_OR_RETURN(part_set p, open_parts(dir));
  const int64_t n = max_rows > 0 ? std::min(max_rows, p.total) : p.total;
  if (n == 0) return make_error(errc::not_found, "criteo data: the part files in " + dir + " hold no records");
  criteo_rows out;
  out.total_rows = p.total;
  out.max_id.assign(std::size_t(criteo_tables), -1);
  out.data.classes = 2;
  out.data.labels.resize(std::size_t(n));
  out.data.images = tensor::empty(shape{n, criteo_columns});
  float* x = out.data.images.f32();
  int32_t* y = out.data.labels.data();
  int32_t max_id[criteo_tables];
  std::fill(max_id, max_id + criteo_tables, -1);
  HF_RETURN_IF_ERROR(for_each_chunk(p, n, [&](const record* r, int64_t count, std::size_t f, int64_t first) {
    HF_RETURN_IF_ERROR(check_chunk(r, count, p.files[f], first));
    // Branch-free after the check, so the loops vectorise.
    for (int64_t i = 0; i < count; ++i) {
      const record& rec = r[i];
      y[i] = rec.label;
      std::memcpy(x, rec.dense, sizeof rec.dense);
      for (int t = 0; t < int(criteo_tables); ++t) {
        x[criteo_dense_columns + t] = float(rec.sparse[t]);
        max_id[t] = std::max(max_id[t], rec.sparse[t]);
      }
      x += criteo_columns;
    }
    y += count;
    return status{};
  }));
  for (int t = 0; t < int(criteo_tables); ++t) out.max_id[std::size_t(t)] = max_id[t];
  return out;
}

bool criteo_has_vocabularies(const std::string& dir) {
  std::error_code ec;
  return fs::exists(fs::path(dir) / criteo_vocab_name(0), ec);
}

expected<criteo_tables_info> criteo_table_rows(const std::string& dir) {
  criteo_tables_info info;
  if (criteo_has_vocabularies(dir)) {
    info.from_vocabularies = true;
    for (int t = 0; t < int(criteo_tables); ++t) {
      const std::string path = (fs::path(dir) / criteo_vocab_name(t)).string();
      std::error_code ec;
      if (!fs::exists(path, ec))
        return make_error(errc::not_found, "criteo data: " + dir + " has vocab-00.tsv but no " +
                                               criteo_vocab_name(t) + "; the vocabularies are incomplete");
      HF_ASSIGN_OR_RETURN(int64_t lines, count_lines(path));
      if (lines > criteo_max_id)
        return make_error(errc::unsupported, "criteo data: " + path + " has " + std::to_string(lines) +
                                                 " strings; ids from 2^24 on are not exact as float32: preprocess "
                                                 "with a higher min_count");
      info.rows.push_back(lines + 1);  // + the OOV id (= lines) of min_count > 1
    }
    return info;
  }
  // Hash mode: the ids actually used, so a large hash range costs only the
  // rows it fills up to its largest id.
  HF_ASSIGN_OR_RETURN(part_set p, open_parts(dir));
  int32_t max_id[criteo_tables];
  std::fill(max_id, max_id + criteo_tables, -1);
  HF_RETURN_IF_ERROR(for_each_chunk(p, p.total, [&](const record* r, int64_t count, std::size_t f, int64_t first) {
    HF_RETURN_IF_ERROR(check_chunk(r, count, p.files[f], first));
    for (int64_t i = 0; i < count; ++i)
      for (int t = 0; t < int(criteo_tables); ++t) max_id[t] = std::max(max_id[t], r[i].sparse[t]);
    return status{};
  }));
  for (int t = 0; t < int(criteo_tables); ++t) info.rows.push_back(std::max<int64_t>(1, int64_t(max_id[t]) + 1));
  return info;
}

// ---- criteo_records: random access through read-only mappings ----

struct criteo_records::impl {
  std::string dir;
  std::vector<std::string> files;
  std::vector<int64_t> first;  // first row of each file; files.size() + 1 entries
  std::vector<const record*> maps;
  std::vector<std::size_t> map_bytes;
  int64_t rows = 0, total = 0;
  ~impl() {
    for (std::size_t i = 0; i < maps.size(); ++i)
      if (maps[i] != nullptr) ::munmap(const_cast<record*>(maps[i]), map_bytes[i]);
  }
};

expected<criteo_records> criteo_records::open(const std::string& dir, int64_t max_rows) {
  if (max_rows < 0) return make_error(errc::invalid_argument, "criteo data: max_rows must be >= 0");
  HF_ASSIGN_OR_RETURN(part_set p, open_parts(dir));
  auto m = std::make_shared<impl>();
  m->dir = dir;
  m->files = p.files;
  m->total = p.total;
  m->rows = max_rows > 0 ? std::min(max_rows, p.total) : p.total;
  if (m->rows == 0) return make_error(errc::not_found, "criteo data: the part files in " + dir + " hold no records");
  int64_t at = 0;
  for (std::size_t f = 0; f < p.files.size(); ++f) {
    m->first.push_back(at);
    at += p.records[f];
    const std::size_t bytes = std::size_t(p.records[f]) * sizeof(record);
    const record* map = nullptr;
    if (bytes > 0) {
      int fd = ::open(p.files[f].c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return make_error(errc::io_error, "criteo data: cannot open " + p.files[f] + ": " + std::strerror(errno));
      void* v = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
      const int err = errno;
      ::close(fd);
      if (v == MAP_FAILED) return make_error(errc::io_error, "criteo data: cannot map " + p.files[f] + ": " + std::strerror(err));
      map = static_cast<const record*>(v);
    }
    m->maps.push_back(map);
    m->map_bytes.push_back(bytes);
  }
  m->first.push_back(at);
  criteo_records r;
  r.impl_ = std::move(m);
  return r;
}

int64_t criteo_records::rows() const noexcept { return impl_->rows; }
int64_t criteo_records::total_rows() const noexcept { return impl_->total; }
int criteo_records::parts() const noexcept { return int(impl_->files.size()); }
const std::string& criteo_records::dir() const noexcept { return impl_->dir; }

status criteo_records::read_rows(std::span<const int64_t> ids, std::span<float> x, std::span<int32_t> y,
                                 std::span<const int64_t> table_rows) const {
  const impl& m = *impl_;
  if (x.size() != ids.size() * std::size_t(criteo_columns) || y.size() != ids.size())
    return make_error(errc::internal, "criteo data: read_rows buffers do not match the rows");
  if (!table_rows.empty() && table_rows.size() != std::size_t(criteo_tables))
    return make_error(errc::internal, "criteo data: read_rows wants 26 table sizes");
  float* out = x.data();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    if (id < 0 || id >= m.rows)
      return make_error(errc::invalid_argument, "criteo data: row " + std::to_string(id) + " of " + m.dir +
                                                    " is outside [0, " + std::to_string(m.rows) + ")");
    const std::size_t f = std::size_t(std::upper_bound(m.first.begin(), m.first.end(), id) - m.first.begin()) - 1;
    const int64_t k = id - m.first[f];
    const record& rec = m.maps[f][k];
    HF_RETURN_IF_ERROR(check_record(rec, m.files[f], k));
    y[i] = rec.label;
    std::memcpy(out, rec.dense, sizeof rec.dense);
    for (int t = 0; t < int(criteo_tables); ++t) {
      if (!table_rows.empty() && rec.sparse[t] >= table_rows[std::size_t(t)])
        return make_error(errc::invalid_argument,
                          "criteo data: " + m.files[f] + " record " + std::to_string(k) + " has id " +
                              std::to_string(rec.sparse[t]) + " in column C" + std::to_string(t + 1) +
                              " but its table has " + std::to_string(table_rows[std::size_t(t)]) +
                              " rows (vocabularies of another run, or table_rows too small)");
      out[criteo_dense_columns + t] = float(rec.sparse[t]);
    }
    out += criteo_columns;
  }
  return {};
}

expected<image_dataset> criteo_records::load_range(int64_t first, int64_t last,
                                                   std::span<const int64_t> table_rows) const {
  if (first < 0 || last > rows() || first > last)
    return make_error(errc::invalid_argument, "criteo data: rows [" + std::to_string(first) + ", " +
                                                  std::to_string(last) + ") outside [0, " + std::to_string(rows()) + ")");
  image_dataset d;
  d.classes = 2;
  const int64_t n = last - first;
  d.images = tensor::empty(shape{n, criteo_columns});
  d.labels.resize(std::size_t(n));
  std::vector<int64_t> ids(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[std::size_t(i)] = first + i;
  HF_RETURN_IF_ERROR(read_rows(ids, std::span<float>(d.images.f32(), std::size_t(n * criteo_columns)), d.labels,
                               table_rows));
  return d;
}

std::string criteo_records::to_json() const {
  std::string dir;
  for (char c : impl_->dir) {
    if (c == '"' || c == '\\') dir += '\\';
    dir += c;
  }
  return "{\"dir\":\"" + dir + "\",\"parts\":" + std::to_string(parts()) + ",\"rows\":" + std::to_string(rows()) +
         ",\"total_rows\":" + std::to_string(total_rows()) + "}";
}

}  // namespace hetflow::kernels
