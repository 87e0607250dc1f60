// One error enum for the whole project and its plain-C++ carriers.
//
// `status` is "ok or (code, message)"; `expected<T>` is "T or status". Both are
// cheap to move and [[nodiscard]]. Actors convert to caf::error in exactly one
// place (actors/caf_error.hpp); nothing below actors/ knows about CAF.
//
// Messages are for people: name the file/line/field, or the node and actor,
// and say what to do.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace hetflow {

enum class errc : uint8_t {
  ok = 0,
  invalid_argument,   // a caller passed something unusable
  parse_error,        // a file or text could not be parsed
  not_found,          // a named thing (file, node, actor, key) does not exist
  already_exists,     // a name registered twice
  io_error,           // read/write/open failed
  wire_corrupt,       // a network message failed to decode
  wire_too_large,     // a network message exceeds the receiver's bound
  timeout,            // a finite wait ran out
  peer_down,          // a peer node died or became unreachable
  peer_refused,       // a peer rejected us (wrong topology, wrong secret)
  transport_error,    // the data plane failed
  unsupported,        // feature not built or not available on this machine
  out_of_memory,
  device_error,       // CUDA / cuDNN / oneDNN returned an error
  cancelled,          // stopped on request (SIGINT, job stop)
  internal,           // a bug: an invariant that should hold did not
};

const char* to_string(errc code) noexcept;

class [[nodiscard]] status {
public:
  status() noexcept = default;
  status(errc code, std::string message) : code_(code), message_(std::move(message)) {}

  static status ok_status() noexcept { return {}; }

  bool ok() const noexcept { return code_ == errc::ok; }
  explicit operator bool() const noexcept { return ok(); }
  errc code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }

  // "wire_corrupt: message from n1 truncated at byte 12"
  std::string to_string() const;

  // Prefix the message with context: s.with_context("reading topology.toml").
  status with_context(std::string_view context) const;

private:
  errc code_ = errc::ok;
  std::string message_;
};

inline status make_error(errc code, std::string message) {
  return status{code, std::move(message)};
}

template <class T>
class [[nodiscard]] expected {
public:
  expected(T value) : v_(std::in_place_index<0>, std::move(value)) {}
  expected(status err) : v_(std::in_place_index<1>, std::move(err)) {
    if (std::get<1>(v_).ok())
      v_.template emplace<1>(errc::internal, "expected<T> constructed from an ok status");
  }

  bool has_value() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  // The error; ok_status() when a value is held.
  status error() const { return has_value() ? status{} : std::get<1>(v_); }

private:
  std::variant<T, status> v_;
};

}  // namespace hetflow

#define HF_CONCAT_INNER_(a, b) a##b
#define HF_CONCAT_(a, b) HF_CONCAT_INNER_(a, b)

// Return the status from the enclosing function if `expr` is not ok.
#define HF_RETURN_IF_ERROR(expr)                       \
  do {                                                 \
    ::hetflow::status hf_status_ = (expr);             \
    if (!hf_status_.ok()) return hf_status_;           \
  } while (0)

// `HF_ASSIGN_OR_RETURN(auto x, make_x());` declares x from an expected<T> or
// returns its error.
#define HF_ASSIGN_OR_RETURN(lhs, expr) \
  HF_ASSIGN_OR_RETURN_IMPL_(HF_CONCAT_(hf_expected_, __LINE__), lhs, expr)
#define HF_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.has_value()) return tmp.error();       \
  lhs = std::move(tmp).value()
