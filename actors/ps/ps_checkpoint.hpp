// ps_checkpoint: one parameter-server shard's checkpoint file (plain C++).
//
// File `<dir>/<shard>.ckpt-<label, 12 digits>`: ONE schemas wire message
// (schemas/tensor_codec.hpp) written to disk:
//
//   header.kind   = checkpoint_kind ("PSCK"), seq = label, sender = shard name
//   tensors       = the shard's parameters, then the optimizer's state
//                   tensors (momentum buffers / Adam moments), f32
//   payload       = text: "hetflow-ps-checkpoint 2\n"
//                   "shard <k> <shards>\n" "clocks <c_0> ... <c_W-1>\n"
//                   "optimizer_steps <t>\n" "state <n>\n"
//                   "data_checksum <16 hex digits>\n" (of every tensor's
//                   bytes: a flipped bit is an error on read), then one
//                   tensor name per line. Version 1 (no data_checksum line)
//                   is still read.
//
// `label` orders checkpoints: the global clock it was taken at (every
// update of clocks < label from every worker is in, none later), or at the
// end of the job the largest clock. `clocks` are the pushes of each worker
// that the weights contain: the worker's data position on resume.
//
// Written atomically: a temporary file in the same folder, fsync, rename,
// fsync of the folder. A crash leaves either the old set of files or the new
// one, never a half-written checkpoint under a final name (temporaries are
// ignored and removed by the next write).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"
#include "kernels/trainer.hpp"
#include "schemas/error.hpp"
#include "schemas/wire_buffer.hpp"

namespace hetflow::ps {

inline constexpr uint32_t checkpoint_kind = 0x5053434b;  // "PSCK"

struct named_tensor {
  std::string name;
  const kernels::tensor* value = nullptr;
};

struct checkpoint_meta {
  std::string shard_name;
  int shard = 0, shards = 1;
  int64_t label = 0;
  std::vector<int64_t> clocks;
  int64_t optimizer_steps = 0;
  int64_t state_tensors = 0;  // the last state_tensors tensors are optimizer state
};

struct loaded_checkpoint {
  checkpoint_meta meta;
  std::vector<std::string> names;
  std::vector<kernels::tensor> tensors;  // owned host copies
};

// Where checkpoints go: an interface, the real one (a directory) and a fake
// (memory) for tests, so that the shard's logic is tested against both and
// crashes can be simulated (STYLE.md: interface, implementation, fake).
// Thread affinity: one owner (a shard) per store object; several directory
// stores may share one folder (the shards of one node), names never collide.
class checkpoint_store {
public:
  virtual ~checkpoint_store() = default;
  // Stores `bytes` under `name` atomically and durably: once it returns ok
  // the new content survives a crash; if it fails or the process dies
  // inside, `name` holds its old content (or does not exist).
  virtual status put(const std::string& name, std::span<const std::byte> bytes) = 0;
  virtual expected<wire_buffer_ref> get(const std::string& name) const = 0;
  // Names whose put completed (no temporaries).
  virtual std::vector<std::string> names() const = 0;
  virtual void remove(const std::string& name) = 0;
  // Left-overs of interrupted puts of names starting with `prefix`.
  virtual void remove_stale(const std::string& prefix) = 0;
  // What to call `name` in messages (a path).
  virtual std::string describe(const std::string& name) const = 0;
};

// The directory store: a temporary file in `dir`, fsync, rename, fsync of
// the directory (created on the first put).
std::shared_ptr<checkpoint_store> make_directory_store(std::string dir);

// The fake: a map in memory. fail_puts > 0 makes the next puts fail (as a
// crash before the rename would: nothing changes).
class memory_checkpoint_store final : public checkpoint_store {
public:
  status put(const std::string& name, std::span<const std::byte> bytes) override;
  expected<wire_buffer_ref> get(const std::string& name) const override;
  std::vector<std::string> names() const override;
  void remove(const std::string& name) override { files_.erase(name); }
  void remove_stale(const std::string&) override {}
  std::string describe(const std::string& name) const override { return "memory:" + name; }
  int fail_puts = 0;
  int64_t puts = 0;

private:
  std::map<std::string, std::vector<std::byte>> files_;
};

// "<shard>.ckpt-<label, 12 digits>"
std::string checkpoint_name(const std::string& shard_name, int64_t label);
std::string checkpoint_path(const std::string& dir, const std::string& shard_name, int64_t label);

// Writes tensors (parameters, then meta.state_tensors optimizer tensors) and
// removes this shard's checkpoints older than the newest `keep`.
status write_checkpoint(checkpoint_store& store, const checkpoint_meta& meta, const std::vector<named_tensor>& tensors,
                        int keep = 3);
expected<loaded_checkpoint> read_checkpoint(const checkpoint_store& store, const std::string& shard_name,
                                            int64_t label);
// One checkpoint file (any path).
expected<loaded_checkpoint> read_checkpoint_file(const std::string& path);
// The labels of this shard's checkpoints, ascending (only names;
// read_checkpoint validates contents).
std::vector<int64_t> list_checkpoints(const checkpoint_store& store, const std::string& shard_name);
// The newest label present in every shard's list (what --resume restores);
// -1 when there is none (or no lists).
int64_t newest_common_label(const std::vector<std::vector<int64_t>>& per_shard);

// Epoch checkpoints of strategies single and dp (kernels::epoch_checkpoints)
// as files of this format: name `<actor>.ckpt-<epochs done>`, shard = the
// replica's rank of `replicas`, clocks = {epochs done}, state = the
// optimizer's tensors (parameters and batch norm statistics before them).
// Every replica keeps its own (identical) files, so no storage is shared.
std::shared_ptr<kernels::epoch_checkpoints> make_epoch_checkpoints(std::shared_ptr<checkpoint_store> store,
                                                                   std::string actor, int rank, int replicas,
                                                                   int keep = 3);

}  // namespace hetflow::ps
