#include "actors/ralp/ralp_protocol.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string_view>
#include <cstring>
#include <vector>

#include "kernels/cpu/parallel.hpp"

namespace hetflow::ralp {

namespace {

// The tensors into the message. A stage's weights or update are tens of
// MB, and one thread copies ~6 GB/s (a 37 MB HetPipe pull answer took 6 ms
// on the H200 machines), so large messages are copied in 1 MiB pieces by the
// service threads (kernels::cpu::service_arena). Small ones (activations,
// every minibatch) are copied in place, with no bookkeeping.
void copy_tensors(schemas::message_builder& b, std::span<const kernels::tensor_view> tensors) {
  constexpr std::size_t piece = std::size_t{1} << 20, parallel_from = std::size_t{4} << 20;
  std::size_t total = 0;
  for (const auto& t : tensors) total += t.byte_size();
  if (total < parallel_from) {
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      auto d = b.tensor_data(i);
      if (!d.empty()) std::memcpy(d.data(), tensors[i].f32(), d.size());
    }
    return;
  }
  struct part {
    std::byte* dst;
    const std::byte* src;
    std::size_t bytes;
  };
  std::vector<part> parts;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    auto d = b.tensor_data(i);
    const auto* src = reinterpret_cast<const std::byte*>(tensors[i].f32());
    for (std::size_t at = 0; at < d.size(); at += piece)
      parts.push_back({d.data() + at, src + at, std::min(piece, d.size() - at)});
  }
  kernels::cpu::service_arena().execute([&] {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, parts.size()),
                      [&](const tbb::blocked_range<std::size_t>& r) {
                        for (std::size_t k = r.begin(); k < r.end(); ++k)
                          std::memcpy(parts[k].dst, parts[k].src, parts[k].bytes);
                      });
  });
}

}  // namespace

wire_buffer_ref make_message(uint32_t kind, const std::string& sender, const std::string& target,
                             const ralp_info& info, std::span<const kernels::tensor_view> tensors,
                             std::span<const int32_t> labels, const std::string& text,
                             const schemas::message_builder::allocator* allocate) {
  schemas::envelope_header h{kind, uint64_t(info.clock), sender, target};
  std::vector<schemas::tensor_meta> metas;
  for (const auto& t : tensors) {
    schemas::tensor_meta m;
    for (int i = 0; i < t.shape().rank(); ++i) m.shape.push_back(t.shape()[i]);
    metas.push_back(std::move(m));
  }
  if (!labels.empty()) metas.push_back(schemas::tensor_meta{dtype::i32, {int64_t(labels.size())}});
  const std::span<const schemas::tensor_meta> ms(metas);
  schemas::message_builder b = allocate ? schemas::message_builder(h, ms, sizeof(ralp_info) + text.size(), *allocate)
                                        : schemas::message_builder(h, ms, sizeof(ralp_info) + text.size());
  copy_tensors(b, tensors);
  if (!labels.empty()) std::memcpy(b.tensor_data(tensors.size()).data(), labels.data(), labels.size_bytes());
  auto p = b.payload();
  std::memcpy(p.data(), &info, sizeof info);
  if (!text.empty()) std::memcpy(p.data() + sizeof info, text.data(), text.size());
  return std::make_shared<const wire_buffer>(std::move(b).finish());
}

expected<ralp_message> read_message(const wire_buffer_ref& buf, const schemas::read_limits& limits,
                                    const std::string& peer) {
  HF_ASSIGN_OR_RETURN(schemas::decoded_message msg, schemas::decode_message(buf, limits, peer));
  ralp_message m;
  m.kind = msg.header().kind;
  m.sender = msg.header().sender;
  auto p = msg.payload();
  if (p.size() < sizeof(ralp_info))
    return make_error(errc::wire_corrupt, "ralp message from " + peer + ": payload of " + std::to_string(p.size()) +
                                              " bytes, want at least " + std::to_string(sizeof(ralp_info)));
  std::memcpy(&m.info, p.data(), sizeof(ralp_info));
  if (m.info.version != protocol_version)
    return make_error(errc::wire_corrupt, "ralp message from " + peer + ": protocol version " +
                                              std::to_string(m.info.version) + ", this node speaks " +
                                              std::to_string(protocol_version));
  m.text.assign(reinterpret_cast<const char*>(p.data()) + sizeof(ralp_info), p.size() - sizeof(ralp_info));
  m.msg = std::move(msg);
  return m;
}

expected<kernels::tensor> f32_tensor(const ralp_message& m, std::size_t i) {
  if (i >= m.tensors())
    return make_error(errc::wire_corrupt, "ralp message from " + m.sender + ": tensor " + std::to_string(i) + " missing");
  const auto& tv = m.msg.tensor(i);
  if (tv.type != dtype::f32 || tv.shape.size() > std::size_t(kernels::shape::max_rank))
    return make_error(errc::wire_corrupt, "ralp message from " + m.sender + ": tensor " + std::to_string(i) +
                                              " is not an f32 tensor");
  kernels::tensor t = kernels::tensor::empty(kernels::shape(tv.shape));
  if (!tv.data.empty()) std::memcpy(t.f32(), tv.data.data(), tv.data.size());
  return t;
}

expected<std::vector<int32_t>> i32_values(const ralp_message& m, std::size_t i) {
  if (i >= m.tensors())
    return make_error(errc::wire_corrupt, "ralp message from " + m.sender + ": tensor " + std::to_string(i) + " missing");
  const auto& tv = m.msg.tensor(i);
  if (tv.type != dtype::i32 || tv.shape.size() != 1)
    return make_error(errc::wire_corrupt, "ralp message from " + m.sender + ": tensor " + std::to_string(i) +
                                              " is not a 1-d i32 tensor");
  std::vector<int32_t> v(std::size_t(tv.shape[0]));
  if (!v.empty()) std::memcpy(v.data(), tv.data.data(), v.size() * sizeof(int32_t));
  return v;
}

std::string encode_unit_times(const std::vector<unit_time>& units) {
  std::string out;
  char buf[64];
  for (const auto& u : units) {
    std::snprintf(buf, sizeof buf, " %.6g %.6g\n", u.fwd_ms, u.bwd_ms);
    out += u.name;
    out += buf;
  }
  return out;
}

expected<std::vector<unit_time>> decode_unit_times(std::string_view text, const std::string& peer) {
  std::vector<unit_time> units;
  std::size_t line_no = 0;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    const std::string line(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++line_no;
    if (line.empty()) continue;
    std::istringstream in(line);
    unit_time u;
    std::string rest;
    if (!(in >> u.name >> u.fwd_ms >> u.bwd_ms) || (in >> rest) || !std::isfinite(u.fwd_ms) ||
        !std::isfinite(u.bwd_ms) || u.fwd_ms < 0 || u.bwd_ms < 0)
      return make_error(errc::wire_corrupt, "ralp hello from " + peer + ": unit time line " + std::to_string(line_no) +
                                                " is not 'NAME FWD_MS BWD_MS': '" + line.substr(0, 80) + "'");
    units.push_back(std::move(u));
  }
  return units;
}

}  // namespace hetflow::ralp
