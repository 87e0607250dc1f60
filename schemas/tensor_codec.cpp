// Tensor <-> Cap'n Proto codec: the schema boundary. Generated code and
// kj::Exception stay inside this file.
//
// Message layout built by message_builder (one segment, words of 8 bytes):
//
//   word 0                 segment table: u32 0 (= 1 segment), u32 segment words
//   word 1                 root pointer -> Envelope
//   Envelope struct        data (kind, seq, auth) + 4 pointers
//   sender, target text    NUL-terminated, only when non-empty
//   List(Tensor)           tag word + one struct per tensor, only when any
//   shape lists            List(Int64) of each tensor, in tensor order
//   ---------------------- end of the "meta" region: zeroed before building
//   tensor data blobs      in tensor order, each padded to a word
//   payload blob           only when payload_bytes > 0
//
// Cap'n Proto allocates by bumping a pointer through the segment, so the order
// of the init*() calls below IS this layout; the sizes are computed up front,
// one wire_buffer is allocated, and the constructor verifies that the builder
// filled exactly that many words. Blob bytes are not zeroed (the caller writes
// them); their trailing padding is.

#include "schemas/tensor_codec.hpp"

#include <atomic>
#include <bit>
#include <cstring>
#include <stdexcept>
#include <string>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include "schemas/envelope.capnp.h"
#include "schemas/tensor.capnp.h"

namespace hetflow::schemas {
namespace {

// Tensor bytes travel in host order and the segment table is written with
// memcpy; every host we support is little-endian, as is Cap'n Proto's wire.
static_assert(std::endian::native == std::endian::little,
              "the hetflow wire format assumes a little-endian host");

static_assert(uint16_t(wire::DType::F32) == uint16_t(dtype::f32));
static_assert(uint16_t(wire::DType::F16) == uint16_t(dtype::f16));
static_assert(uint16_t(wire::DType::BF16) == uint16_t(dtype::bf16));
static_assert(uint16_t(wire::DType::I32) == uint16_t(dtype::i32));
static_assert(uint16_t(wire::DType::I64) == uint16_t(dtype::i64));
static_assert(uint16_t(wire::DType::U8) == uint16_t(dtype::u8));

constexpr uint64_t word_bytes = sizeof(capnp::word);
static_assert(word_bytes == 8);

constexpr uint64_t envelope_words = uint64_t{wire::Envelope::_capnpPrivate::dataWordSize} +
                                    wire::Envelope::_capnpPrivate::pointerCount;
constexpr uint64_t tensor_struct_words = uint64_t{wire::Tensor::_capnpPrivate::dataWordSize} +
                                         wire::Tensor::_capnpPrivate::pointerCount;
constexpr uint64_t max_list_elements = (uint64_t{1} << 29) - 1;
constexpr uint64_t max_segment_words = (uint64_t{1} << 29) - 1;
static_assert(max_wire_message_bytes == (max_segment_words + 1) * word_bytes);

// Nesting of a valid message: Envelope -> List(Tensor) -> Tensor -> shape/data.
constexpr int reader_nesting_limit = 8;
// Extra traversal budget above the message's own size. A valid message reads
// each word at most once; the slack only absorbs Cap'n Proto's per-object
// rounding. A message that aliases a big blob from many pointers exceeds it.
constexpr uint64_t traversal_slack_words = 64;

constexpr uint64_t words_for(uint64_t bytes) { return (bytes + word_bytes - 1) / word_bytes; }

uint64_t text_words(const std::string& s) { return s.empty() ? 0 : words_for(s.size() + 1); }

int64_t checked_numel(std::span<const int64_t> shape) noexcept {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  }
  return n;
}

std::string format_shape(std::span<const int64_t> shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

struct layout {
  uint64_t meta_words = 0;     // segment words before the first blob
  uint64_t segment_words = 0;  // whole segment
  std::vector<uint64_t> tensor_bytes;
};

expected<layout> plan_layout(const envelope_header& header, std::span<const tensor_meta> tensors,
                             std::size_t payload_bytes) {
  auto bad = [](std::string msg) {
    return status{errc::invalid_argument, "cannot encode message: " + std::move(msg)};
  };
  if (header.sender.size() + 1 > max_list_elements || header.target.size() + 1 > max_list_elements)
    return bad("sender or target name longer than " + std::to_string(max_list_elements - 1) +
               " bytes");
  if (tensors.size() > max_list_elements)
    return bad(std::to_string(tensors.size()) + " tensors, the format allows " +
               std::to_string(max_list_elements));
  if (payload_bytes > max_tensor_bytes)
    return bad("payload of " + std::to_string(payload_bytes) + " bytes exceeds the limit of " +
               std::to_string(max_tensor_bytes) + " bytes");

  layout l;
  l.tensor_bytes.reserve(tensors.size());
  uint64_t meta = 1 + envelope_words + text_words(header.sender) + text_words(header.target);
  if (!tensors.empty()) meta += 1 + tensors.size() * tensor_struct_words;
  uint64_t blobs = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const tensor_meta& t = tensors[i];
    const std::string which = "tensor " + std::to_string(i) + " (shape " + format_shape(t.shape) + ")";
    if (dtype_size(t.type) == 0) return bad(which + " has an unknown dtype");
    if (t.shape.size() > max_list_elements) return bad(which + " has too many dims");
    for (std::size_t j = 0; j < t.shape.size(); ++j)
      if (t.shape[j] < 0) return bad(which + ": dim " + std::to_string(j) + " is negative");
    const int64_t numel = checked_numel(t.shape);
    uint64_t bytes = 0;
    if (numel < 0 || __builtin_mul_overflow(uint64_t(numel), dtype_size(t.type), &bytes))
      return bad(which + ": element count overflows");
    if (bytes > max_tensor_bytes)
      return bad(which + " is " + std::to_string(bytes) + " bytes; one tensor may hold at most " +
                 std::to_string(max_tensor_bytes) + " bytes, split it");
    meta += t.shape.size();
    blobs += words_for(bytes);
    l.tensor_bytes.push_back(bytes);
    // Both sums stay far below 2^64 (each term < 2^29, at most 2^29 terms);
    // stop early anyway once the segment cannot fit.
    if (meta + blobs > max_segment_words) break;
  }
  l.meta_words = meta;
  l.segment_words = meta + blobs + words_for(payload_bytes);
  if (l.segment_words > max_segment_words)
    return bad("message would be larger than the single-segment limit of " +
               std::to_string(max_wire_message_bytes) + " bytes; send fewer or smaller tensors");
  return l;
}

std::atomic<uint64_t> process_wire_token{0};

// Where the envelope's `auth` field lies: word index of the envelope's data
// section + 2 (kind/padding, seq, auth), checked against the buffer.
// Returns the byte offset of the field, 0 when the envelope's data section
// is too short to hold it, or an error.
expected<std::size_t> auth_offset(std::span<const std::byte> buf) {
  auto corrupt = [](const std::string& what) {
    return status{errc::wire_corrupt, "data-plane token: " + what};
  };
  if (buf.size() < 2 * word_bytes || buf.size() % word_bytes != 0)
    return corrupt(std::to_string(buf.size()) + " bytes is not a message");
  uint32_t table[2];
  std::memcpy(table, buf.data(), sizeof table);
  const uint64_t words = buf.size() / word_bytes - 1;
  if (table[0] != 0 || table[1] != words) return corrupt("not a single-segment message");
  uint64_t root;
  std::memcpy(&root, buf.data() + word_bytes, sizeof root);
  if ((root & 3) != 0) return corrupt("the root is not a struct");
  // Signed 30-bit offset in words, from the end of the pointer (segment word 1).
  const int64_t offset = int64_t(int32_t(uint32_t(root) & ~3u)) >> 2;
  const uint64_t data_words = (root >> 32) & 0xffff;
  const int64_t start = 1 + offset;  // segment word of the data section
  if (start < 1 || uint64_t(start) + data_words > words) return corrupt("the root struct lies outside the message");
  constexpr uint64_t auth_word = 2;  // kind @0 (u32), seq @1 (u64), auth @6 (u64)
  if (data_words <= auth_word) return std::size_t{0};
  return std::size_t((1 + uint64_t(start) + auth_word) * word_bytes);
}

status wire_error(errc code, std::string_view peer, const std::string& what) {
  return status{code, "message from " + std::string(peer) + ": " + what};
}

}  // namespace

void set_wire_token(uint64_t token) noexcept { process_wire_token.store(token, std::memory_order_relaxed); }
uint64_t wire_token() noexcept { return process_wire_token.load(std::memory_order_relaxed); }

expected<uint64_t> read_wire_token(std::span<const std::byte> buf) {
  HF_ASSIGN_OR_RETURN(std::size_t at, auth_offset(buf));
  uint64_t token = 0;
  if (at != 0) std::memcpy(&token, buf.data() + at, sizeof token);
  return token;
}

void clear_wire_token(wire_buffer& buf) noexcept {
  auto at = auth_offset(buf.bytes());
  if (at && *at != 0) std::memset(buf.data() + *at, 0, sizeof(uint64_t));
}

int64_t tensor_meta::numel() const noexcept { return checked_numel(shape); }
int64_t tensor_view::numel() const noexcept { return checked_numel(shape); }

status check_encodable(const envelope_header& header, std::span<const tensor_meta> tensors,
                       std::size_t payload_bytes) {
  return plan_layout(header, tensors, payload_bytes).error();
}

expected<std::size_t> encoded_size(const envelope_header& header,
                                   std::span<const tensor_meta> tensors,
                                   std::size_t payload_bytes) {
  HF_ASSIGN_OR_RETURN(layout l, plan_layout(header, tensors, payload_bytes));
  return std::size_t((1 + l.segment_words) * word_bytes);
}

// ---------------------------------------------------------------------------
// message_builder

struct message_builder::impl {
  wire_buffer buffer;
  std::vector<std::span<std::byte>> tensors;
  std::span<std::byte> payload;
};

message_builder::message_builder(const envelope_header& header,
                                 std::initializer_list<tensor_meta> tensors,
                                 std::size_t payload_bytes)
    : message_builder(header, std::span<const tensor_meta>(tensors.begin(), tensors.size()),
                      payload_bytes) {}

message_builder::message_builder(const envelope_header& header,
                                 std::span<const tensor_meta> tensors, std::size_t payload_bytes)
    : message_builder(header, tensors, payload_bytes, allocator{}) {}

message_builder::message_builder(const envelope_header& header,
                                 std::span<const tensor_meta> tensors, std::size_t payload_bytes,
                                 const allocator& allocate)
    : impl_(std::make_unique<impl>()) {
  expected<layout> planned = plan_layout(header, tensors, payload_bytes);
  if (!planned) throw std::invalid_argument(planned.error().to_string());
  const layout& l = *planned;

  const std::size_t total = (1 + l.segment_words) * word_bytes;
  impl_->buffer = allocate ? allocate(total) : wire_buffer(total);
  if (impl_->buffer.size() != total)
    throw std::logic_error("message_builder: the allocator returned " + std::to_string(impl_->buffer.size()) +
                           " bytes for a message of " + std::to_string(total));
  std::byte* base = impl_->buffer.data();
  // Cap'n Proto builders require zeroed memory for everything they write
  // (texts rely on it for their NUL); blobs are filled by the caller.
  std::memset(base, 0, (1 + l.meta_words) * word_bytes);
  const uint32_t table[2] = {0, uint32_t(l.segment_words)};
  std::memcpy(base, table, sizeof(table));
  auto* segment = reinterpret_cast<capnp::word*>(base + word_bytes);

  try {
    capnp::FlatMessageBuilder message(kj::arrayPtr(segment, l.segment_words));
    auto env = message.initRoot<wire::Envelope>();
    env.setKind(header.kind);
    env.setSeq(header.seq);
    env.setAuth(wire_token());
    // Empty texts stay null pointers (read back as ""), costing no words.
    if (!header.sender.empty())
      env.setSender(capnp::Text::Reader(header.sender.data(), header.sender.size()));
    if (!header.target.empty())
      env.setTarget(capnp::Text::Reader(header.target.data(), header.target.size()));

    impl_->tensors.reserve(tensors.size());
    if (!tensors.empty()) {
      auto list = env.initTensors(uint(tensors.size()));
      for (std::size_t i = 0; i < tensors.size(); ++i) {
        auto t = list[uint(i)];
        t.setDtype(static_cast<wire::DType>(tensors[i].type));
        auto shape = t.initShape(uint(tensors[i].shape.size()));
        for (std::size_t j = 0; j < tensors[i].shape.size(); ++j)
          shape.set(uint(j), tensors[i].shape[j]);
      }
      // Blobs after all shapes, so the zeroed meta region is contiguous.
      for (std::size_t i = 0; i < tensors.size(); ++i) {
        const uint64_t bytes = l.tensor_bytes[i];
        auto data = list[uint(i)].initData(uint(bytes));
        auto* p = reinterpret_cast<std::byte*>(data.begin());
        std::memset(p + bytes, 0, words_for(bytes) * word_bytes - bytes);
        impl_->tensors.emplace_back(p, bytes);
      }
    }
    if (payload_bytes > 0) {
      auto data = env.initPayload(uint(payload_bytes));
      auto* p = reinterpret_cast<std::byte*>(data.begin());
      std::memset(p + payload_bytes, 0, words_for(payload_bytes) * word_bytes - payload_bytes);
      impl_->payload = {p, payload_bytes};
    }

    auto segments = message.getSegmentsForOutput();
    if (segments.size() != 1 || segments[0].begin() != segment ||
        segments[0].size() != l.segment_words)
      throw std::logic_error("message_builder: size computation is wrong (planned " +
                             std::to_string(l.segment_words) + " words, built " +
                             std::to_string(segments.size() == 0 ? 0 : segments[0].size()) +
                             " in " + std::to_string(segments.size()) + " segments)");
  } catch (const kj::Exception& e) {
    // plan_layout accepted the message, so this is our bug, not the caller's.
    throw std::logic_error("message_builder: Cap'n Proto rejected the message: " +
                           std::string(e.getDescription().cStr()));
  }
}

message_builder::~message_builder() = default;
message_builder::message_builder(message_builder&&) noexcept = default;
message_builder& message_builder::operator=(message_builder&&) noexcept = default;

std::span<std::byte> message_builder::tensor_data(std::size_t i) {
  if (!impl_) throw std::logic_error("message_builder::tensor_data after finish()");
  if (i >= impl_->tensors.size())
    throw std::out_of_range("message_builder::tensor_data(" + std::to_string(i) + "): message has " +
                            std::to_string(impl_->tensors.size()) + " tensors");
  return impl_->tensors[i];
}

std::span<std::byte> message_builder::payload() {
  if (!impl_) throw std::logic_error("message_builder::payload after finish()");
  return impl_->payload;
}

wire_buffer message_builder::finish() && {
  if (!impl_) throw std::logic_error("message_builder::finish called twice");
  // The buffer was allocated at the exact size (verified in the constructor),
  // so there is nothing to shrink.
  wire_buffer out = std::move(impl_->buffer);
  impl_.reset();
  return out;
}

expected<wire_buffer> encode_tensor(const envelope_header& header, const tensor_meta& meta,
                                    std::span<const std::byte> data) {
  std::span<const tensor_meta> one(&meta, 1);
  HF_RETURN_IF_ERROR(check_encodable(header, one));
  if (data.size() != meta.byte_size())
    return status{errc::invalid_argument,
                  "encode_tensor: got " + std::to_string(data.size()) + " bytes, shape " +
                      format_shape(meta.shape) + " of " + to_string(meta.type) + " needs " +
                      std::to_string(meta.byte_size())};
  try {
    message_builder b(header, one);
    if (!data.empty()) std::memcpy(b.tensor_data(0).data(), data.data(), data.size());
    return std::move(b).finish();
  } catch (const std::bad_alloc&) {
    return status{errc::out_of_memory, "encode_tensor: cannot allocate " +
                                           std::to_string(data.size()) + " bytes for a message"};
  }
}

// ---------------------------------------------------------------------------
// decode

namespace {
// What read_envelope fills; decoded_message::impl adds the buffer it points into.
struct decoded_parts {
  envelope_header header;
  std::vector<int64_t> dims;  // all shapes, back to back; tensor_view::shape points here
  std::vector<tensor_view> tensors;
  std::span<const std::byte> payload;
};
}  // namespace

struct decoded_message::impl : decoded_parts {
  wire_buffer_ref buffer;
};

namespace {
const auto& empty_decoded() {
  static const struct {
    wire_buffer_ref buffer;
    envelope_header header;
  } empty;
  return empty;
}
}  // namespace

decoded_message::decoded_message() = default;
decoded_message::~decoded_message() = default;
decoded_message::decoded_message(decoded_message&&) noexcept = default;
decoded_message& decoded_message::operator=(decoded_message&&) noexcept = default;

const envelope_header& decoded_message::header() const noexcept {
  return impl_ ? impl_->header : empty_decoded().header;
}
std::size_t decoded_message::tensor_count() const noexcept {
  return impl_ ? impl_->tensors.size() : 0;
}
const tensor_view& decoded_message::tensor(std::size_t i) const {
  if (i >= tensor_count())
    throw std::out_of_range("decoded_message::tensor(" + std::to_string(i) + "): message has " +
                            std::to_string(tensor_count()) + " tensors");
  return impl_->tensors[i];
}
std::span<const std::byte> decoded_message::payload() const noexcept {
  return impl_ ? impl_->payload : std::span<const std::byte>{};
}
const wire_buffer_ref& decoded_message::buffer() const noexcept {
  return impl_ ? impl_->buffer : empty_decoded().buffer;
}

namespace {

// Walks a root Envelope into `out`, checking every field against `limits`.
// Throws kj::Exception where Cap'n Proto finds the structure broken; the
// caller turns that into a status. Kept free of locals with noexcept(false)
// destructors (the message reader lives in the caller): GCC 12 at -O2
// miscompiled a `return` inside the try block that held the reader (it
// destroyed a never-constructed return value when Cap'n Proto threw).
status read_envelope(wire::Envelope::Reader env, const read_limits& limits,
                     std::string_view peer, decoded_parts& out,
                     std::vector<std::size_t>& dim_offsets) {
  auto corrupt = [&](const std::string& what) { return wire_error(errc::wire_corrupt, peer, what); };
  auto too_large = [&](const std::string& what) {
    return wire_error(errc::wire_too_large, peer, what);
  };
  // Each pointer is followed exactly once: every get*() of a pointer field
  // counts against the traversal limit again.
  out.header.kind = env.getKind();
  out.header.seq = env.getSeq();
  auto sender = env.getSender();
  if (sender.size() > limits.max_text_bytes)
    return too_large("sender name is " + std::to_string(sender.size()) + " bytes, limit " +
                     std::to_string(limits.max_text_bytes));
  out.header.sender.assign(sender.begin(), sender.size());
  auto target = env.getTarget();
  if (target.size() > limits.max_text_bytes)
    return too_large("target name is " + std::to_string(target.size()) + " bytes, limit " +
                     std::to_string(limits.max_text_bytes));
  out.header.target.assign(target.begin(), target.size());

  auto tensors = env.getTensors();
  if (tensors.size() > limits.max_tensors)
    return too_large(std::to_string(tensors.size()) + " tensors, limit " +
                     std::to_string(limits.max_tensors));
  out.tensors.reserve(tensors.size());
  dim_offsets.reserve(tensors.size() + 1);
  for (uint i = 0; i < tensors.size(); ++i) {
    auto t = tensors[i];
    const std::string which = "tensor " + std::to_string(i);
    const auto raw_type = static_cast<uint16_t>(t.getDtype());
    tensor_view view;
    switch (raw_type) {
      case uint16_t(dtype::f32): view.type = dtype::f32; break;
      case uint16_t(dtype::f16): view.type = dtype::f16; break;
      case uint16_t(dtype::bf16): view.type = dtype::bf16; break;
      case uint16_t(dtype::i32): view.type = dtype::i32; break;
      case uint16_t(dtype::i64): view.type = dtype::i64; break;
      case uint16_t(dtype::u8): view.type = dtype::u8; break;
      default: return corrupt(which + " has unknown dtype " + std::to_string(raw_type));
    }
    auto shape = t.getShape();
    if (shape.size() > limits.max_rank)
      return too_large(which + " has rank " + std::to_string(shape.size()) + ", limit " +
                       std::to_string(limits.max_rank));
    const std::size_t first_dim = out.dims.size();
    dim_offsets.push_back(first_dim);
    for (uint j = 0; j < shape.size(); ++j) out.dims.push_back(shape[j]);
    std::span<const int64_t> dims(out.dims.data() + first_dim, shape.size());
    for (std::size_t j = 0; j < dims.size(); ++j)
      if (dims[j] < 0)
        return corrupt(which + " shape " + format_shape(dims) + ": dim " + std::to_string(j) +
                       " is negative");
    const int64_t numel = checked_numel(dims);
    uint64_t bytes = 0;
    if (numel < 0 || __builtin_mul_overflow(uint64_t(numel), dtype_size(view.type), &bytes))
      return corrupt(which + " shape " + format_shape(dims) + ": element count overflows");
    auto data = t.getData();
    if (data.size() != bytes)
      return corrupt(which + " holds " + std::to_string(data.size()) + " data bytes but shape " +
                     format_shape(dims) + " of " + to_string(view.type) + " needs " +
                     std::to_string(bytes));
    view.data = {reinterpret_cast<const std::byte*>(data.begin()), data.size()};
    out.tensors.push_back(view);
  }
  auto payload = env.getPayload();
  if (payload.size() > limits.max_text_bytes)
    return too_large("payload is " + std::to_string(payload.size()) + " bytes, limit " +
                     std::to_string(limits.max_text_bytes));
  out.payload = {reinterpret_cast<const std::byte*>(payload.begin()), payload.size()};
  return {};
}

}  // namespace

expected<decoded_message> decode_message(wire_buffer_ref buf, const read_limits& limits,
                                         std::string_view peer) {
  auto corrupt = [&](const std::string& what) { return wire_error(errc::wire_corrupt, peer, what); };

  if (!buf) return corrupt("no buffer (null wire_buffer_ref)");
  const std::size_t size = buf->size();
  if (size > limits.max_message_bytes)
    return wire_error(errc::wire_too_large, peer,
                      std::to_string(size) + " bytes exceed this node's limit of " +
                          std::to_string(limits.max_message_bytes) + " bytes per message");
  if (size < word_bytes)
    return corrupt("truncated: " + std::to_string(size) +
                   " bytes, shorter than the 8-byte segment table");
  if (size % word_bytes != 0)
    return corrupt(std::to_string(size) + " bytes is not a whole number of 8-byte words");
  if (reinterpret_cast<std::uintptr_t>(buf->data()) % word_bytes != 0)
    return corrupt("buffer is not 8-byte aligned (receive into a wire_buffer)");

  uint32_t table[2];
  std::memcpy(table, buf->data(), sizeof(table));
  if (table[0] != 0)
    return corrupt("expected a single-segment message, segment table says " +
                   std::to_string(uint64_t{table[0]} + 1) + " segments");
  const uint64_t words = size / word_bytes - 1;
  if (table[1] != words)
    return corrupt("segment table says " + std::to_string(table[1]) + " words but " +
                   std::to_string(words) + " follow it (" +
                   (table[1] > words ? "truncated)" : "trailing bytes)"));
  if (words == 0) return corrupt("empty segment, no root pointer");

  auto out = std::make_unique<decoded_message::impl>();
  std::vector<std::size_t> dim_offsets;
  status st;
  // No `return` inside this try block: see read_envelope.
  try {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = words + traversal_slack_words;
    options.nestingLimit = reader_nesting_limit;
    capnp::FlatArrayMessageReader reader(
        kj::arrayPtr(reinterpret_cast<const capnp::word*>(buf->data()), words + 1), options);
    st = read_envelope(reader.getRoot<wire::Envelope>(), limits, peer, *out, dim_offsets);
  } catch (const kj::Exception& e) {
    st = corrupt("invalid Cap'n Proto structure: " + std::string(e.getDescription().cStr()));
  } catch (const std::bad_alloc&) {
    st = wire_error(errc::out_of_memory, peer, "out of memory while decoding");
  }
  if (!st.ok()) return st;

  // dims no longer grows: point the shapes into it.
  dim_offsets.push_back(out->dims.size());
  for (std::size_t i = 0; i < out->tensors.size(); ++i)
    out->tensors[i].shape = {out->dims.data() + dim_offsets[i], dim_offsets[i + 1] - dim_offsets[i]};
  out->buffer = std::move(buf);

  decoded_message result;
  result.impl_ = std::move(out);
  return result;
}

}  // namespace hetflow::schemas
