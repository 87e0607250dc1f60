#include "schemas/error.hpp"

namespace hetflow {

const char* to_string(errc code) noexcept {
  switch (code) {
    case errc::ok: return "ok";
    case errc::invalid_argument: return "invalid_argument";
    case errc::parse_error: return "parse_error";
    case errc::not_found: return "not_found";
    case errc::already_exists: return "already_exists";
    case errc::io_error: return "io_error";
    case errc::wire_corrupt: return "wire_corrupt";
    case errc::wire_too_large: return "wire_too_large";
    case errc::timeout: return "timeout";
    case errc::peer_down: return "peer_down";
    case errc::peer_refused: return "peer_refused";
    case errc::transport_error: return "transport_error";
    case errc::unsupported: return "unsupported";
    case errc::out_of_memory: return "out_of_memory";
    case errc::device_error: return "device_error";
    case errc::cancelled: return "cancelled";
    case errc::internal: return "internal";
  }
  return "unknown";
}

std::string status::to_string() const {
  if (ok()) return "ok";
  return std::string(hetflow::to_string(code_)) + ": " + message_;
}

status status::with_context(std::string_view context) const {
  if (ok()) return *this;
  return status{code_, std::string(context) + ": " + message_};
}

}  // namespace hetflow
