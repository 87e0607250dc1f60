// Writes the generated seed inputs of test/fuzz/corpus/ (the binary ones:
// wire messages and pre-processing chunks), made with the real encoders so
// the fuzzers start from valid messages. Run once after a format change:
//   build-fuzz/bin/fuzz_seed_gen test/fuzz/corpus
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "actors/builtin/stream_protocol.hpp"
#include "actors/ps/ps_checkpoint.hpp"
#include "actors/ps/ps_protocol.hpp"
#include "kernels/preprocess/count_stream.hpp"
#include "kernels/preprocess/vocabulary.hpp"
#include "schemas/tensor_codec.hpp"

namespace fs = std::filesystem;
namespace hs = hetflow::schemas;
namespace pp = hetflow::kernels::preprocess;
namespace stream = hetflow::actors::builtin::stream;
namespace ps = hetflow::ps;

namespace {

void write(const fs::path& dir, const std::string& name, const void* p, std::size_t n) {
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(p), std::streamsize(n));
}
void write(const fs::path& dir, const std::string& name, const hetflow::wire_buffer& b) {
  write(dir, name, b.data(), b.size());
}
void write(const fs::path& dir, const std::string& name, const std::vector<char>& b) {
  write(dir, name, b.data(), b.size());
}

// The count chunks of `e`'s stream, each at most max_bytes.
std::vector<std::vector<char>> count_chunks(pp::count_entries e, std::size_t max_bytes) {
  auto s = pp::memory_stream(std::move(e));
  std::vector<std::vector<char>> chunks;
  for (;;) {
    auto c = pp::next_count_chunk(*s, max_bytes);
    if (!c || c->empty()) break;
    chunks.push_back(std::move(*c));
  }
  return chunks;
}

// The preprocess target's framing: mode byte, then u16-length-prefixed chunks.
std::vector<char> framed(uint8_t mode, const std::vector<std::vector<char>>& chunks) {
  std::vector<char> out{char(mode)};
  for (const auto& c : chunks) {
    const auto len = uint16_t(c.size());
    out.push_back(char(len & 0xff));
    out.push_back(char(len >> 8));
    out.insert(out.end(), c.begin(), c.end());
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (test/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];

  // --- wire messages: envelope_decode_fuzz and wire_protocols_fuzz ---------
  std::vector<std::pair<std::string, hetflow::wire_buffer>> msgs;
  {
    hs::envelope_header h{7, 3, "sender", "target"};
    std::vector<std::byte> data(2 * 3 * 4, std::byte{1});
    auto b = hs::encode_tensor(h, hs::tensor_meta{hetflow::dtype::f32, {2, 3}}, data);
    msgs.emplace_back("tensor_f32_2x3", std::move(*b));
  }
  {
    hs::envelope_header h{1, 0, "a", "b"};
    hs::message_builder b(h, {hs::tensor_meta{hetflow::dtype::i64, {}}, hs::tensor_meta{hetflow::dtype::u8, {0, 4}},
                              hs::tensor_meta{hetflow::dtype::f16, {1, 1, 2}}},
                          5);
    for (std::size_t i = 0; i < 3; ++i) std::memset(b.tensor_data(i).data(), 0x11, b.tensor_data(i).size());
    std::memcpy(b.payload().data(), "hello", 5);
    msgs.emplace_back("three_tensors_payload", std::move(b).finish());
  }
  {
    stream::batch_info info;
    info.epoch = 1;
    info.shard = 0;
    info.shards = 2;
    info.step = 4;
    info.rows = 100;
    stream::batch_writer w("stream_shard_0", "trainer", info, 2, 1, 2, 2);
    for (auto& f : w.images()) f = 0.5f;
    for (auto& l : w.labels()) l = 3;
    for (auto& i : w.ids()) i = 9;
    msgs.emplace_back("stream_batch", hetflow::wire_buffer(0));
    auto ref = std::move(w).finish();
    hetflow::wire_buffer copy(ref->size());
    std::memcpy(copy.data(), ref->data(), ref->size());
    msgs.back().second = std::move(copy);
  }
  auto copy_of = [](const hetflow::wire_buffer_ref& r) {
    hetflow::wire_buffer c(r->size());
    std::memcpy(c.data(), r->data(), r->size());
    return c;
  };
  msgs.emplace_back("stream_credit", copy_of(stream::make_credit("trainer", "stream_shard_0", 2)));
  msgs.emplace_back("stream_assign",
                    copy_of(stream::make_assign("hphead", "stream_shard_0", {"hpstage0", "hpstage2"})));
  {
    ps::ps_info info;
    info.worker = 1;
    info.clock = 5;
    const std::vector<int64_t> labels{10, 20, 30};
    msgs.emplace_back("ps_pull", copy_of(ps::make_control(ps::kind_pull, "w1", "ps0", info)));
    msgs.emplace_back("ps_checkpoints",
                      copy_of(ps::make_control(ps::kind_checkpoints, "ps0", "w1", info, labels)));
    msgs.emplace_back("ps_restored", copy_of(ps::make_control(ps::kind_restored, "ps0", "w1", info, {})));
    msgs.emplace_back("ps_error",
                      copy_of(ps::make_control(ps::kind_error, "ps0", "w1", info, {}, "pull timed out")));
    auto t = hetflow::kernels::tensor::empty(hetflow::kernels::shape({2, 2}));
    for (int i = 0; i < 4; ++i) t.f32()[i] = float(i);
    const hetflow::kernels::tensor* ts[] = {&t, &t};
    msgs.emplace_back("ps_push", copy_of(ps::make_tensors(ps::kind_push, "w1", "ps0", info, ts)));
  }
  for (const auto& [name, b] : msgs) {
    write(root / "wire_protocols_fuzz", name, b);
    write(root / "envelope_decode_fuzz", name, b);
  }

  // --- PS checkpoint files: checkpoint_fuzz ---------------------------------
  {
    auto w = hetflow::kernels::tensor::empty(hetflow::kernels::shape({3, 2}));
    auto m = hetflow::kernels::tensor::empty(hetflow::kernels::shape({3, 2}));
    for (int i = 0; i < 6; ++i) w.f32()[i] = m.f32()[i] = float(i) / 2;
    ps::checkpoint_meta meta;
    meta.shard_name = "ps0";
    meta.shard = 0;
    meta.shards = 2;
    meta.label = 7;
    meta.clocks = {7, 8, 7};
    meta.optimizer_steps = 22;
    meta.state_tensors = 1;
    ps::memory_checkpoint_store store;
    if (!ps::write_checkpoint(store, meta, {{"fc.weight", &w}, {"fc.weight.momentum", &m}}).ok()) return 1;
    auto b = store.get(ps::checkpoint_name("ps0", 7));
    if (!b) return 1;
    write(root / "checkpoint_fuzz", "two_tensors_one_state", **b);
  }

  // --- pre-processing chunks -----------------------------------------------
  write(root / "preprocess_chunks_fuzz", "counts",
        framed(0, count_chunks({{"", 1}, {"a", 2}, {"abc", 3}, {"b", 40000}, {std::string(20, 'z'), 5}}, 32)));
  // Strings, then 8-hex-digit ones: the latter go as hex runs.
  write(root / "preprocess_chunks_fuzz", "counts_hex_runs",
        framed(0, count_chunks({{"", 3}, {"0000000", 1}, {"ABCDEF12", 2}, {"a", 1}, {"a0000000", 4},
                                {"a0000001", 1}, {"b0000000", 7}, {"ffffffff", 2}},
                               40)));
  {
    std::vector<char> a, b;
    int32_t prev = -1;
    for (int32_t id : {-1, 0, 1, 5, -1, 200, 70000}) pp::append_id(a, id, prev);
    for (int32_t id : {70001, -1, 2000000000}) pp::append_id(b, id, prev);
    write(root / "preprocess_chunks_fuzz", "ids", framed(1, {a, b}));
  }
  {
    std::vector<char> a, b;
    for (const char* s : {"", "cat", "dog"}) pp::append_vocab_record(a, s);
    pp::append_vocab_record(b, std::string(300, 'x'));
    write(root / "preprocess_chunks_fuzz", "vocab", framed(2, {a, b}));
  }
  {
    // A hashed merge's pushed column: the empty string, increasing values
    // (delta-coded), then some out of order (plain), in small chunks.
    pp::hex_column h;
    h.has_empty = true;
    h.empty_count = 5;
    for (uint32_t v : {0u, 7u, 300u, 70000u, 0x7fffffffu, 0xfffffff0u, 3u, 2u, 0xffffffffu})
      h.pairs.insert(h.pairs.end(), {v, v % 4 + 1});
    std::vector<std::vector<char>> cs;
    std::size_t next = 0;
    do cs.push_back(pp::next_hex_column_chunk(h, next, 32));
    while (next < h.entries());
    write(root / "preprocess_chunks_fuzz", "hex_column", framed(3, cs));
  }
  std::printf("seeds written under %s\n", root.c_str());
  return 0;
}
