// criteo_text: raw Criteo text (label, I1..I13, C1..C26, tab-separated) read
// directly as dlrm input, hash mode only: the dataset "criteo-text" of a
// train job (dataset_kind::criteo_text), in memory or streamed.
//
// The rows and their values are exactly those a `preprocess` job in hash
// mode with the same range and max_field_bytes writes (and load_criteo then
// reads) from the same files: the same parser (preprocess/line_parser.hpp:
// the fast path where preprocess takes it, else parse_criteo_line), the same
// malformed lines skipped and counted (policy skip), the same dense
// transform (dense_transform: missing and negatives -> 0, log(x + 1)) and the
// same ids (FNV-1a 64 mod range, preprocess/vocabulary.hpp). Row i is the
// i-th well-formed line of the inputs taken in order.
//
//   open():       maps the files and indexes them once: the byte offset of
//                 every well-formed line (8 bytes per row), in parallel
//                 blocks; the malformed report as preprocess writes it
//   read_rows():  parses and transforms any rows (by row id) straight into
//                 (n, 39) f32 rows (13 dense, then 26 ids as floats) and
//                 labels; thread-safe (const)
//
// Every node indexing the same files gets the same rows, so shards and the
// trainer agree on the row count without a handshake.
//
// TODO(perf): the index is a u64 per row (45M rows of Criteo's day: 360 MB
// per node); a u32 per row relative to a per-block base would halve it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/dataset.hpp"
#include "kernels/preprocess/malformed.hpp"
#include "schemas/error.hpp"

namespace hetflow::kernels {

struct criteo_text_options {
  std::vector<std::string> inputs;   // files, in order (absolute, or relative to the working directory)
  uint64_t hash_range = 0;           // ids in [0, range); 1 <= range <= 2^24 (float32 ids)
  std::size_t max_field_bytes = 64;  // longer fields make a line malformed (preprocess's key)
  std::size_t max_examples = 20;     // malformed lines kept with file:line and detail
  int64_t max_rows = 0;              // use only the first max_rows rows (0: all)
};

class criteo_text {
public:
  // Maps and indexes the inputs. Errors: a missing or unreadable file
  // (io_error, naming it), no well-formed line (not_found), a label other
  // than 0/1 (parse_error naming file:line), a bad range (invalid_argument).
  static expected<criteo_text> open(const criteo_text_options& o);

  int64_t rows() const noexcept;        // well-formed lines used (max_rows applied)
  int64_t total_rows() const noexcept;  // well-formed lines in the inputs
  uint64_t lines() const noexcept;      // lines read (well-formed + malformed)
  uint64_t bytes() const noexcept;      // input bytes
  double index_seconds() const noexcept;
  const preprocess::malformed_report& malformed() const noexcept;
  const criteo_text_options& options() const noexcept;

  // Rows ids[i] -> x[i * 39 .. +39) and y[i]. x holds ids.size() * 39
  // floats, y ids.size() labels. errc::invalid_argument for an id outside
  // [0, rows()); errc::internal when a line no longer parses (the file
  // changed after open()).
  status read_rows(std::span<const int64_t> ids, std::span<float> x, std::span<int32_t> y) const;
  // Rows [first, last) in order, the same way.
  status read_range(int64_t first, int64_t last, std::span<float> x, std::span<int32_t> y) const;

  // The rows [first, last) as an in-memory dataset: images (n, 39), labels, 2 classes.
  expected<image_dataset> load_range(int64_t first, int64_t last) const;

  // {"rows":..,"lines":..,"bytes":..,"index_seconds":..,"malformed":{...}}
  std::string to_json() const;

  struct impl;

private:
  std::shared_ptr<const impl> impl_;
};

// The options of a dataset_kind::criteo_text config (trainer.hpp).
struct dataset_config;
criteo_text_options criteo_text_options_of(const dataset_config& d);

// The held-out split of dataset criteo (and criteo-text): the last
// round(rows * test_fraction) rows are the test set. errc::invalid_argument
// (naming `what`) when either part would be empty.
struct criteo_split {
  int64_t train = 0, test = 0;
};
expected<criteo_split> split_criteo_rows(int64_t rows, double test_fraction, const std::string& what);

}  // namespace hetflow::kernels
