#include "kernels/weights_io.hpp"

#include "kernels/device_context.hpp"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string_view>
#include <vector>

#include "schemas/tensor_codec.hpp"

namespace hetflow::kernels {
namespace {

constexpr std::string_view payload_magic = "hetflow-weights 1\n";

struct named_ref {
  const std::string* name;
  tensor* value;
  uint64_t* version;  // parameters only
};

std::vector<named_ref> collect(model& m) {
  std::vector<named_ref> out;
  for (parameter* p : m.parameters()) out.push_back({&p->name, &p->value, &p->version});
  for (state_tensor* s : m.state()) out.push_back({&s->name, &s->value, nullptr});
  return out;
}

struct file_closer {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};

}  // namespace

expected<wire_buffer> encode_weights(model& m) {
  std::vector<named_ref> refs = collect(m);
  std::vector<schemas::tensor_meta> metas;
  std::string names(payload_magic);
  for (const named_ref& r : refs) {
    auto dims = r.value->shape().dims();
    metas.push_back({dtype::f32, std::vector<int64_t>(dims.begin(), dims.end())});
    names += *r.name;
    names += '\n';
  }
  schemas::envelope_header header;
  header.kind = weights_message_kind;
  header.sender = m.name();
  HF_RETURN_IF_ERROR(schemas::check_encodable(header, metas, names.size()));
  schemas::message_builder b(header, metas, names.size());
  // Through the model's context: a plain copy on cpu, a device-to-host copy
  // for a cuda model.
  for (std::size_t i = 0; i < refs.size(); ++i) {
    auto dst = b.tensor_data(i);
    HF_RETURN_IF_ERROR(m.context().copy(refs[i].value->view(),
                                        mutable_tensor_view(dtype::f32, dst.data(), refs[i].value->shape())));
  }
  std::memcpy(b.payload().data(), names.data(), names.size());
  return std::move(b).finish();
}

status decode_weights(model& m, const wire_buffer_ref& buffer, const std::string& source) {
  schemas::read_limits limits;
  limits.max_message_bytes = buffer ? buffer->size() : 0;
  limits.max_tensors = 1u << 20;
  limits.max_text_bytes = 1u << 26;
  HF_ASSIGN_OR_RETURN(schemas::decoded_message msg, schemas::decode_message(buffer, limits, source));
  if (msg.header().kind != weights_message_kind)
    return make_error(errc::parse_error, source + ": not a hetflow weights file (message kind " +
                                             std::to_string(msg.header().kind) + ")");
  if (msg.header().sender != m.name())
    return make_error(errc::invalid_argument, source + ": holds weights of model '" + msg.header().sender +
                                                  "', not '" + m.name() + "'");
  auto payload = msg.payload();
  std::string_view text(reinterpret_cast<const char*>(payload.data()), payload.size());
  if (!text.starts_with(payload_magic))
    return make_error(errc::parse_error, source + ": missing the weights name table");
  text.remove_prefix(payload_magic.size());
  std::vector<named_ref> refs = collect(m);
  if (msg.tensor_count() != refs.size())
    return make_error(errc::invalid_argument, source + ": has " + std::to_string(msg.tensor_count()) +
                                                  " tensors, model " + m.name() + " needs " +
                                                  std::to_string(refs.size()));
  // Check everything before changing anything: a bad file leaves the model as it was.
  std::vector<std::string_view> names;
  for (std::size_t i = 0; i < refs.size(); ++i) {
    auto nl = text.find('\n');
    if (nl == std::string_view::npos)
      return make_error(errc::parse_error, source + ": name table ends after " + std::to_string(i) + " names");
    std::string_view name = text.substr(0, nl);
    text.remove_prefix(nl + 1);
    if (name != *refs[i].name)
      return make_error(errc::invalid_argument, source + ": tensor " + std::to_string(i) + " is '" +
                                                    std::string(name) + "', model expects '" + *refs[i].name + "'");
    const schemas::tensor_view& tv = msg.tensor(i);
    shape got(tv.shape);
    if (tv.type != dtype::f32 || tv.shape.size() > std::size_t(shape::max_rank) ||
        !(got == refs[i].value->shape()))
      return make_error(errc::invalid_argument, source + ": tensor '" + std::string(name) + "' has shape " +
                                                    got.to_string() + " " + to_string(tv.type) + ", model expects " +
                                                    refs[i].value->shape().to_string() + " f32");
    names.push_back(name);
  }
  for (std::size_t i = 0; i < refs.size(); ++i) {
    const schemas::tensor_view& tv = msg.tensor(i);
    HF_RETURN_IF_ERROR(m.context().copy(tensor_view(dtype::f32, tv.data.data(), refs[i].value->shape()),
                                        refs[i].value->mutable_view()));
    if (refs[i].version) ++*refs[i].version;
  }
  return {};
}

status save_weights(model& m, const std::string& path) {
  HF_ASSIGN_OR_RETURN(wire_buffer buf, encode_weights(m));
  schemas::clear_wire_token(buf);  // files never carry the data-plane token
  const std::string tmp = path + ".tmp";
  {
    std::unique_ptr<std::FILE, file_closer> f(std::fopen(tmp.c_str(), "wb"));
    if (!f) return make_error(errc::io_error, tmp + ": cannot create: " + std::strerror(errno));
    if (std::fwrite(buf.data(), 1, buf.size(), f.get()) != buf.size() || std::fflush(f.get()) != 0)
      return make_error(errc::io_error, tmp + ": write failed: " + std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return make_error(errc::io_error, "renaming " + tmp + " to " + path + ": " + ec.message());
  return {};
}

status load_weights(model& m, const std::string& path) {
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  if (ec) return make_error(errc::not_found, path + ": " + ec.message());
  if (size > schemas::max_wire_message_bytes)
    return make_error(errc::parse_error, path + ": " + std::to_string(size) + " bytes, larger than any weights file");
  auto buf = std::make_shared<wire_buffer>(std::size_t(size));
  std::unique_ptr<std::FILE, file_closer> f(std::fopen(path.c_str(), "rb"));
  if (!f) return make_error(errc::io_error, path + ": cannot open: " + std::strerror(errno));
  if (std::fread(buf->data(), 1, buf->size(), f.get()) != buf->size())
    return make_error(errc::io_error, path + ": short read");
  return decode_weights(m, buf, path);
}

}  // namespace hetflow::kernels
