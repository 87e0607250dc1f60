// Weights files: a model's parameters and state (batch norm running stats)
// as ONE schemas wire message (schemas/tensor_codec.hpp) written to disk:
//
//   header.kind   = weights_message_kind ("HFWT")
//   header.sender = the model's name
//   tensors       = parameters then state tensors, in model order, f32,
//                   canonical layouts (see unit.hpp)
//   payload       = "hetflow-weights 1\n" then one tensor name per line
//
// Loading checks the model name, every tensor's name and shape, and reports
// the first mismatch by file and tensor. Saving writes a temporary file and
// renames it, so an existing file is never left half-written.
#pragma once

#include <string>

#include "kernels/model.hpp"
#include "schemas/error.hpp"
#include "schemas/wire_buffer.hpp"

namespace hetflow::kernels {

inline constexpr uint32_t weights_message_kind = 0x48465754;  // "HFWT"

expected<wire_buffer> encode_weights(model& m);
// `source` names the buffer's origin in errors (a path, a peer).
status decode_weights(model& m, const wire_buffer_ref& buffer, const std::string& source);

status save_weights(model& m, const std::string& path);
status load_weights(model& m, const std::string& path);

}  // namespace hetflow::kernels
