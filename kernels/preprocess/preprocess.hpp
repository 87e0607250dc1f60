// preprocess: Criteo text -> packed records, one shard at a time (no CAF).
//
//   vocab mode:  pass 1  count_shard()      per shard, parallel inside (oneTBB):
//                                           counts, and writes staged records
//                merge   across shards: shard_counts::merge_hashed() for columns
//                        of hex ids (most of Criteo's), else merge_column_ids()
//                        over sorted streams (vocabulary.hpp)
//                pass 2  finish_shard()     maps the staged records' ids in place
//   hash mode:   apply_shard() only (one pass)
//
// Inside a shard the work goes in segments of a few blocks per worker:
//
//   blocks (1 MiB, line-aligned) --parallel parse--> per-block records + keys
//        --pass 1: per-column insert, one task per column (no locks)
//        --records written at their offsets (input order)
//
// Staged records (vocab mode). Pass 1 parses every line exactly once: it
// stages each good row's final record (label, dense) in memory (while the
// staged records and the count tables fit the memory cap; past it, all of
// them go to the part file's .tmp and the rest follow there), with, in place of each sparse id, the string's *local id*: a per-shard,
// per-column number handed out in order of first sight in the count table
// (a string spilled and seen again gets a second local id; both map to its
// id). The column's sorted count stream (column_stream) records, for each
// local id, which of its entries it belongs to; the merge says which id each
// entry got (set through add_column_ids); pass 2 is then an array lookup per
// field over the staged records - no text, no strings, no hashing - written
// to (or over, in place) the .tmp, which it renames.
// Local ids are exact (table slots compare whole strings), so no hash
// collision can change an id.
//
// Between segments the resources are probed again (every 0.5 s at most) and
// the arena's degree of parallelism follows what is free. The stop flag is
// read between segments too.
//
// Memory cap (pass 1): the count tables of a shard stay under `memory_cap`
// (and records are staged in memory only while they fit beside them);
// when they grow past it, the largest columns are sorted and spilled to run
// files (u16 length | bytes | u64 count | u32 local id) until half the cap is
// free. At the end a spilled column is one merged sorted stream (spilled
// runs + what is left in memory), so cardinality costs disk, not memory. The cap is
// soft by about the size of the column being spilled (sorting copies its
// entries). Outside the cap: 4 bytes per local id and per distinct string
// (the id map of pass 2), and staged records past the cap live in the page
// cache.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/preprocess/count_stream.hpp"
#include "kernels/preprocess/input_split.hpp"
#include "kernels/preprocess/malformed.hpp"
#include "kernels/preprocess/vocabulary.hpp"

namespace hetflow::kernels::preprocess {

enum class categorical_mode : uint8_t { vocab, hash };

struct preprocess_progress {
  const char* pass = "";      // "count" or "apply"
  uint64_t bytes_done = 0;    // of this shard
  uint64_t bytes_total = 0;
  uint64_t rows = 0;          // good rows so far
  int parallelism = 1;        // current degree of parallelism
  uint64_t memory = 0;        // resident set size
  uint64_t table_bytes = 0;   // pass 1: count tables in memory
};

struct preprocess_options {
  categorical_mode mode = categorical_mode::vocab;
  uint64_t min_count = 1;               // vocab: rarer strings -> OOV id
  uint64_t hash_range = 1u << 24;       // hash: ids in [0, range)
  malformed_policy policy = malformed_policy::skip;
  std::size_t max_examples = 20;        // malformed lines kept with details
  std::size_t max_field_bytes = 64;     // longer fields are malformed
  uint64_t memory_cap = 0;              // pass-1 count tables; 0 = half the free memory
  // Vocab pass 1 of a job's only shard: strings counted fewer times than this
  // (min_count) never reach the merge - no other shard can add to their
  // counts, so they are OOV already; they are left out of the sort and of
  // the column streams (count_stream::dropped() says how many) and their
  // local ids map straight to the OOV id. 0 = stream every string (always,
  // when another shard's counts are merged with this one's).
  uint64_t drop_below = 0;
  // Vocab pass 1: leave the count tables unsorted at the end (a column is
  // sorted when its stream is made), so that a column can merge by hashing
  // (shard_counts::merge_hashed) and never be sorted whole. For a job of
  // several shards (with one, drop_below makes the sort small anyway).
  bool defer_sort = false;
  // preprocess_local with several shards: merge the columns every shard can
  // (shard_counts::hashable) by hashing, the rest as sorted streams; false:
  // all as sorted streams (tests compare the two).
  bool hash_merge = true;
  // Hashed columns of several shards whose min_count lets a shard leave out
  // its rarest entries (candidate_min_count(min_count, shards) >= 2, and at
  // least threshold_merge_from entries over the shards) merge by count
  // threshold (vocabulary.hpp: merge_candidates; `distinct` estimated);
  // false: as above, every entry sent.
  bool threshold_merge = true;
  uint64_t threshold_merge_from = 65536;
  // preprocess_local with several shards, vocab mode: the shards count the
  // ranges a range_claims hands out (units of at least steal_unit bytes;
  // 0 = the fixed split), each claim made by a shard drawn at random
  // (steal_seed) with shard k weighted k + 1, as the job's balance =
  // "steal" does with nodes of different speed; the parts are named in
  // input order. Tests compare it with the fixed split.
  uint64_t steal_unit = 0;
  uint64_t steal_seed = 1;
  int parallelism = 0;                  // 0 = auto (resources.hpp)
  std::size_t block_bytes = 1u << 20;
  std::string spill_dir;                // pass-1 run files (created when needed)
  const std::atomic<bool>* stop = nullptr;
  std::function<void(const preprocess_progress&)> on_progress;  // driving thread
};

// The input files, mapped, in order.
struct input_set {
  std::vector<std::shared_ptr<const mapped_file>> files;
  static expected<input_set> open(const std::vector<std::string>& paths);
  std::vector<uint64_t> sizes() const;
};

// The most rows a job may have for its columns to merge by hashing
// (shard_counts::merge_hashed counts in 32 bits).
constexpr uint64_t hashed_merge_max_rows = UINT32_MAX;

// Pass-1 result of one shard.
class shard_counts {
public:
  shard_counts();
  ~shard_counts();
  shard_counts(shard_counts&&) noexcept;
  shard_counts& operator=(shard_counts&&) noexcept;

  // Column c's counts as one sorted stream. Call at most once per column; it
  // hands over the column's memory and run files. The stream refers to this
  // object (it notes which entry each local id belongs to): keep it alive.
  std::unique_ptr<count_stream> column_stream(int c);

  // Staged pass 1 only: the ids of column c's stream entries, in stream order
  // (-1 = OOV), in as many calls as convenient, and the column's OOV id.
  // finish_shard() checks that every entry of every column got one.
  void add_column_ids(int c, const int32_t* ids, std::size_t n);
  void set_oov_id(int c, int32_t oov_id);

  // Merging by hashing instead of sorted streams (a job of several shards,
  // pass 1 with preprocess_options::defer_sort). hashable(c): column c's
  // counts are all in its table (never spilled, no stream made) and its
  // strings are 8-hex-digit ids or the empty string (Criteo's columns).
  bool hashable(int c) const;
  // (The caller also keeps jobs of more than hashed_merge_max_rows rows off
  // this path: a table's counters are 32 bits.)
  // Sorts the tables pass 1 left unsorted (defer_sort) of the columns in
  // `columns` that are to merge as sorted streams after all, on up to
  // `parallelism` threads, as pass 1 does the others (else the first pull
  // of each sorts it, on the shard actor's thread).
  void sort_deferred(uint32_t columns, int parallelism);
  // A hashable column's entries in increasing value order, for another
  // shard's merge_hashed; its ids come back in that order
  // (add_column_ids). Hands over the column's memory, like column_stream
  // (call one of them, once).
  expected<hex_column> export_column(int c);
  // Merges a hashable column: gives the kept strings of this shard's and the
  // other shards' entries (total count >= min_count) contiguous ids in byte
  // order - the same ids as merge_column_ids over sorted streams - calls
  // keep(s, total) for each in id order, sets this shard's own ids and OOV
  // id, and puts the id of each of others[k]'s entries (-1 = OOV) in
  // other_ids[k]. When every other's values increase (export_column's
  // order), this shard's table is sorted and all are merged in one pass;
  // else their entries are added into the table (hashing; only the kept
  // strings are sorted), which fails when a total passes 2^32 - 1 (the
  // caller keeps jobs of more rows off this path).
  expected<column_merge_stats> merge_hashed(int c, const std::vector<const hex_column*>& others, uint64_t min_count,
                                            const std::function<void(std::string_view, uint64_t)>& keep,
                                            std::vector<big_vector<int32_t>>& other_ids);

  // Merging a hashable column by count threshold (vocabulary.hpp,
  // merge_candidates), in place of export_column. Round 1: the entries
  // counted at least min_local times, in increasing value order, with a
  // sketch of every value; the table stays for answer_queries.
  expected<hex_column> export_candidates(int c, uint64_t min_local);
  // Round 2, for each chunk of what the merger asks (candidate_queries: the
  // values of n (value, count) pairs, increasing across the calls, none of
  // them a candidate here): appends those counted here, with their counts,
  // to `hits`. Then finish_candidates: the column's entries are its
  // candidates and hits in value order (the order its ids come back in,
  // add_column_ids; every other string is out of vocabulary), and the table
  // goes.
  status answer_queries(int c, const uint32_t* pairs, std::size_t n, hex_column& hits);
  status finish_candidates(int c);

  // Distinct strings of column c in this shard (its stream's length, within
  // the local ids of spilled runs): what merging the column costs.
  uint64_t column_size(int c) const;

  // The staged parts (count_shard: one; count_ranges: one per run of
  // contiguous ranges), by the first byte of each one's first range, in
  // the order they were started; set_part_path(k, path) names part k's
  // file before finish_shard (count_ranges leaves them unnamed; an unnamed
  // part with no records is dropped).
  std::vector<uint64_t> part_keys() const;
  void set_part_path(std::size_t k, std::string path);

  uint64_t rows = 0;         // good lines counted
  uint64_t spills = 0;       // run files written
  uint64_t peak_table_bytes = 0;
  uint64_t memory_cap = 0;   // the cap pass 1 kept its tables under (resolved from preprocess_options)
  double seconds = 0;

  struct impl;
  std::unique_ptr<impl> impl_;
};

// Pass 1. With `staged_path` it also stages the shard's records (in memory,
// or in staged_path + ".tmp", which it creates at once; a previous run's
// staged_path is removed meanwhile, on a thread of its own) and gathers the
// malformed report (finish_shard() returns it); without, it only counts.
expected<shard_counts> count_shard(const input_set& in, const shard_plan& shard,
                                   const preprocess_options& opt, const std::string& staged_path = {});

// Pass 1 over ranges handed out while it runs (range_claims; the preprocess
// job's balance = "steal"): next() gives the next range of global bytes
// (an empty one: none left); it is asked before the last segment of the
// ranges so far is counted (a round trip the count waits for), so that on
// two or more threads the next range's first blocks are parsed while that
// segment counts. All ranges count into one set of tables; the records are
// staged (always) in staged_prefix + "-K.tmp", one file per run of
// contiguous ranges (part_keys() says where each begins; set_part_path
// names them for finish_shard).
using next_range = std::function<expected<byte_range>()>;
expected<shard_counts> count_ranges(const input_set& in, const preprocess_options& opt,
                                    const std::string& staged_prefix, const next_range& next);

struct part_written {
  std::string path;
  uint64_t key = 0;        // count_ranges: the first byte of its input
  uint64_t rows = 0;
  uint64_t bytes = 0;      // input bytes
};

struct shard_result {
  std::vector<part_written> parts;  // finish_shard: the part files written, in input order
  uint64_t rows = 0;       // records written
  uint64_t lines = 0;      // lines read (rows + malformed)
  uint64_t bytes = 0;      // input bytes
  malformed_report malformed;
  double seconds = 0;
  int parallelism = 1;     // at the end
};

// Writes the shard's records to out_path (through out_path + ".tmp", renamed
// when complete). vocab = nullptr in hash mode. With policy fail, the first
// malformed line ends it with errc::parse_error "FILE:LINE: kind: detail".
expected<shard_result> apply_shard(const input_set& in, const shard_plan& shard,
                                   const vocabulary* vocab, const std::string& out_path,
                                   const preprocess_options& opt);

// Pass 2 of vocab mode after a staged count_shard(): maps the staged records'
// local ids to ids (every column's stream read to its end and its ids added)
// and renames staged_path + ".tmp" to staged_path. Call once.
expected<shard_result> finish_shard(shard_counts& counts, const preprocess_options& opt);

// Writes vocab-CC.tsv for one column while merging; returns the stats. Used by
// preprocess_local and the vocabulary actor alike.
class vocab_file_writer {
public:
  static expected<vocab_file_writer> open(const std::string& dir, int column);
  vocab_file_writer(vocab_file_writer&&) noexcept;
  ~vocab_file_writer();
  void add(std::string_view s, uint64_t count);
  status close();

private:
  vocab_file_writer() = default;
  void flush();
  std::FILE* f_ = nullptr;
  std::string path_;
  std::vector<char> buf_;  // lines not yet written: one fwrite per ~1 MiB, not per line
  bool failed_ = false;
};

std::string part_file_name(int index);  // "part-00000.bin"

struct local_result {
  uint64_t rows = 0;
  malformed_report malformed;
  std::array<column_merge_stats, sparse_columns> columns{};
  double seconds = 0;
  int parts = 0;
};

// The whole job in one process: `shards` shards (part files), passes as above.
expected<local_result> preprocess_local(const std::vector<std::string>& inputs,
                                        const std::string& output_dir, int shards,
                                        const preprocess_options& opt);

}  // namespace hetflow::kernels::preprocess
