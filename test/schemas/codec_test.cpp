#define BOOST_TEST_MODULE schemas_codec
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
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

const std::vector<std::vector<int64_t>> shapes = {
    {}, {0}, {1}, {3, 4}, {2, 0, 5}, {2, 3, 4, 5}};

bool same_bytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(round_trip)

BOOST_AUTO_TEST_CASE(every_dtype_and_shape_with_and_without_payload) {
  uint32_t seed = 1;
  for (dtype t : all_dtypes) {
    for (const auto& shape : shapes) {
      for (std::size_t payload_bytes : {std::size_t{0}, std::size_t{13}}) {
        ++seed;
        BOOST_TEST_CONTEXT("dtype " << to_string(t) << " rank " << shape.size() << " payload "
                                    << payload_bytes) {
          envelope_header h{7, seed, "stage-0", "stage-1"};
          tensor_meta meta{t, shape};
          const auto bytes = meta.byte_size();
          message_builder b(h, {meta}, payload_bytes);
          BOOST_TEST(b.tensor_data(0).size() == bytes);
          BOOST_TEST(b.payload().size() == payload_bytes);
          fill_pattern(b.tensor_data(0), seed);
          fill_pattern(b.payload(), seed + 1000);
          wire_buffer buf = std::move(b).finish();
          BOOST_TEST(buf.size() % 8 == 0u);
          BOOST_TEST(buf.size() == *encoded_size(h, std::span(&meta, 1), payload_bytes));

          auto ref = share(std::move(buf));
          auto decoded = decode_message(ref, read_limits{}, "n1");
          BOOST_TEST_REQUIRE(decoded.has_value(), decoded.error().to_string());
          BOOST_TEST(decoded->header().kind == 7u);
          BOOST_TEST(decoded->header().seq == seed);
          BOOST_TEST(decoded->header().sender == "stage-0");
          BOOST_TEST(decoded->header().target == "stage-1");
          BOOST_TEST_REQUIRE(decoded->tensor_count() == 1u);
          const tensor_view& v = decoded->tensor(0);
          BOOST_TEST(static_cast<int>(v.type) == static_cast<int>(t));
          BOOST_TEST(std::vector<int64_t>(v.shape.begin(), v.shape.end()) == shape,
                     boost::test_tools::per_element());
          BOOST_TEST(v.numel() == meta.numel());
          BOOST_TEST(same_bytes(v.data, pattern(bytes, seed)));
          BOOST_TEST(same_bytes(decoded->payload(), pattern(payload_bytes, seed + 1000)));
          if (bytes > 0) BOOST_TEST(inside(v.data, *ref));  // read in place, not copied
          BOOST_TEST(decoded->buffer().get() == ref.get());
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(encode_tensor_copies_once_and_round_trips) {
  for (dtype t : all_dtypes) {
    for (const auto& shape : shapes) {
      tensor_meta meta{t, shape};
      auto src = pattern(meta.byte_size(), 99);
      auto buf = encode_tensor({1, 2, "a", "b"}, meta, src);
      BOOST_TEST_REQUIRE(buf.has_value(), buf.error().to_string());
      auto ref = share(std::move(*buf));
      auto d = decode_message(ref, {}, "n2");
      BOOST_TEST_REQUIRE(d.has_value(), d.error().to_string());
      BOOST_TEST(same_bytes(d->tensor(0).data, src));
      BOOST_TEST(d->tensor(0).shape.size() == shape.size());
      BOOST_TEST(d->payload().empty());
    }
  }
}

// message_builder with an allocator (the ring's pool of chunk buffers): a
// recycled buffer full of old bytes still makes a valid message, and an
// allocator that returns the wrong size is refused.
BOOST_AUTO_TEST_CASE(builder_storage_from_an_allocator) {
  tensor_meta meta{dtype::f32, {3, 5}};
  int calls = 0;
  message_builder::allocator dirty = [&](std::size_t bytes) {
    ++calls;
    wire_buffer b(bytes);
    std::memset(b.data(), 0xab, bytes);  // what a reused buffer may hold
    return b;
  };
  for (int round = 0; round < 2; ++round) {
    message_builder b({7, 9, "me", "you"}, std::span<const tensor_meta>(&meta, 1), 16, dirty);
    auto src = pattern(meta.byte_size(), 5);
    std::memcpy(b.tensor_data(0).data(), src.data(), src.size());
    std::memset(b.payload().data(), 1, 16);
    auto ref = share(std::move(b).finish());
    auto d = decode_message(ref, {}, "peer");
    BOOST_TEST_REQUIRE(d.has_value(), d.error().to_string());
    BOOST_TEST(d->header().sender == "me");
    BOOST_TEST(d->header().target == "you");
    BOOST_TEST(same_bytes(d->tensor(0).data, src));
    BOOST_TEST(d->payload().size() == 16u);
  }
  BOOST_TEST(calls == 2);
  message_builder::allocator short_one = [](std::size_t bytes) { return wire_buffer(bytes - 8); };
  BOOST_CHECK_THROW(message_builder({1, 1, "a", "b"}, std::span<const tensor_meta>(&meta, 1), 0, short_one),
                    std::logic_error);
}

BOOST_AUTO_TEST_CASE(scalar_has_one_element) {
  tensor_meta meta{dtype::f32, {}};
  BOOST_TEST(meta.numel() == 1);
  BOOST_TEST(meta.byte_size() == 4u);
  float x = 2.5f;
  auto buf = encode_tensor({}, meta, std::as_bytes(std::span(&x, 1)));
  BOOST_TEST_REQUIRE(buf.has_value());
  auto d = decode_message(share(std::move(*buf)), {}, "n1");
  BOOST_TEST_REQUIRE(d.has_value());
  BOOST_TEST(d->tensor(0).shape.empty());
  BOOST_TEST(d->tensor(0).numel() == 1);
  float y = 0;
  std::memcpy(&y, d->tensor(0).data.data(), 4);
  BOOST_TEST(y == 2.5f);
}

BOOST_AUTO_TEST_CASE(many_tensors_mixed) {
  std::vector<tensor_meta> metas;
  for (std::size_t i = 0; i < 40; ++i)
    metas.push_back({all_dtypes[i % 6], shapes[i % shapes.size()]});
  metas.push_back({dtype::i64, {17}});
  envelope_header h{std::numeric_limits<uint32_t>::max(), std::numeric_limits<uint64_t>::max(),
                    "ps_shard/3 \xc3\xa9", std::string(1000, 't')};
  message_builder b(h, metas, 100);
  for (std::size_t i = 0; i < metas.size(); ++i) fill_pattern(b.tensor_data(i), uint32_t(i));
  fill_pattern(b.payload(), 4242);
  BOOST_CHECK_THROW(b.tensor_data(metas.size()), std::out_of_range);
  wire_buffer buf = std::move(b).finish();
  auto ref = share(std::move(buf));
  auto d = decode_message(ref, {}, "n3");
  BOOST_TEST_REQUIRE(d.has_value(), d.error().to_string());
  BOOST_TEST(d->header().kind == std::numeric_limits<uint32_t>::max());
  BOOST_TEST(d->header().seq == std::numeric_limits<uint64_t>::max());
  BOOST_TEST(d->header().sender == h.sender);
  BOOST_TEST(d->header().target == h.target);
  BOOST_TEST_REQUIRE(d->tensor_count() == metas.size());
  for (std::size_t i = 0; i < metas.size(); ++i) {
    const auto& v = d->tensor(i);
    BOOST_TEST(static_cast<int>(v.type) == static_cast<int>(metas[i].type));
    BOOST_TEST(std::vector<int64_t>(v.shape.begin(), v.shape.end()) == metas[i].shape,
               boost::test_tools::per_element());
    BOOST_TEST(same_bytes(v.data, pattern(metas[i].byte_size(), uint32_t(i))));
    if (!v.data.empty()) BOOST_TEST(inside(v.data, *ref));
  }
  BOOST_TEST(same_bytes(d->payload(), pattern(100, 4242)));
  BOOST_TEST(inside(d->payload(), *ref));
  BOOST_CHECK_THROW(d->tensor(metas.size()), std::out_of_range);
}

// The decoder's traversal limit is the message size plus a small slack: a
// legitimate message at the default max_tensors, full of empty and scalar
// tensors (the worst ratio of objects to words), must still fit it.
BOOST_AUTO_TEST_CASE(max_tensors_of_tiny_tensors) {
  read_limits limits;
  std::vector<tensor_meta> metas(limits.max_tensors, tensor_meta{dtype::u8, {0}});
  for (std::size_t i = 0; i < metas.size(); i += 2) metas[i] = {dtype::u8, {}};
  message_builder b({1, 1, "a", "b"}, metas, 1);
  for (std::size_t i = 0; i < metas.size(); ++i) fill_pattern(b.tensor_data(i), uint32_t(i));
  b.payload()[0] = std::byte{1};
  auto d = decode_message(share(std::move(b).finish()), limits, "n1");
  BOOST_TEST_REQUIRE(d.has_value(), d.error().to_string());
  BOOST_TEST(d->tensor_count() == metas.size());
  BOOST_TEST(d->tensor(0).data.size() == 1u);
  BOOST_TEST(d->tensor(1).data.empty());
}

BOOST_AUTO_TEST_CASE(no_tensors_empty_names) {
  message_builder b({}, {}, 5);
  fill_pattern(b.payload(), 3);
  auto buf = std::move(b).finish();
  // root pointer + Envelope (3 data words, 4 pointers) + 1 payload word + table
  BOOST_TEST(buf.size() == 8u * (1 + 1 + 7 + 1));
  auto d = decode_message(share(std::move(buf)), {}, "n1");
  BOOST_TEST_REQUIRE(d.has_value(), d.error().to_string());
  BOOST_TEST(d->tensor_count() == 0u);
  BOOST_TEST(d->header().sender.empty());
  BOOST_TEST(d->header().target.empty());
  BOOST_TEST(same_bytes(d->payload(), pattern(5, 3)));
}

BOOST_AUTO_TEST_CASE(decoded_message_keeps_buffer_alive) {
  auto src = pattern(64, 5);
  auto buf = encode_tensor({}, {dtype::u8, {64}}, src);
  BOOST_TEST_REQUIRE(buf.has_value());
  auto ref = share(std::move(*buf));
  auto d = decode_message(ref, {}, "n1");
  BOOST_TEST_REQUIRE(d.has_value());
  ref.reset();
  decoded_message moved = std::move(*d);
  BOOST_TEST(moved.buffer().use_count() == 1);
  BOOST_TEST(same_bytes(moved.tensor(0).data, src));
  // Moved-from and default-constructed messages are empty, not crashing.
  BOOST_TEST(d->tensor_count() == 0u);
  BOOST_TEST(d->payload().empty());
  BOOST_TEST(d->buffer() == nullptr);
  decoded_message empty;
  BOOST_TEST(empty.header().sender.empty());
  BOOST_CHECK_THROW(empty.tensor(0), std::out_of_range);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(standard_capnp)

// The bytes must be a plain Cap'n Proto single-segment message: any capnp
// implementation reading the schema gets the same envelope back.
BOOST_AUTO_TEST_CASE(readable_by_flat_array_message_reader) {
  std::vector<tensor_meta> metas = {{dtype::f32, {3, 4}}, {dtype::u8, {5}}, {dtype::i64, {}}};
  {
    // Dirty the heap chunks the builder may get next (malloc reuses freed
    // chunks of the same size), so padding left unzeroed would show below.
    std::vector<wire_buffer> junk;
    for (int i = 0; i < 64; ++i) {
      junk.emplace_back(*encoded_size({9, 77, "sender-x", "target-y"}, metas, 11));
      std::memset(junk.back().data(), 0xab, junk.back().size());
    }
  }
  message_builder b({9, 77, "sender-x", "target-y"}, metas, 11);
  for (std::size_t i = 0; i < metas.size(); ++i) fill_pattern(b.tensor_data(i), uint32_t(i));
  fill_pattern(b.payload(), 50);
  wire_buffer buf = std::move(b).finish();

  uint32_t table[2];
  std::memcpy(table, buf.data(), 8);
  BOOST_TEST(table[0] == 0u);  // one segment
  BOOST_TEST(table[1] == buf.size() / 8 - 1);

  kj::ArrayPtr<const capnp::word> words(reinterpret_cast<const capnp::word*>(buf.data()),
                                        buf.size() / 8);
  capnp::FlatArrayMessageReader reader(words);
  BOOST_TEST(reader.getEnd() == words.end());
  auto env = reader.getRoot<wire::Envelope>();
  BOOST_TEST(env.getKind() == 9u);
  BOOST_TEST(env.getSeq() == 77u);
  BOOST_TEST(std::string(env.getSender().cStr()) == "sender-x");
  BOOST_TEST(std::string(env.getTarget().cStr()) == "target-y");
  BOOST_TEST_REQUIRE(env.getTensors().size() == 3u);
  auto t0 = env.getTensors()[0];
  BOOST_TEST((t0.getDtype() == wire::DType::F32));
  BOOST_TEST(t0.getShape().size() == 2u);
  BOOST_TEST(t0.getShape()[1] == 4);
  BOOST_TEST(t0.getData().size() == 48u);
  BOOST_TEST((env.getTensors()[2].getDtype() == wire::DType::I64));
  BOOST_TEST(env.getPayload().size() == 11u);

  // Byte-for-byte what capnp's own MallocMessageBuilder writes for the same
  // content in the same order: proves zeroed padding and standard layout.
  capnp::MallocMessageBuilder ref_builder(buf.size() / 8, capnp::AllocationStrategy::FIXED_SIZE);
  auto r = ref_builder.initRoot<wire::Envelope>();
  r.setKind(9);
  r.setSeq(77);
  r.setSender("sender-x");
  r.setTarget("target-y");
  auto list = r.initTensors(3);
  for (uint i = 0; i < 3; ++i) {
    list[i].setDtype(static_cast<wire::DType>(metas[i].type));
    auto s = list[i].initShape(uint(metas[i].shape.size()));
    for (uint j = 0; j < s.size(); ++j) s.set(j, metas[i].shape[j]);
  }
  for (uint i = 0; i < 3; ++i) {
    auto d = list[i].initData(uint(metas[i].byte_size()));
    fill_pattern(std::as_writable_bytes(std::span(d.begin(), d.size())), i);
  }
  auto p = r.initPayload(11);
  fill_pattern(std::as_writable_bytes(std::span(p.begin(), p.size())), 50);
  auto flat = capnp::messageToFlatArray(ref_builder);
  auto flat_bytes = flat.asBytes();
  BOOST_TEST_REQUIRE(flat_bytes.size() == buf.size());
  BOOST_TEST(std::memcmp(flat_bytes.begin(), buf.data(), buf.size()) == 0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(encoder_contract)

BOOST_AUTO_TEST_CASE(unencodable_metas_are_errors_before_allocation) {
  auto is_invalid = [](const status& s) { return s.code() == errc::invalid_argument; };
  tensor_meta negative{dtype::f32, {3, -1}};
  BOOST_TEST(negative.numel() == -1);
  BOOST_TEST(is_invalid(check_encodable({}, std::span(&negative, 1))));
  BOOST_TEST(check_encodable({}, std::span(&negative, 1)).message().find("tensor 0") !=
             std::string::npos);
  tensor_meta overflow{dtype::f32, {int64_t{1} << 40, int64_t{1} << 40}};
  BOOST_TEST(overflow.numel() == -1);
  BOOST_TEST(is_invalid(check_encodable({}, std::span(&overflow, 1))));
  // 1 GiB: over the 512 MiB Cap'n Proto blob limit; rejected without allocating.
  tensor_meta huge{dtype::u8, {int64_t{1} << 30}};
  BOOST_TEST(is_invalid(check_encodable({}, std::span(&huge, 1))));
  BOOST_CHECK_THROW(message_builder({}, {huge}), std::invalid_argument);
  BOOST_TEST(!encoded_size({}, std::span(&huge, 1)).has_value());
  auto e = encode_tensor({}, huge, {});
  BOOST_TEST(!e.has_value());
  BOOST_TEST(is_invalid(e.error()));
  tensor_meta limit{dtype::u8, {int64_t(max_tensor_bytes)}};
  BOOST_TEST(check_encodable({}, std::span(&limit, 1)).ok());
  tensor_meta over{dtype::u8, {int64_t(max_tensor_bytes) + 1}};
  BOOST_TEST(!check_encodable({}, std::span(&over, 1)).ok());
  BOOST_TEST(!check_encodable({}, {}, max_tensor_bytes + 1).ok());
}

BOOST_AUTO_TEST_CASE(encode_tensor_checks_data_size) {
  auto src = pattern(47, 1);
  auto e = encode_tensor({}, {dtype::f32, {3, 4}}, src);
  BOOST_TEST(!e.has_value());
  BOOST_TEST(e.error().code() == errc::invalid_argument);
}

BOOST_AUTO_TEST_CASE(builder_is_empty_after_finish) {
  message_builder b({}, {tensor_meta{dtype::u8, {3}}});
  fill_pattern(b.tensor_data(0), 1);
  wire_buffer buf = std::move(b).finish();
  BOOST_TEST(!buf.empty());
  BOOST_CHECK_THROW(b.tensor_data(0), std::logic_error);
  BOOST_CHECK_THROW(b.payload(), std::logic_error);
  BOOST_CHECK_THROW(std::move(b).finish(), std::logic_error);
}

BOOST_AUTO_TEST_CASE(builder_moves) {
  message_builder a({}, {tensor_meta{dtype::i32, {2}}});
  auto span_before = a.tensor_data(0);
  message_builder b = std::move(a);
  BOOST_TEST(b.tensor_data(0).data() == span_before.data());  // no reallocation
  fill_pattern(b.tensor_data(0), 8);
  auto d = decode_message(share(std::move(b).finish()), {}, "n1");
  BOOST_TEST_REQUIRE(d.has_value());
  BOOST_TEST(same_bytes(d->tensor(0).data, pattern(8, 8)));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(data_plane_token)

// The process-wide token goes into every envelope built after it is set;
// read_wire_token finds it, clear_wire_token removes it, and decoding is
// unaffected.
BOOST_AUTO_TEST_CASE(builder_stamps_the_process_token) {
  struct restore {
    ~restore() { set_wire_token(0); }
  } r;
  const tensor_meta meta{dtype::f32, {3, 5}};
  auto build = [&](const envelope_header& h) {
    message_builder b(h, {meta}, 7);
    fill_pattern(b.tensor_data(0), 3);
    fill_pattern(b.payload(), 4);
    return std::move(b).finish();
  };
  wire_buffer plain = build({1, 2, "s", "t"});
  BOOST_TEST(*read_wire_token(plain.bytes()) == 0u);
  set_wire_token(0xfeedface12345678ull);
  for (const envelope_header& h : {envelope_header{1, 2, "s", "t"}, envelope_header{9, 0, "", ""},
                                   envelope_header{7, ~0ull, std::string(300, 'x'), "y"}}) {
    wire_buffer buf = build(h);
    BOOST_TEST(buf.size() == *encoded_size(h, std::span(&meta, 1), 7));
    BOOST_TEST(*read_wire_token(buf.bytes()) == 0xfeedface12345678ull);
    // The generated reader sees the same field.
    capnp::FlatArrayMessageReader reader(
        kj::arrayPtr(reinterpret_cast<const capnp::word*>(buf.data()), buf.size() / 8));
    BOOST_TEST(reader.getRoot<wire::Envelope>().getAuth() == 0xfeedface12345678ull);
    auto msg = decode_message(share(copy_of(buf.bytes())), {}, "test");
    BOOST_REQUIRE(msg.has_value());
    BOOST_TEST(msg->header().kind == h.kind);
    BOOST_TEST(msg->header().seq == h.seq);
    clear_wire_token(buf);
    BOOST_TEST(*read_wire_token(buf.bytes()) == 0u);
    auto again = decode_message(share(std::move(buf)), {}, "test");
    BOOST_REQUIRE(again.has_value());
    BOOST_TEST(same_bytes(again->tensor(0).data, msg->tensor(0).data));
    BOOST_TEST(same_bytes(again->payload(), msg->payload()));
  }
}

// An envelope of an older build (no auth field: two data words) reads as 0;
// anything that is not a message is an error, never a read out of bounds.
BOOST_AUTO_TEST_CASE(read_wire_token_of_old_and_bad_messages) {
  capnp::MallocMessageBuilder old;
  auto root = old.initRoot<wire::Envelope>();
  root.setKind(5);
  root.setSeq(6);
  auto flat = capnp::messageToFlatArray(old);
  std::vector<std::byte> bytes(flat.asBytes().size());
  std::memcpy(bytes.data(), flat.asBytes().begin(), bytes.size());
  BOOST_TEST(*read_wire_token(bytes) == 0u);
  // Shrink the root struct's data section to 2 words by hand (an old sender).
  uint64_t ptr;
  std::memcpy(&ptr, bytes.data() + 8, 8);
  ptr = (ptr & ~(uint64_t{0xffff} << 32)) | (uint64_t{2} << 32);
  std::memcpy(bytes.data() + 8, &ptr, 8);
  BOOST_TEST(*read_wire_token(bytes) == 0u);
  // Not messages.
  BOOST_TEST(!read_wire_token({}).has_value());
  BOOST_TEST(!read_wire_token(std::span(bytes.data(), 12)).has_value());
  std::vector<std::byte> junk = pattern(64, 9);
  BOOST_TEST(!read_wire_token(junk).has_value());
  // A root pointer far outside the segment.
  std::vector<std::byte> far(bytes);
  ptr = (uint64_t{3} << 32) | (uint64_t(0x1000000) << 2);
  std::memcpy(far.data() + 8, &ptr, 8);
  BOOST_TEST(!read_wire_token(far).has_value());
  // A negative offset pointing before the segment.
  ptr = (uint64_t{3} << 32) | (uint32_t(-5) << 2);
  std::memcpy(far.data() + 8, &ptr, 8);
  BOOST_TEST(!read_wire_token(far).has_value());
  // Every 8-byte prefix length of a real message, and random words: no crash.
  for (std::size_t n = 0; n <= bytes.size(); n += 8) (void)read_wire_token(std::span(bytes.data(), n));
  for (uint32_t seed = 0; seed < 2000; ++seed) {
    auto r = pattern(8 * (2 + seed % 9), seed);
    const uint32_t table[2] = {0, uint32_t(r.size() / 8 - 1)};
    std::memcpy(r.data(), table, 8);
    (void)read_wire_token(r);
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_CASE(large_wire_buffers_sit_on_whole_huge_pages) {
  hetflow::wire_buffer small(100);
  BOOST_TEST(reinterpret_cast<uintptr_t>(small.data()) % hetflow::wire_buffer::alignment == 0u);
  const std::size_t big_bytes = hetflow::wire_buffer::huge_threshold + 12345;
  hetflow::wire_buffer big(big_bytes);
  BOOST_TEST(big.size() == big_bytes);
  BOOST_TEST(reinterpret_cast<uintptr_t>(big.data()) % hetflow::wire_buffer::huge_page_bytes == 0u);
  std::memset(big.data(), 0x5a, big.size());  // every byte is ours
  BOOST_TEST(static_cast<int>(big.data()[big_bytes - 1]) == 0x5a);
}
