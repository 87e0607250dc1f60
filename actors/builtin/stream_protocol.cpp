#include "actors/builtin/stream_protocol.hpp"

#include <bit>
#include <cstring>

namespace hetflow::actors::builtin::stream {

static_assert(std::endian::native == std::endian::little, "batch_info is sent as host bytes");

std::string shard_name(int shard) { return "stream_shard_" + std::to_string(shard); }

namespace {

template <class T>
std::span<T> as_span(std::span<std::byte> bytes) {
  return {reinterpret_cast<T*>(bytes.data()), bytes.size() / sizeof(T)};
}

}  // namespace

namespace {

std::vector<int64_t> batch_shape(int64_t b, std::span<const int64_t> sample) {
  std::vector<int64_t> s{b};
  s.insert(s.end(), sample.begin(), sample.end());
  return s;
}

}  // namespace

batch_writer::batch_writer(const std::string& sender, const std::string& target, const batch_info& info,
                           int64_t b, std::span<const int64_t> sample)
    : builder_(schemas::envelope_header{kind_batch, uint64_t(info.step), sender, target},
               {schemas::tensor_meta{dtype::f32, batch_shape(b, sample)}, schemas::tensor_meta{dtype::i32, {b}},
                schemas::tensor_meta{dtype::i64, {b}}},
               sizeof(batch_info)) {
  images_ = as_span<float>(builder_.tensor_data(0));
  labels_ = as_span<int32_t>(builder_.tensor_data(1));
  ids_ = as_span<int64_t>(builder_.tensor_data(2));
  std::memcpy(builder_.payload().data(), &info, sizeof info);
}

wire_buffer_ref batch_writer::finish() && {
  return std::make_shared<const wire_buffer>(std::move(builder_).finish());
}

expected<batch_view> read_batch(const schemas::decoded_message& msg, const std::string& peer) {
  auto bad = [&](const std::string& why) {
    return make_error(errc::wire_corrupt, "stream batch from " + peer + ": " + why);
  };
  if (msg.header().kind != kind_batch) return bad("message kind " + std::to_string(msg.header().kind));
  if (msg.tensor_count() != 3) return bad(std::to_string(msg.tensor_count()) + " tensors, expected 3");
  if (msg.payload().size() != sizeof(batch_info))
    return bad("payload of " + std::to_string(msg.payload().size()) + " bytes, expected " +
               std::to_string(sizeof(batch_info)));
  batch_view v;
  std::memcpy(&v.info, msg.payload().data(), sizeof(batch_info));
  if (v.info.version != protocol_version)
    return bad("protocol version " + std::to_string(v.info.version) + ", this node speaks " +
               std::to_string(protocol_version) + " (mixed hetflow versions?)");
  const auto& x = msg.tensor(0);
  const auto& y = msg.tensor(1);
  const auto& id = msg.tensor(2);
  if (x.type != dtype::f32 || x.shape.size() < 2) return bad("features must be f32 (b, sample...)");
  if (y.type != dtype::i32 || y.shape.size() != 1) return bad("labels must be i32 (b)");
  if (id.type != dtype::i64 || id.shape.size() != 1) return bad("ids must be i64 (b)");
  if (y.shape[0] != x.shape[0] || id.shape[0] != x.shape[0])
    return bad(std::to_string(x.shape[0]) + " samples but " + std::to_string(y.shape[0]) + " labels and " +
               std::to_string(id.shape[0]) + " ids");
  if (int64_t(msg.header().seq) != v.info.step) return bad("envelope seq and batch step differ");
  // Data fields are 8-byte aligned inside the single segment.
  v.images = {reinterpret_cast<const float*>(x.data.data()), x.data.size() / sizeof(float)};
  v.image_shape = x.shape;
  v.labels = {reinterpret_cast<const int32_t*>(y.data.data()), y.data.size() / sizeof(int32_t)};
  v.ids = {reinterpret_cast<const int64_t*>(id.data.data()), id.data.size() / sizeof(int64_t)};
  return v;
}

wire_buffer_ref make_credit(const std::string& sender, const std::string& target, uint64_t credits,
                            int32_t stream) {
  schemas::envelope_header h{kind_credit, credits, sender, target};
  schemas::message_builder b(h, std::span<const schemas::tensor_meta>{}, stream >= 0 ? sizeof stream : 0);
  if (stream >= 0) std::memcpy(b.payload().data(), &stream, sizeof stream);
  return std::make_shared<const wire_buffer>(std::move(b).finish());
}

expected<int32_t> credit_stream(const schemas::decoded_message& msg) {
  if (msg.payload().empty()) return int32_t{-1};
  int32_t k;
  if (msg.payload().size() != sizeof k) return make_error(errc::wire_corrupt, "credit with a bad payload");
  std::memcpy(&k, msg.payload().data(), sizeof k);
  if (k < 0) return make_error(errc::wire_corrupt, "credit for stream " + std::to_string(k));
  return k;
}

wire_buffer_ref make_takeover(const std::string& sender, const std::string& target, const takeover_info& t) {
  schemas::envelope_header h{kind_takeover, uint64_t(t.shard), sender, target};
  schemas::message_builder b(h, std::span<const schemas::tensor_meta>{}, sizeof t);
  std::memcpy(b.payload().data(), &t, sizeof t);
  return std::make_shared<const wire_buffer>(std::move(b).finish());
}

expected<takeover_info> read_takeover(const schemas::decoded_message& msg, const std::string& peer) {
  takeover_info t;
  if (msg.header().kind != kind_takeover || msg.payload().size() != sizeof t)
    return make_error(errc::wire_corrupt, "takeover from " + peer + ": bad kind or payload");
  std::memcpy(&t, msg.payload().data(), sizeof t);
  if (t.version != protocol_version || t.shard < 0 || t.epoch < 0 || t.step < 0 || t.shard_rows < 0)
    return make_error(errc::wire_corrupt, "takeover from " + peer + ": bad values");
  return t;
}

wire_buffer_ref make_release(const std::string& sender, const std::string& target) {
  schemas::envelope_header h{kind_release, 0, sender, target};
  schemas::message_builder b(h, std::span<const schemas::tensor_meta>{});
  return std::make_shared<const wire_buffer>(std::move(b).finish());
}

wire_buffer_ref make_assign(const std::string& sender, const std::string& target,
                            const std::vector<std::string>& consumers) {
  std::string text;
  for (const auto& c : consumers) text += c + "\n";
  schemas::envelope_header h{kind_assign, uint64_t(consumers.size()), sender, target};
  schemas::message_builder b(h, std::span<const schemas::tensor_meta>{}, text.size());
  std::memcpy(b.payload().data(), text.data(), text.size());
  return std::make_shared<const wire_buffer>(std::move(b).finish());
}

expected<std::vector<std::string>> read_assign(const schemas::decoded_message& msg, const std::string& peer) {
  auto p = msg.payload();
  const std::string text(reinterpret_cast<const char*>(p.data()), p.size());
  std::vector<std::string> names;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t nl = text.find('\n', at);
    if (nl == std::string::npos) break;
    names.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  bool bad = names.empty() || at != text.size() || names.size() != msg.header().seq;
  for (const auto& n : names) bad = bad || n.empty();
  if (bad)
    return make_error(errc::wire_corrupt, "stream assign message from " + peer + ": a malformed list of consumers");
  return names;
}

}  // namespace hetflow::actors::builtin::stream
