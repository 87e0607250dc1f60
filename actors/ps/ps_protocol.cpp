#include "actors/ps/ps_protocol.hpp"

#include <cstring>

namespace hetflow::ps {

wire_buffer_ref make_control(uint32_t kind, const std::string& sender, const std::string& target, const ps_info& info,
                             std::span<const int64_t> list, const std::string& text) {
  schemas::envelope_header h{kind, uint64_t(info.clock), sender, target};
  std::vector<schemas::tensor_meta> metas;
  if (!list.empty() || kind == kind_checkpoints || kind == kind_restored)
    metas.push_back(schemas::tensor_meta{dtype::i64, {int64_t(list.size())}});
  schemas::message_builder b(h, std::span<const schemas::tensor_meta>(metas), sizeof(ps_info) + text.size());
  if (!metas.empty() && !list.empty()) std::memcpy(b.tensor_data(0).data(), list.data(), list.size_bytes());
  auto p = b.payload();
  std::memcpy(p.data(), &info, sizeof info);
  if (!text.empty()) std::memcpy(p.data() + sizeof info, text.data(), text.size());
  return std::make_shared<const wire_buffer>(std::move(b).finish());
}

wire_buffer_ref make_tensors(uint32_t kind, const std::string& sender, const std::string& target,
                             const ps_info& info, std::span<const kernels::tensor* const> tensors) {
  schemas::envelope_header h{kind, uint64_t(info.clock), sender, target};
  std::vector<schemas::tensor_meta> metas;
  for (auto* t : tensors) {
    schemas::tensor_meta m;
    for (int i = 0; i < t->shape().rank(); ++i) m.shape.push_back(t->shape()[i]);
    metas.push_back(std::move(m));
  }
  schemas::message_builder b(h, std::span<const schemas::tensor_meta>(metas), sizeof(ps_info));
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    auto d = b.tensor_data(i);
    std::memcpy(d.data(), tensors[i]->f32(), d.size());
  }
  std::memcpy(b.payload().data(), &info, sizeof info);
  return std::make_shared<const wire_buffer>(std::move(b).finish());
}

expected<ps_message> read_ps_message(const wire_buffer_ref& buf, const schemas::read_limits& limits,
                                     const std::string& peer) {
  HF_ASSIGN_OR_RETURN(schemas::decoded_message msg, schemas::decode_message(buf, limits, peer));
  ps_message m;
  m.kind = msg.header().kind;
  m.sender = msg.header().sender;
  auto p = msg.payload();
  if (p.size() < sizeof(ps_info))
    return make_error(errc::wire_corrupt, "ps message from " + peer + ": payload of " + std::to_string(p.size()) +
                                              " bytes, want at least " + std::to_string(sizeof(ps_info)));
  std::memcpy(&m.info, p.data(), sizeof(ps_info));
  if (m.info.version != protocol_version)
    return make_error(errc::wire_corrupt, "ps message from " + peer + ": protocol version " +
                                              std::to_string(m.info.version) + ", this node speaks " +
                                              std::to_string(protocol_version));
  m.text.assign(reinterpret_cast<const char*>(p.data()) + sizeof(ps_info), p.size() - sizeof(ps_info));
  if (m.kind == kind_checkpoints || m.kind == kind_restored) {
    if (msg.tensor_count() != 1 || msg.tensor(0).type != dtype::i64 || msg.tensor(0).shape.size() != 1)
      return make_error(errc::wire_corrupt, "ps message from " + peer + ": want one i64 list");
    const auto& t = msg.tensor(0);
    m.list.resize(std::size_t(t.shape[0]));
    if (!m.list.empty()) std::memcpy(m.list.data(), t.data.data(), m.list.size() * sizeof(int64_t));
  }
  m.msg = std::move(msg);
  return m;
}

expected<kernels::tensor> tensor_of(const ps_message& m, std::size_t i) {
  if (i >= m.msg.tensor_count())
    return make_error(errc::wire_corrupt, "ps message from " + m.sender + ": tensor " + std::to_string(i) + " missing");
  const auto& tv = m.msg.tensor(i);
  if (tv.type != dtype::f32 || tv.shape.size() > std::size_t(kernels::shape::max_rank))
    return make_error(errc::wire_corrupt, "ps message from " + m.sender + ": tensor " + std::to_string(i) +
                                              " is not an f32 tensor");
  kernels::tensor t = kernels::tensor::empty(kernels::shape(tv.shape));
  if (!tv.data.empty()) std::memcpy(t.f32(), tv.data.data(), tv.data.size());
  return t;
}

}  // namespace hetflow::ps
