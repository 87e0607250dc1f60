#include "schemas/dtype.hpp"

namespace hetflow {

const char* to_string(dtype t) noexcept {
  switch (t) {
    case dtype::f32: return "f32";
    case dtype::f16: return "f16";
    case dtype::bf16: return "bf16";
    case dtype::i32: return "i32";
    case dtype::i64: return "i64";
    case dtype::u8: return "u8";
  }
  return "unknown";
}

std::optional<dtype> parse_dtype(std::string_view s) noexcept {
  // Exact, lower-case names only: these come from topology files and wire
  // debugging output, where one spelling keeps grep and diffs honest.
  if (s == "f32") return dtype::f32;
  if (s == "f16") return dtype::f16;
  if (s == "bf16") return dtype::bf16;
  if (s == "i32") return dtype::i32;
  if (s == "i64") return dtype::i64;
  if (s == "u8") return dtype::u8;
  return std::nullopt;
}

}  // namespace hetflow
