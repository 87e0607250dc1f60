#include "actors/ps/ps_checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sstream>

#include "schemas/tensor_codec.hpp"

namespace hetflow::ps {
namespace {

constexpr std::string_view magic = "hetflow-ps-checkpoint 2\n";
// Version 1 files (no data checksum) are still read.
constexpr std::string_view magic_v1 = "hetflow-ps-checkpoint 1\n";

// A checksum of the tensors' bytes, so that a flipped bit anywhere in the
// weights or optimizer state is found on restore (the wire decoder checks
// only the structure). Four independent multiply-xor lanes over 8-byte words:
// several GB/s, where byte-wise FNV-1a would cost ~0.5 s on a DLRM shard.
uint64_t data_checksum(std::span<const std::span<const std::byte>> parts) {
  uint64_t lane[4] = {0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full, 0x165667B19E3779F9ull, 0x27D4EB2F165667C5ull};
  uint64_t total = 0;
  for (auto part : parts) {
    const std::byte* p = part.data();
    std::size_t n = part.size(), i = 0;
    total += n;
    for (; i + 32 <= n; i += 32)
      for (int k = 0; k < 4; ++k) {
        uint64_t w;
        std::memcpy(&w, p + i + 8 * std::size_t(k), 8);
        lane[k] = (lane[k] ^ w) * 0xFF51AFD7ED558CCDull;
        lane[k] ^= lane[k] >> 32;
      }
    for (; i < n; ++i) lane[0] = (lane[0] ^ uint64_t(p[i])) * 0x100000001B3ull;
    lane[1] ^= n;  // part boundaries count
  }
  uint64_t h = total;
  for (uint64_t l : lane) h = (h ^ l) * 0xC4CEB9FE1A85EC53ull, h ^= h >> 29;
  return h;
}

status write_all(int fd, const std::byte* p, std::size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return make_error(errc::io_error, path + ": write failed: " + std::strerror(errno));
    }
    p += w;
    n -= std::size_t(w);
  }
  return {};
}

std::string prefix_of(const std::string& shard_name) { return shard_name + ".ckpt-"; }

}  // namespace

std::string checkpoint_name(const std::string& shard_name, int64_t label) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%012lld", static_cast<long long>(label));
  return prefix_of(shard_name) + buf;
}

std::string checkpoint_path(const std::string& dir, const std::string& shard_name, int64_t label) {
  return (std::filesystem::path(dir) / checkpoint_name(shard_name, label)).string();
}

namespace {

expected<wire_buffer_ref> read_file(const std::string& path) {
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  if (ec) return make_error(errc::not_found, path + ": " + ec.message());
  if (size > schemas::max_wire_message_bytes) return make_error(errc::parse_error, path + ": too large");
  auto buf = std::make_shared<wire_buffer>(std::size_t(size));
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return make_error(errc::io_error, path + ": cannot open: " + std::strerror(errno));
  if (std::fread(buf->data(), 1, buf->size(), f.get()) != buf->size())
    return make_error(errc::io_error, path + ": short read");
  return wire_buffer_ref(std::move(buf));
}

class directory_store final : public checkpoint_store {
public:
  explicit directory_store(std::string dir) : dir_(std::move(dir)) {}

  status put(const std::string& name, std::span<const std::byte> bytes) override {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec) return make_error(errc::io_error, "checkpoint_dir " + dir_ + ": " + ec.message());
    const std::string path = describe(name), tmp = path + ".tmp";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return make_error(errc::io_error, tmp + ": cannot create: " + std::strerror(errno));
    status st = write_all(fd, bytes.data(), bytes.size(), tmp);
    if (st.ok() && ::fsync(fd) != 0) st = make_error(errc::io_error, tmp + ": fsync: " + std::strerror(errno));
    ::close(fd);
    if (!st.ok()) {
      std::filesystem::remove(tmp, ec);
      return st;
    }
    std::filesystem::rename(tmp, path, ec);
    if (ec) return make_error(errc::io_error, "renaming " + tmp + " to " + path + ": " + ec.message());
    int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      (void)::fsync(dfd);
      ::close(dfd);
    }
    return {};
  }
  expected<wire_buffer_ref> get(const std::string& name) const override { return read_file(describe(name)); }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    std::error_code ec;
    for (auto& e : std::filesystem::directory_iterator(dir_, ec)) {
      auto n = e.path().filename().string();
      if (!n.ends_with(".tmp")) out.push_back(std::move(n));
    }
    return out;
  }
  void remove(const std::string& name) override {
    std::error_code ec;
    std::filesystem::remove(describe(name), ec);
  }
  void remove_stale(const std::string& prefix) override {
    std::error_code ec;
    for (auto& e : std::filesystem::directory_iterator(dir_, ec)) {
      auto n = e.path().filename().string();
      if (n.starts_with(prefix) && n.ends_with(".tmp")) std::filesystem::remove(e.path(), ec);
    }
  }
  std::string describe(const std::string& name) const override {
    return (std::filesystem::path(dir_) / name).string();
  }

private:
  std::string dir_;
};

expected<loaded_checkpoint> decode_checkpoint(const wire_buffer_ref& buf, const std::string& path);

}  // namespace

std::shared_ptr<checkpoint_store> make_directory_store(std::string dir) {
  return std::make_shared<directory_store>(std::move(dir));
}

status memory_checkpoint_store::put(const std::string& name, std::span<const std::byte> bytes) {
  ++puts;
  if (fail_puts > 0) {
    --fail_puts;
    return make_error(errc::io_error, describe(name) + ": injected failure");
  }
  files_[name].assign(bytes.begin(), bytes.end());
  return {};
}

expected<wire_buffer_ref> memory_checkpoint_store::get(const std::string& name) const {
  auto it = files_.find(name);
  if (it == files_.end()) return make_error(errc::not_found, describe(name) + ": no such checkpoint");
  auto buf = std::make_shared<wire_buffer>(it->second.size());
  if (!it->second.empty()) std::memcpy(buf->data(), it->second.data(), it->second.size());
  return wire_buffer_ref(std::move(buf));
}

std::vector<std::string> memory_checkpoint_store::names() const {
  std::vector<std::string> out;
  for (auto& [n, _] : files_) out.push_back(n);
  return out;
}

status write_checkpoint(checkpoint_store& store, const checkpoint_meta& meta, const std::vector<named_tensor>& tensors,
                        int keep) {
  std::ostringstream text;
  text << magic << "shard " << meta.shard << ' ' << meta.shards << "\nclocks";
  for (auto c : meta.clocks) text << ' ' << c;
  text << "\noptimizer_steps " << meta.optimizer_steps << "\nstate " << meta.state_tensors << '\n';
  {
    std::vector<std::span<const std::byte>> parts;
    for (auto& t : tensors)
      if (t.value->numel() > 0)
        parts.push_back({reinterpret_cast<const std::byte*>(t.value->f32()), t.value->byte_size()});
    char sum[40];
    std::snprintf(sum, sizeof sum, "data_checksum %016llx\n", static_cast<unsigned long long>(data_checksum(parts)));
    text << sum;
  }
  for (auto& t : tensors) text << t.name << '\n';
  const std::string payload = text.str();
  std::vector<schemas::tensor_meta> metas;
  for (auto& t : tensors) {
    schemas::tensor_meta m;
    m.type = dtype::f32;
    for (int i = 0; i < t.value->shape().rank(); ++i) m.shape.push_back(t.value->shape()[i]);
    metas.push_back(std::move(m));
  }
  schemas::envelope_header h;
  h.kind = checkpoint_kind;
  h.seq = uint64_t(meta.label);
  h.sender = meta.shard_name;
  HF_RETURN_IF_ERROR(schemas::check_encodable(h, metas, payload.size()));
  schemas::message_builder b(h, std::span<const schemas::tensor_meta>(metas), payload.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    auto dst = b.tensor_data(i);
    std::memcpy(dst.data(), tensors[i].value->f32(), dst.size());
  }
  std::memcpy(b.payload().data(), payload.data(), payload.size());
  wire_buffer buf = std::move(b).finish();
  schemas::clear_wire_token(buf);  // files never carry the data-plane token
  HF_RETURN_IF_ERROR(store.put(checkpoint_name(meta.shard_name, meta.label), buf.bytes()));
  // Older checkpoints beyond `keep`, and stale temporaries of this shard.
  auto labels = list_checkpoints(store, meta.shard_name);
  for (std::size_t i = 0; i + std::size_t(std::max(keep, 1)) < labels.size(); ++i)
    store.remove(checkpoint_name(meta.shard_name, labels[i]));
  store.remove_stale(prefix_of(meta.shard_name));
  return {};
}

std::vector<int64_t> list_checkpoints(const checkpoint_store& store, const std::string& shard_name) {
  std::vector<int64_t> out;
  const std::string prefix = prefix_of(shard_name);
  for (auto& name : store.names()) {
    if (!name.starts_with(prefix) || name.size() != prefix.size() + 12) continue;
    auto digits = name.substr(prefix.size());
    if (!std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) continue;
    out.push_back(std::stoll(digits));
  }
  std::sort(out.begin(), out.end());
  return out;
}

expected<loaded_checkpoint> read_checkpoint(const checkpoint_store& store, const std::string& shard_name,
                                            int64_t label) {
  const std::string name = checkpoint_name(shard_name, label);
  HF_ASSIGN_OR_RETURN(wire_buffer_ref buf, store.get(name));
  return decode_checkpoint(buf, store.describe(name));
}

expected<loaded_checkpoint> read_checkpoint_file(const std::string& path) {
  HF_ASSIGN_OR_RETURN(wire_buffer_ref buf, read_file(path));
  return decode_checkpoint(buf, path);
}

int64_t newest_common_label(const std::vector<std::vector<int64_t>>& per_shard) {
  if (per_shard.empty()) return -1;
  int64_t best = -1;
  for (int64_t cand : per_shard[0]) {
    bool everywhere = true;
    for (auto& l : per_shard) everywhere = everywhere && std::find(l.begin(), l.end(), cand) != l.end();
    if (everywhere) best = std::max(best, cand);
  }
  return best;
}

namespace {
expected<loaded_checkpoint> decode_checkpoint(const wire_buffer_ref& buf, const std::string& path) {
  schemas::read_limits limits;
  limits.max_message_bytes = buf->size();
  limits.max_tensors = 1u << 20;
  limits.max_text_bytes = 1u << 26;
  HF_ASSIGN_OR_RETURN(schemas::decoded_message msg, schemas::decode_message(buf, limits, path));
  if (msg.header().kind != checkpoint_kind)
    return make_error(errc::parse_error, path + ": not a hetflow PS checkpoint");
  loaded_checkpoint out;
  out.meta.shard_name = msg.header().sender;
  out.meta.label = int64_t(msg.header().seq);
  auto payload = msg.payload();
  std::string text(reinterpret_cast<const char*>(payload.data()), payload.size());
  const bool v1 = text.starts_with(magic_v1);
  if (!v1 && !text.starts_with(magic)) return make_error(errc::parse_error, path + ": missing the checkpoint header");
  std::istringstream in(text.substr(magic.size()));
  std::string word, line;
  if (!(in >> word) || word != "shard" || !(in >> out.meta.shard >> out.meta.shards))
    return make_error(errc::parse_error, path + ": bad 'shard' line");
  std::getline(in, line);
  if (!std::getline(in, line) || !line.starts_with("clocks"))
    return make_error(errc::parse_error, path + ": bad 'clocks' line");
  {
    std::istringstream cl(line.substr(6));
    int64_t c;
    while (cl >> c) out.meta.clocks.push_back(c);
  }
  if (!(in >> word) || word != "optimizer_steps" || !(in >> out.meta.optimizer_steps))
    return make_error(errc::parse_error, path + ": bad 'optimizer_steps' line");
  if (!(in >> word) || word != "state" || !(in >> out.meta.state_tensors))
    return make_error(errc::parse_error, path + ": bad 'state' line");
  std::getline(in, line);
  uint64_t want_sum = 0;
  if (!v1) {
    if (!std::getline(in, line) || !line.starts_with("data_checksum ") || line.size() != 14 + 16)
      return make_error(errc::parse_error, path + ": bad 'data_checksum' line");
    want_sum = std::stoull(line.substr(14), nullptr, 16);
    std::vector<std::span<const std::byte>> parts;
    for (std::size_t i = 0; i < msg.tensor_count(); ++i)
      if (!msg.tensor(i).data.empty()) parts.push_back(msg.tensor(i).data);
    const uint64_t got = data_checksum(parts);
    if (got != want_sum)
      return make_error(errc::parse_error, path + ": corrupt: the weights' checksum is " + [&] {
        char b[20];
        std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(got));
        return std::string(b);
      }() + ", the file says " + line.substr(14));
  }
  for (std::size_t i = 0; i < msg.tensor_count(); ++i) {
    if (!std::getline(in, line)) return make_error(errc::parse_error, path + ": name table is short");
    out.names.push_back(line);
    const auto& tv = msg.tensor(i);
    if (tv.type != dtype::f32 || tv.shape.size() > std::size_t(kernels::shape::max_rank))
      return make_error(errc::parse_error, path + ": tensor '" + line + "' is not f32");
    kernels::shape s(tv.shape);
    kernels::tensor t = kernels::tensor::empty(s);
    if (tv.data.size() != std::size_t(s.numel()) * sizeof(float))
      return make_error(errc::parse_error, path + ": tensor '" + line + "' holds " + std::to_string(tv.data.size()) +
                                               " bytes for its shape");
    if (!tv.data.empty()) std::memcpy(t.f32(), tv.data.data(), tv.data.size());  // empty: data() may be null
    out.tensors.push_back(std::move(t));
  }
  if (out.meta.state_tensors < 0 || out.meta.state_tensors > int64_t(out.tensors.size()))
    return make_error(errc::parse_error, path + ": bad state tensor count");
  return out;
}
}  // namespace

namespace {

class epoch_checkpoint_files final : public kernels::epoch_checkpoints {
public:
  epoch_checkpoint_files(std::shared_ptr<checkpoint_store> store, std::string actor, int rank, int replicas, int keep)
      : store_(std::move(store)), actor_(std::move(actor)), rank_(rank), replicas_(replicas), keep_(keep) {}

  status save(int epochs_done, int64_t optimizer_steps, const std::vector<kernels::checkpoint_tensor>& tensors,
              int64_t optimizer_state) override {
    checkpoint_meta meta;
    meta.shard_name = actor_;
    meta.shard = rank_;
    meta.shards = replicas_;
    meta.label = epochs_done;
    meta.clocks = {epochs_done};
    meta.optimizer_steps = optimizer_steps;
    meta.state_tensors = optimizer_state;
    std::vector<named_tensor> v;
    for (const auto& t : tensors) v.push_back({t.name, t.value});
    return write_checkpoint(*store_, meta, v, keep_);
  }

  std::vector<int> labels() const override {
    std::vector<int> out;
    for (int64_t l : list_checkpoints(*store_, actor_))
      if (l >= 1 && l <= INT32_MAX && read_checkpoint(*store_, actor_, l)) out.push_back(int(l));
    return out;
  }

  expected<kernels::epoch_checkpoint> load(int epochs_done) const override {
    HF_ASSIGN_OR_RETURN(loaded_checkpoint ck, read_checkpoint(*store_, actor_, epochs_done));
    const auto& m = ck.meta;
    if (m.shard_name != actor_ || m.shard != rank_ || m.shards != replicas_)
      return make_error(errc::invalid_argument, describe(epochs_done) + ": written by " + m.shard_name + ", replica " +
                                                    std::to_string(m.shard) + " of " + std::to_string(m.shards) +
                                                    "; this is " + actor_ + ", replica " + std::to_string(rank_) +
                                                    " of " + std::to_string(replicas_) +
                                                    " (the topology changed since the checkpoint)");
    kernels::epoch_checkpoint out;
    out.epochs_done = epochs_done;
    out.optimizer_steps = m.optimizer_steps;
    out.optimizer_state = m.state_tensors;
    out.names = std::move(ck.names);
    out.tensors = std::move(ck.tensors);
    return out;
  }

  std::string describe(int epochs_done) const override {
    return store_->describe(checkpoint_name(actor_, epochs_done));
  }

private:
  std::shared_ptr<checkpoint_store> store_;
  std::string actor_;
  int rank_, replicas_, keep_;
};

}  // namespace

std::shared_ptr<kernels::epoch_checkpoints> make_epoch_checkpoints(std::shared_ptr<checkpoint_store> store,
                                                                   std::string actor, int rank, int replicas,
                                                                   int keep) {
  return std::make_shared<epoch_checkpoint_files>(std::move(store), std::move(actor), rank, replicas, keep);
}

}  // namespace hetflow::ps
