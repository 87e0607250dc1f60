// libFuzzer target: one received wire message -> every protocol reader that
// takes wire messages from peers, each on the same bytes:
//
//   schemas::decode_message         the Envelope (schemas/tensor_codec.hpp)
//   stream::read_batch              pre-processing shard -> trainer batches
//   stream::read_assign             hetpipe head -> shards: the consumers
//   ps::read_ps_message + tensor_of PS worker <-> ps_shard messages
//
// (schemas/fuzz/decode_message_fuzz.cpp fuzzes decode_message alone, with
// deeper checks of the tensor views; this one goes on into the protocols.)
//
// Contract: errc::wire_corrupt or errc::wire_too_large, or a message whose
// views lie inside the received buffer and agree with its shapes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "actors/builtin/stream_protocol.hpp"
#include "actors/ps/ps_protocol.hpp"
#include "schemas/tensor_codec.hpp"
#include "test/fuzz/fuzz_check.hpp"

namespace hs = hetflow::schemas;
namespace stream = hetflow::actors::builtin::stream;
namespace ps = hetflow::ps;
using hetflow::errc;

namespace {

bool wire_error(const hetflow::status& s) {
  return s.code() == errc::wire_corrupt || s.code() == errc::wire_too_large;
}

template <class T>
bool inside(std::span<const T> v, const hetflow::wire_buffer& buf) {
  if (v.empty()) return true;
  const auto* lo = reinterpret_cast<const std::byte*>(v.data());
  return lo >= buf.data() && lo + v.size_bytes() <= buf.data() + buf.size();
}

void check_batch(const hs::decoded_message& msg) {
  auto b = stream::read_batch(msg, "fuzz");
  if (!b) {
    FUZZ_CHECK(b.error().code() == errc::wire_corrupt, "read_batch: wire_corrupt only");
    return;
  }
  FUZZ_CHECK(b->image_shape.size() >= 2, "samples are (b, ...): images (b, C, H, W), click rows (b, 39)");
  uint64_t numel = 1;
  for (int64_t d : b->image_shape) numel *= uint64_t(d);
  FUZZ_CHECK(b->images.size() == numel, "image view matches its shape");
  FUZZ_CHECK(b->labels.size() == uint64_t(b->image_shape[0]), "one label per image");
  FUZZ_CHECK(b->ids.size() == uint64_t(b->image_shape[0]), "one id per image");
  FUZZ_CHECK(inside(b->images, *msg.buffer()) && inside(b->labels, *msg.buffer()) &&
                 inside(b->ids, *msg.buffer()),
             "batch views inside the buffer");
  double sum = 0;
  for (float f : b->images) sum += double(f);
  for (int32_t l : b->labels) sum += l;
  for (int64_t i : b->ids) sum += double(i);
  volatile double sink = sum;
  (void)sink;
}

// The head's assign message (hetpipe's stream consumers).
void check_assign(const hs::decoded_message& msg) {
  auto names = stream::read_assign(msg, "fuzz");
  if (!names) {
    FUZZ_CHECK(names.error().code() == errc::wire_corrupt, "read_assign: wire_corrupt only");
    return;
  }
  FUZZ_CHECK(!names->empty() && names->size() == msg.header().seq, "one name per consumer the header counts");
  for (const auto& n : *names) FUZZ_CHECK(!n.empty() && n.find('\n') == std::string::npos, "names are lines");
}

void check_ps(const hetflow::wire_buffer_ref& buf, const hs::read_limits& limits) {
  auto m = ps::read_ps_message(buf, limits, "fuzz");
  if (!m) {
    FUZZ_CHECK(wire_error(m.error()), "read_ps_message: wire errors only");
    return;
  }
  if (m->kind == ps::kind_checkpoints || m->kind == ps::kind_restored)
    FUZZ_CHECK(m->msg.tensor_count() == 1 && m->list.size() == std::size_t(m->msg.tensor(0).numel()),
               "the i64 list is the one tensor");
  for (std::size_t i = 0; i <= m->msg.tensor_count(); ++i) {
    auto t = ps::tensor_of(*m, i);
    if (!t) {
      FUZZ_CHECK(t.error().code() == errc::wire_corrupt, "tensor_of: wire_corrupt only");
      continue;
    }
    FUZZ_CHECK(i < m->msg.tensor_count(), "no tensor past the end");
    FUZZ_CHECK(uint64_t(t->numel()) == uint64_t(m->msg.tensor(i).numel()), "tensor_of keeps the element count");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  // Small limits, so that the too-large paths are reachable too.
  hs::read_limits limits;
  limits.max_message_bytes = 1 << 20;
  limits.max_rank = 8;
  limits.max_tensors = 64;
  limits.max_text_bytes = 256;

  // What a data plane hands over: the bytes in an aligned wire_buffer.
  hetflow::wire_buffer wb(size);
  if (size > 0) std::memcpy(wb.data(), data, size);
  const auto buf = std::make_shared<const hetflow::wire_buffer>(std::move(wb));

  auto msg = hs::decode_message(buf, limits, "fuzz");
  if (!msg) {
    FUZZ_CHECK(wire_error(msg.error()), "decode_message: wire errors only");
  } else {
    FUZZ_CHECK(msg->buffer() == buf, "the message shares the buffer");
    check_batch(*msg);
    check_assign(*msg);
  }
  check_ps(buf, limits);
  return 0;
}
