// libFuzzer target for the wire boundary: any byte string must decode to a
// consistent message or to a status, never crash or read out of bounds.
// Build: -DHETFLOW_FUZZ=ON with clang; run: decode_message_fuzz -max_total_time=60
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "schemas/tensor_codec.hpp"

namespace hs = hetflow::schemas;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Small limits so the fuzzer also exercises the too-large paths.
  hs::read_limits limits;
  limits.max_message_bytes = 1 << 20;
  limits.max_rank = 8;
  limits.max_tensors = 64;
  limits.max_text_bytes = 256;

  hetflow::wire_buffer buf(size);
  if (size > 0) std::memcpy(buf.data(), data, size);
  auto ref = std::make_shared<const hetflow::wire_buffer>(std::move(buf));
  // The data-plane token check runs on every arrival before decoding.
  auto token = hs::read_wire_token(ref->bytes());
  if (!token.has_value() && token.error().code() != hetflow::errc::wire_corrupt) std::abort();
  auto decoded = hs::decode_message(ref, limits, "fuzz");
  if (!decoded.has_value()) {
    const auto code = decoded.error().code();
    if (code != hetflow::errc::wire_corrupt && code != hetflow::errc::wire_too_large) std::abort();
    return 0;
  }
  // Touch everything the views promise, so ASan sees any out-of-bounds span.
  const auto* lo = ref->data();
  const auto* hi = lo + ref->size();
  unsigned sum = 0;
  for (std::size_t i = 0; i < decoded->tensor_count(); ++i) {
    const auto& v = decoded->tensor(i);
    if (v.shape.size() > limits.max_rank || v.numel() < 0) std::abort();
    if (v.data.size() != uint64_t(v.numel()) * hetflow::dtype_size(v.type)) std::abort();
    if (!v.data.empty() && (v.data.data() < lo || v.data.data() + v.data.size() > hi)) std::abort();
    for (std::byte b : v.data) sum += unsigned(b);
    for (int64_t d : v.shape) sum += unsigned(d);
  }
  for (std::byte b : decoded->payload()) sum += unsigned(b);
  sum += unsigned(decoded->header().sender.size() + decoded->header().target.size());
  volatile unsigned sink = sum;
  (void)sink;
  return 0;
}
