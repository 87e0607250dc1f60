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
                             const ps_info& info, std::span<const kernels::tensor* const> tensors,
                             std::span<const int64_t> rows) {
  schemas::envelope_header h{kind, uint64_t(info.clock), sender, target};
  std::vector<schemas::tensor_meta> metas;
  for (auto* t : tensors) {
    schemas::tensor_meta m;
    for (int i = 0; i < t->shape().rank(); ++i) m.shape.push_back(t->shape()[i]);
    metas.push_back(std::move(m));
  }
  const bool with_rows = (info.flags & flag_rows) != 0;
  if (with_rows) metas.push_back(schemas::tensor_meta{dtype::i64, {int64_t(rows.size())}});
  schemas::message_builder b(h, std::span<const schemas::tensor_meta>(metas), sizeof(ps_info));
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    auto d = b.tensor_data(i);
    if (!d.empty()) std::memcpy(d.data(), tensors[i]->f32(), d.size());
  }
  if (with_rows && !rows.empty()) std::memcpy(b.tensor_data(tensors.size()).data(), rows.data(), rows.size_bytes());
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
  m.tensors = msg.tensor_count();
  const bool listed = m.kind == kind_checkpoints || m.kind == kind_restored ||
                      ((m.kind == kind_pull || m.kind == kind_push) && (m.info.flags & flag_rows));
  if (listed) {
    const bool only = m.kind != kind_push;  // a push has its gradients before the list
    if (msg.tensor_count() == 0 || (only && msg.tensor_count() != 1))
      return make_error(errc::wire_corrupt, "ps message from " + peer + ": want an i64 list");
    const auto& t = msg.tensor(msg.tensor_count() - 1);
    if (t.type != dtype::i64 || t.shape.size() != 1)
      return make_error(errc::wire_corrupt, "ps message from " + peer + ": its list is not a 1-d i64 tensor");
    m.list.resize(std::size_t(t.shape[0]));
    if (!m.list.empty()) std::memcpy(m.list.data(), t.data.data(), m.list.size() * sizeof(int64_t));
    m.tensors = msg.tensor_count() - 1;
  }
  m.msg = std::move(msg);
  return m;
}

std::vector<int64_t> encode_rows(std::span<const row_request> pieces) {
  std::vector<int64_t> out;
  for (const auto& p : pieces) {
    if (p.all) {
      out.push_back(-1);
      continue;
    }
    out.push_back(int64_t(p.rows.size()));
    out.insert(out.end(), p.rows.begin(), p.rows.end());
  }
  return out;
}

expected<std::vector<row_request>> decode_rows(std::span<const int64_t> list, std::span<const int64_t> piece_rows,
                                               bool allow_all, const std::string& peer) {
  std::vector<row_request> out(piece_rows.size());
  std::size_t at = 0;
  auto bad = [&](const std::string& why) {
    return make_error(errc::wire_corrupt, "ps row list from " + peer + ": " + why);
  };
  for (std::size_t j = 0; j < piece_rows.size(); ++j) {
    if (at >= list.size()) return bad("ends before piece " + std::to_string(j) + " of " + std::to_string(piece_rows.size()));
    const int64_t n = list[at++];
    if (n == -1 && allow_all) {
      out[j].all = true;
      continue;
    }
    if (n < 0 || n > piece_rows[j] || int64_t(list.size() - at) < n)
      return bad("piece " + std::to_string(j) + " has a count of " + std::to_string(n));
    out[j].rows.assign(list.begin() + std::ptrdiff_t(at), list.begin() + std::ptrdiff_t(at + std::size_t(n)));
    at += std::size_t(n);
    for (std::size_t i = 0; i < out[j].rows.size(); ++i) {
      const int64_t r = out[j].rows[i];
      if (r < 0 || r >= piece_rows[j] || (i > 0 && r <= out[j].rows[i - 1]))
        return bad("row " + std::to_string(r) + " of piece " + std::to_string(j) + " is outside [0, " +
                   std::to_string(piece_rows[j]) + ") or not after the previous one");
    }
  }
  if (at != list.size()) return bad(std::to_string(list.size() - at) + " values after the last piece");
  return out;
}

expected<kernels::tensor> tensor_of(const ps_message& m, std::size_t i) {
  if (i >= m.tensors)
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
