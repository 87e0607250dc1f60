// Hostile and broken input to decode_message: never a crash, always a status
// naming the peer.
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <capnp/message.h>
#include <capnp/serialize.h>

#include "codec_test_util.hpp"
#include "schemas/envelope.capnp.h"
#include "schemas/tensor_codec.hpp"

using namespace hetflow;
using namespace hetflow::schemas;
using namespace hetflow::schemas::test;

namespace {

constexpr const char* peer = "peer-7";

bool names_peer(const status& s) {
  return s.message().find("message from peer-7") != std::string::npos;
}

bool is_wire_error(const status& s) {
  return (s.code() == errc::wire_corrupt || s.code() == errc::wire_too_large) && names_peer(s);
}

bool mentions(const status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

wire_buffer small_message() {
  std::vector<tensor_meta> metas = {{dtype::f32, {2, 3}}, {dtype::u8, {5}}, {dtype::i64, {}}};
  message_builder b({3, 4, "src", "dst"}, metas, 9);
  for (std::size_t i = 0; i < metas.size(); ++i) fill_pattern(b.tensor_data(i), uint32_t(i));
  fill_pattern(b.payload(), 77);
  return std::move(b).finish();
}

// A message built with capnp's own builder, so fields can hold values that
// message_builder refuses to produce.
template <class Fill>
wire_buffer crafted(Fill fill) {
  capnp::MallocMessageBuilder mb;
  auto env = mb.initRoot<wire::Envelope>();
  fill(env);
  auto flat = capnp::messageToFlatArray(mb);
  return copy_of(std::as_bytes(std::span(flat.asBytes().begin(), flat.asBytes().size())));
}

status decode_error(wire_buffer b, const read_limits& limits = {}) {
  auto d = decode_message(share(std::move(b)), limits, peer);
  return d.error();
}

// Everything a successful decode promises, checked by touching every byte.
void check_consistent(const decoded_message& d, const read_limits& limits) {
  const wire_buffer& buf = *d.buffer();
  BOOST_TEST_REQUIRE(d.tensor_count() <= limits.max_tensors);
  BOOST_TEST_REQUIRE(d.header().sender.size() <= limits.max_text_bytes);
  unsigned sum = 0;
  for (std::size_t i = 0; i < d.tensor_count(); ++i) {
    const tensor_view& v = d.tensor(i);
    BOOST_TEST_REQUIRE(v.shape.size() <= limits.max_rank);
    BOOST_TEST_REQUIRE(v.numel() >= 0);
    BOOST_TEST_REQUIRE(v.data.size() == uint64_t(v.numel()) * dtype_size(v.type));
    if (!v.data.empty()) BOOST_TEST_REQUIRE(inside(v.data, buf));
    for (std::byte x : v.data) sum += unsigned(x);
  }
  if (!d.payload().empty()) BOOST_TEST_REQUIRE(inside(d.payload(), buf));
  for (std::byte x : d.payload()) sum += unsigned(x);
  (void)sum;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(corrupt_input)

BOOST_AUTO_TEST_CASE(null_empty_and_odd_sized_buffers) {
  auto d = decode_message(nullptr, {}, peer);
  BOOST_TEST(!d.has_value());
  BOOST_TEST(d.error().code() == errc::wire_corrupt);
  BOOST_TEST(names_peer(d.error()));
  BOOST_TEST(decode_error(wire_buffer{}).code() == errc::wire_corrupt);
  BOOST_TEST(mentions(decode_error(wire_buffer{}), "truncated"));
  wire_buffer odd(13);
  std::memset(odd.data(), 0, 13);
  BOOST_TEST(decode_error(std::move(odd)).code() == errc::wire_corrupt);
}

BOOST_AUTO_TEST_CASE(every_truncation_is_an_error) {
  const wire_buffer full = small_message();
  BOOST_TEST_REQUIRE(decode_message(share(copy_of(full.bytes())), {}, peer).has_value());
  for (std::size_t len = 0; len < full.size(); ++len) {
    BOOST_TEST_CONTEXT("length " << len) {
      // As received: the segment table still claims the full size.
      status s = decode_error(copy_of(full.bytes().first(len)));
      BOOST_TEST(s.code() == errc::wire_corrupt);
      BOOST_TEST(names_peer(s));
      // With the table patched to match: the pointers now run off the end.
      if (len >= 8 && len % 8 == 0) {
        wire_buffer cut = copy_of(full.bytes().first(len));
        const uint32_t words = uint32_t(len / 8 - 1);
        std::memcpy(cut.data() + 4, &words, 4);
        status s2 = decode_error(std::move(cut));
        BOOST_TEST(s2.code() == errc::wire_corrupt);
        BOOST_TEST(names_peer(s2));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(random_byte_flips_never_crash) {
  const wire_buffer full = small_message();
  std::mt19937 rng(20240611);
  std::uniform_int_distribution<std::size_t> pos(0, full.size() - 1);
  std::uniform_int_distribution<int> value(1, 255), flips(1, 4);
  read_limits limits;
  int ok = 0, errors = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    wire_buffer b = copy_of(full.bytes());
    const int n = flips(rng);
    for (int k = 0; k < n; ++k) b.data()[pos(rng)] ^= std::byte(value(rng));
    auto d = decode_message(share(std::move(b)), limits, peer);
    if (d.has_value()) {
      ++ok;
      check_consistent(*d, limits);
    } else {
      ++errors;
      BOOST_TEST_REQUIRE(is_wire_error(d.error()), d.error().to_string());
    }
  }
  BOOST_TEST_MESSAGE("byte flips: " << ok << " decoded, " << errors << " rejected");
  // Flips in tensor bytes decode fine; flips in structure mostly must not.
  BOOST_TEST(ok > 0);
  BOOST_TEST(errors > 0);
}

BOOST_AUTO_TEST_CASE(multi_segment_is_rejected) {
  // A real two-segment message from capnp's builder (tiny first segment).
  capnp::MallocMessageBuilder mb(8, capnp::AllocationStrategy::FIXED_SIZE);
  auto env = mb.initRoot<wire::Envelope>();
  env.setSender(std::string(200, 's'));
  BOOST_TEST_REQUIRE(mb.getSegmentsForOutput().size() > 1u);
  auto flat = capnp::messageToFlatArray(mb);
  status s = decode_error(copy_of(std::as_bytes(std::span(flat.asBytes().begin(), flat.asBytes().size()))));
  BOOST_TEST(s.code() == errc::wire_corrupt);
  BOOST_TEST(mentions(s, "expected a single-segment message"));
  BOOST_TEST(names_peer(s));

  // Segment count field patched on a good message.
  wire_buffer b = small_message();
  const uint32_t one = 1;
  std::memcpy(b.data(), &one, 4);
  status s2 = decode_error(std::move(b));
  BOOST_TEST(s2.code() == errc::wire_corrupt);
  BOOST_TEST(mentions(s2, "single-segment"));
}

BOOST_AUTO_TEST_CASE(trailing_bytes_are_rejected) {
  wire_buffer full = small_message();
  wire_buffer longer(full.size() + 8);
  std::memcpy(longer.data(), full.data(), full.size());
  std::memset(longer.data() + full.size(), 0, 8);
  status s = decode_error(std::move(longer));
  BOOST_TEST(s.code() == errc::wire_corrupt);
  BOOST_TEST(mentions(s, "trailing"));
}

BOOST_AUTO_TEST_CASE(limits_give_wire_too_large) {
  const wire_buffer full = small_message();
  read_limits l;
  l.max_message_bytes = full.size();
  BOOST_TEST(decode_message(share(copy_of(full.bytes())), l, peer).has_value());
  l.max_message_bytes = full.size() - 1;
  status s = decode_error(copy_of(full.bytes()), l);
  BOOST_TEST(s.code() == errc::wire_too_large);
  BOOST_TEST(names_peer(s));

  read_limits few;
  few.max_tensors = 2;  // message has 3
  BOOST_TEST(decode_error(copy_of(full.bytes()), few).code() == errc::wire_too_large);

  read_limits short_text;
  short_text.max_text_bytes = 2;  // "src" is 3 bytes
  status t = decode_error(copy_of(full.bytes()), short_text);
  BOOST_TEST(t.code() == errc::wire_too_large);
  BOOST_TEST(mentions(t, "sender"));

  read_limits small_payload;
  small_payload.max_text_bytes = 8;  // names fit, the 9-byte payload does not
  status p = decode_error(copy_of(full.bytes()), small_payload);
  BOOST_TEST(p.code() == errc::wire_too_large);
  BOOST_TEST(mentions(p, "payload"));
}

BOOST_AUTO_TEST_CASE(rank_over_limit) {
  tensor_meta deep{dtype::u8, std::vector<int64_t>(17, 1)};
  auto buf = encode_tensor({}, deep, pattern(1, 1));
  BOOST_TEST_REQUIRE(buf.has_value());
  wire_buffer b = std::move(*buf);
  wire_buffer copy = copy_of(b.bytes());
  status s = decode_error(std::move(b));  // default max_rank 16
  BOOST_TEST(s.code() == errc::wire_too_large);
  BOOST_TEST(mentions(s, "rank 17"));
  BOOST_TEST(names_peer(s));
  read_limits l;
  l.max_rank = 17;
  BOOST_TEST(decode_message(share(std::move(copy)), l, peer).has_value());
}

BOOST_AUTO_TEST_CASE(data_size_mismatch) {
  auto b = crafted([](wire::Envelope::Builder env) {
    auto t = env.initTensors(1)[0];
    t.setDtype(wire::DType::F32);
    auto s = t.initShape(2);
    s.set(0, 3);
    s.set(1, 4);
    t.initData(47);
  });
  status s = decode_error(std::move(b));
  BOOST_TEST(s.code() == errc::wire_corrupt);
  BOOST_TEST(mentions(s, "tensor 0 holds 47 data bytes"));
  BOOST_TEST(mentions(s, "needs 48"));
  BOOST_TEST(names_peer(s));
}

BOOST_AUTO_TEST_CASE(negative_and_overflowing_dims) {
  auto with_shape = [](std::vector<int64_t> dims, wire::DType type) {
    return crafted([&](wire::Envelope::Builder env) {
      auto t = env.initTensors(1)[0];
      t.setDtype(type);
      auto s = t.initShape(uint(dims.size()));
      for (uint j = 0; j < dims.size(); ++j) s.set(j, dims[j]);
    });
  };
  status neg = decode_error(with_shape({4, -2}, wire::DType::F32));
  BOOST_TEST(neg.code() == errc::wire_corrupt);
  BOOST_TEST(mentions(neg, "negative"));
  // numel overflows int64
  status o1 = decode_error(with_shape({int64_t{1} << 40, int64_t{1} << 40}, wire::DType::U8));
  BOOST_TEST(o1.code() == errc::wire_corrupt);
  BOOST_TEST(mentions(o1, "overflows"));
  status o2 = decode_error(with_shape({int64_t{1} << 62, 2}, wire::DType::U8));
  BOOST_TEST(o2.code() == errc::wire_corrupt);
  BOOST_TEST(mentions(o2, "overflows"));
  // numel fits, numel * 8 bytes does not
  status o3 = decode_error(with_shape({int64_t{1} << 62}, wire::DType::I64));
  BOOST_TEST(o3.code() == errc::wire_corrupt);
  BOOST_TEST(mentions(o3, "overflows"));
  // numel * size fits in 64 bits but the (empty) data does not match
  status o4 = decode_error(with_shape({int64_t{1} << 61}, wire::DType::F32));
  BOOST_TEST(o4.code() == errc::wire_corrupt);
  BOOST_TEST(mentions(o4, "holds 0 data bytes"));
  // A zero dim makes huge others harmless: valid, zero bytes.
  auto zero = decode_message(share(with_shape({0, int64_t{1} << 62}, wire::DType::I64)), {}, peer);
  BOOST_TEST_REQUIRE(zero.has_value(), zero.error().to_string());
  BOOST_TEST(zero->tensor(0).numel() == 0);
}

BOOST_AUTO_TEST_CASE(unknown_dtype) {
  status s = decode_error(crafted([](wire::Envelope::Builder env) {
    env.initTensors(1)[0].setDtype(static_cast<wire::DType>(9));
  }));
  BOOST_TEST(s.code() == errc::wire_corrupt);
  BOOST_TEST(mentions(s, "unknown dtype 9"));
}

BOOST_AUTO_TEST_CASE(wrong_pointer_kinds_are_caught) {
  // Shape sent as a list of texts instead of List(Int64): a kj::Exception
  // inside capnp, which must come out as a status.
  capnp::MallocMessageBuilder mb;
  auto t = mb.initRoot<wire::Envelope>().initTensors(1)[0];
  capnp::AnyPointer::Builder shape_ptr = capnp::AnyStruct::Builder(kj::mv(t)).getPointerSection()[0];
  auto texts = shape_ptr.initAs<capnp::List<capnp::Text>>(2);
  texts.set(0, "a");
  texts.set(1, "b");
  auto flat = capnp::messageToFlatArray(mb);
  status s = decode_error(copy_of(std::as_bytes(std::span(flat.asBytes().begin(), flat.asBytes().size()))));
  BOOST_TEST(s.code() == errc::wire_corrupt);
  BOOST_TEST(mentions(s, "invalid Cap'n Proto structure"));
  BOOST_TEST(names_peer(s));
}

// Many tensors whose data pointers alias one blob: legal pointers, but reading
// them would traverse far more words than the message holds. The traversal
// limit (message words + small slack) must stop it.
BOOST_AUTO_TEST_CASE(aliased_blobs_hit_the_traversal_limit) {
  constexpr int n = 4;
  constexpr int64_t blob = 4096;
  std::vector<tensor_meta> metas(n, tensor_meta{dtype::u8, {0}});
  metas[0].shape = {blob};
  message_builder mb({}, metas);
  fill_pattern(mb.tensor_data(0), 1);
  wire_buffer b = std::move(mb).finish();
  auto* w = reinterpret_cast<uint64_t*>(b.data());
  // Layout (empty names): [0] table [1] root [2..8] envelope (3 data words,
  // 4 pointers) [9] list tag
  // [10+3i .. 12+3i] tensor i (data word, shape ptr, data ptr) [10+3n+i] shape i
  // [10+4n ...] blob 0.
  const int blob_word = 10 + 4 * n;
  auto offset_of = [&](int ptr_word) { return int32_t(uint32_t(w[ptr_word]) >> 2); };
  BOOST_TEST_REQUIRE(offset_of(12) == blob_word - 13);  // tensor 0 data -> blob 0
  BOOST_TEST_REQUIRE(w[10 + 3 * n + 1] == 0u);           // tensor 1 shape {0}
  // Patch tensors 1..n-1: shape {blob}, data -> blob 0 with blob bytes.
  for (int i = 1; i < n; ++i) {
    w[10 + 3 * n + i] = uint64_t(blob);
    const int ptr_word = 12 + 3 * i;
    w[ptr_word] = (uint64_t(blob) << 35) | (uint64_t(2) << 32) |
                  (uint32_t(blob_word - (ptr_word + 1)) << 2) | 1u;
  }
  // Sanity: with no traversal limit capnp accepts it, and the data aliases.
  kj::ArrayPtr<const capnp::word> words(reinterpret_cast<const capnp::word*>(b.data()),
                                        b.size() / 8);
  capnp::FlatArrayMessageReader unlimited(words);
  auto tensors = unlimited.getRoot<wire::Envelope>().getTensors();
  BOOST_TEST_REQUIRE(tensors[n - 1].getData().begin() == tensors[0].getData().begin());
  BOOST_TEST_REQUIRE(tensors[n - 1].getData().size() == size_t(blob));

  status s = decode_error(std::move(b));
  BOOST_TEST(s.code() == errc::wire_corrupt);
  BOOST_TEST(names_peer(s));
  BOOST_TEST_MESSAGE("aliasing: " << s.to_string());
}

BOOST_AUTO_TEST_SUITE_END()
