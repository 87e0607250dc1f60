// Tensor <-> Cap'n Proto codec. The only public face of schemas/*.capnp: no
// generated header leaks out of schemas/.
//
// A wire message is ONE single-segment Cap'n Proto message (envelope.capnp
// `Envelope`) laid out in a wire_buffer as
//
//   [u32 segment_count-1 = 0][u32 segment_words][segment words ...]
//
// Tensor data is a `Data` field. Encoding builds the message directly in the
// wire_buffer (message_builder::add_tensor returns the span to fill: no extra
// copy); decoding reads it in place (tensor_view.data points into the buffer).
//
// A receiver decodes with read_limits it chose; anything truncated, corrupt,
// multi-segment, over the limits or inconsistent (data size != numel*dtype
// size, negative dims, rank too high) is an errc::wire_corrupt or
// errc::wire_too_large status naming the peer. Never a crash.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "schemas/dtype.hpp"
#include "schemas/error.hpp"
#include "schemas/wire_buffer.hpp"

namespace hetflow::schemas {

struct tensor_meta {
  dtype type = dtype::f32;
  std::vector<int64_t> shape;  // empty = 0-d scalar (1 element)
  // Product of the dims; -1 if a dim is negative or the product overflows.
  int64_t numel() const noexcept;
  uint64_t byte_size() const noexcept { return uint64_t(numel()) * dtype_size(type); }
};

// A borrowed, read-only tensor: valid while the buffer it came from lives.
struct tensor_view {
  dtype type = dtype::f32;
  std::span<const int64_t> shape;
  std::span<const std::byte> data;
  int64_t numel() const noexcept;  // as tensor_meta::numel()
};

// Envelope fields other than tensors. `kind` is an application message type
// (the receiving actor interprets it); `seq` orders messages of one stream.
struct envelope_header {
  uint32_t kind = 0;
  uint64_t seq = 0;
  std::string sender;  // actor name
  std::string target;  // actor name
};

struct read_limits {
  uint64_t max_message_bytes = 1ull << 30;  // whole message, bytes
  uint32_t max_rank = 16;
  uint32_t max_tensors = 4096;
  uint32_t max_text_bytes = 1 << 16;        // sender/target names, payload text
};
// Error codes from decode_message: exceeding one of these read_limits is
// errc::wire_too_large; anything malformed or inconsistent is errc::wire_corrupt.

// Hard bounds of the single-segment format, whatever the read_limits: a Cap'n
// Proto blob holds at most 2^29-1 bytes and a segment at most 2^29-1 words.
// TODO(perf): a tensor over max_tensor_bytes (512 MiB) must be split into
// several tensors by the sender; nothing does that automatically yet.
inline constexpr uint64_t max_tensor_bytes = (uint64_t{1} << 29) - 1;
inline constexpr uint64_t max_wire_message_bytes = uint64_t{1} << 32;  // table + segment

// Whether a message with these parts can be encoded: every dim >= 0, element
// counts do not overflow, each tensor and the payload <= max_tensor_bytes, the
// whole message <= max_wire_message_bytes. errc::invalid_argument naming the
// offending tensor otherwise. message_builder throws where this fails.
status check_encodable(const envelope_header& header, std::span<const tensor_meta> tensors,
                       std::size_t payload_bytes = 0);

// The exact byte size of the message message_builder would build (for callers
// that must reserve or register receive memory up front).
expected<std::size_t> encoded_size(const envelope_header& header,
                                   std::span<const tensor_meta> tensors,
                                   std::size_t payload_bytes = 0);

// Builds one message. Usage:
//   message_builder b(header, {meta_a, meta_b}, payload_bytes);
//   auto a = b.tensor_data(0); fill a ...; auto b1 = b.tensor_data(1); ...
//   wire_buffer buf = std::move(b).finish();
// Sizes are exact: one allocation, one segment.
//
// The bytes of tensor_data(i) and payload() start UNINITIALISED (no memset of
// bulk data): the caller must write all of them before finish(), or stale heap
// bytes go on the wire. Everything else (structure, padding) is zeroed.
// Throws std::invalid_argument where check_encodable() fails (check first to
// get a status instead) and std::bad_alloc. Not thread-safe; single owner.
class message_builder {
public:
  message_builder(const envelope_header& header, std::span<const tensor_meta> tensors,
                  std::size_t payload_bytes = 0);
  // So that `message_builder b(h, {meta_a, meta_b})` compiles (std::span has no
  // initializer_list constructor in C++20).
  message_builder(const envelope_header& header, std::initializer_list<tensor_meta> tensors,
                  std::size_t payload_bytes = 0);
  // The same, with the message's storage from `allocate(bytes)` (e.g. a pool
  // of recycled buffers); it must return a buffer of exactly `bytes` bytes.
  using allocator = std::function<wire_buffer(std::size_t bytes)>;
  message_builder(const envelope_header& header, std::span<const tensor_meta> tensors,
                  std::size_t payload_bytes, const allocator& allocate);
  ~message_builder();
  message_builder(message_builder&&) noexcept;
  message_builder& operator=(message_builder&&) noexcept;

  // Writable bytes of tensor i (byte_size() of its meta), inside the message.
  // Throws std::out_of_range for a bad i, std::logic_error after finish().
  std::span<std::byte> tensor_data(std::size_t i);
  // Writable free-form payload bytes (control data), inside the message.
  std::span<std::byte> payload();
  // The finished message. The builder is empty afterwards.
  wire_buffer finish() &&;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// Convenience: one tensor, copying `data` (byte_size() bytes) into the message.
expected<wire_buffer> encode_tensor(const envelope_header& header, const tensor_meta& meta,
                                    std::span<const std::byte> data);

// A decoded message: owns (a share of) its buffer; views point into it.
// Tensor data and the payload alias the buffer (no copy); shapes are small
// owned copies. A default-constructed or moved-from one is empty (no tensors,
// empty header, null buffer). tensor(i) throws std::out_of_range for a bad i.
class decoded_message {
public:
  decoded_message();
  ~decoded_message();
  decoded_message(decoded_message&&) noexcept;
  decoded_message& operator=(decoded_message&&) noexcept;

  const envelope_header& header() const noexcept;
  std::size_t tensor_count() const noexcept;
  const tensor_view& tensor(std::size_t i) const;
  std::span<const std::byte> payload() const noexcept;
  const wire_buffer_ref& buffer() const noexcept;

private:
  friend expected<decoded_message> decode_message(wire_buffer_ref, const read_limits&,
                                                  std::string_view);
  struct impl;
  std::unique_ptr<impl> impl_;
};

// Data-plane token. A node of a cluster with a secret derives a 64-bit token
// from it (node_runtime) and sets it here once, before it builds any message:
// message_builder then writes it into every envelope (`auth`), and a receiver
// drops data-plane messages whose token differs (a stranger who reached the
// data plane's port, or a node with another secret). 0 (the default): none.
// The token is process-wide: a process is one node of one cluster.
// Files must not carry it: writers of messages to disk call clear_wire_token.
void set_wire_token(uint64_t token) noexcept;
uint64_t wire_token() noexcept;

// The token in `buf`'s envelope: 0 when the envelope has none (a message of
// an older build, or a file). Reads only the segment table, the root pointer
// and the envelope's data section, with bounds checks: wire_corrupt for
// anything that is not a single-segment message with a struct root.
expected<uint64_t> read_wire_token(std::span<const std::byte> buf);

// Sets the token of a message built by message_builder to 0 (files).
void clear_wire_token(wire_buffer& buf) noexcept;

// Decodes and validates `buf` (from `peer`, used in error messages). Cost is
// O(tensors + dims), independent of tensor bytes. Every Cap'n Proto exception
// is caught here and becomes a status "message from <peer>: ...".
expected<decoded_message> decode_message(wire_buffer_ref buf, const read_limits& limits,
                                         std::string_view peer);

}  // namespace hetflow::schemas
