// criteo_dataset: the preprocess job's output read back for training.
//
// `dir` is a preprocess output_dir (kernels/preprocess, actors/builtin/
// preprocess.cpp):
//   part-00000.bin, part-00001.bin, ...  packed records {int32 label;
//       float32 dense[13]; int32 sparse[26]} (160 B, criteo_record.hpp); their
//       concatenation in index order is the input order
//   vocab-00.tsv .. vocab-25.tsv         vocab mode only: line i = the string
//       with id i, a tab, its count; with min_count the OOV id is the number
//       of lines
//
// As a dlrm input a record becomes 39 floats: the 13 dense values as stored
// (already log(x+1), so no normalisation), then the 26 ids as floats. Ids
// must stay below 2^24, where float32 stops holding every integer.
//
// Table sizes (criteo_table_rows) come from the vocabularies when there are
// any (lines + 1: a slot for the OOV id), else (hash mode) from one scan of
// every record: max id + 1 per column. Both depend only on the directory, so
// every node (trainer, parameter-server shards) gets the same model.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/dataset.hpp"
#include "schemas/error.hpp"

namespace hetflow::kernels {

inline constexpr int64_t criteo_dense_columns = 13;
inline constexpr int64_t criteo_tables = 26;
inline constexpr int64_t criteo_columns = criteo_dense_columns + criteo_tables;  // 39
inline constexpr int64_t criteo_record_bytes = 160;
// Ids travel as f32 inside the model's input: the first integer a float32
// cannot hold exactly is 2^24 + 1, so ids and table rows stay <= 2^24.
inline constexpr int64_t criteo_max_id = (int64_t{1} << 24) - 1;

// The part files of `dir` in index order: part-00000.bin, part-00001.bin, ...
// errc::not_found for a missing directory, no part files or a gap in the
// numbering (a part of the input would be missing).
expected<std::vector<std::string>> criteo_part_files(const std::string& dir);

struct criteo_rows {
  image_dataset data;           // images (N, 39) f32, labels 0/1, classes 2
  std::vector<int64_t> max_id;  // per table: the largest id read (-1: no rows)
  int64_t total_rows = 0;       // records in all part files (>= N with max_rows)
};

// The first `max_rows` records (0: all) of dir's part files, in input order,
// in one pass of large reads. Errors name the file and the record: a size that
// is not a multiple of 160 (errc::parse_error), a label other than 0/1 or a
// negative id (parse_error), an id > criteo_max_id (unsupported: preprocess
// with a smaller hash range or a higher min_count).
expected<criteo_rows> load_criteo(const std::string& dir, int64_t max_rows = 0);

// True when dir holds vocab-00.tsv (a vocab-mode preprocess run).
bool criteo_has_vocabularies(const std::string& dir);

struct criteo_tables_info {
  std::vector<int64_t> rows;  // criteo_tables entries
  bool from_vocabularies = false;
};

// Rows per embedding table for dir's data, without loading it into memory:
// vocab mode: lines of vocab-CC.tsv + 1; hash mode: one scan of every record,
// max id + 1 per column (the records are checked as by load_criteo).
// errc::not_found when some but not all 26 vocabularies exist.
expected<criteo_tables_info> criteo_table_rows(const std::string& dir);

// dir's records without loading them (streamed input, dataset "criteo"): the
// part files mapped read-only, rows [0, rows()) in input order (the first
// max_rows; 0: all). Every node mapping the same directory sees the same
// rows, so stream shards and the trainer agree without a handshake.
class criteo_records {
public:
  // Errors as load_criteo's for the files (sizes, gaps, no records).
  static expected<criteo_records> open(const std::string& dir, int64_t max_rows = 0);

  int64_t rows() const noexcept;
  int64_t total_rows() const noexcept;  // records in all part files
  int parts() const noexcept;
  const std::string& dir() const noexcept;

  // Rows ids[i] -> x[i * 39 .. +39) (13 dense as stored, then the 26 ids as
  // floats: load_criteo's values) and y[i]. Each record is checked as
  // load_criteo checks it, and its ids against `table_rows` (26 values, or
  // empty: not checked); errors name the part file and the record.
  // errc::invalid_argument for an id outside [0, rows()). Thread-safe.
  status read_rows(std::span<const int64_t> ids, std::span<float> x, std::span<int32_t> y,
                   std::span<const int64_t> table_rows = {}) const;
  // Rows [first, last) in order as an in-memory dataset: (n, 39), 2 classes.
  expected<image_dataset> load_range(int64_t first, int64_t last, std::span<const int64_t> table_rows = {}) const;

  // {"dir": .., "parts": .., "rows": .., "total_rows": ..}
  std::string to_json() const;

  struct impl;

private:
  std::shared_ptr<const impl> impl_;
};

// "part-00003.bin", "vocab-07.tsv": the preprocess job's names
// (kernels/preprocess: part_file_name, vocab_file_name).
std::string criteo_part_name(int index);
std::string criteo_vocab_name(int column);

}  // namespace hetflow::kernels
