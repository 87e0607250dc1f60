// oneDNN error checking: every oneDNN failure becomes an errc::device_error
// status that names the failing call and oneDNN's status, like NCCL's
// CUDACHECK. Two forms:
//
//   HF_DNNL_CHECK(dnnl_primitive_execute(...));   // C API: checks the status
//   HF_DNNL_TRY(fwd_pd_ = make_pd(...));           // C++ API: catches dnnl::error
//
// Both `return` a status from the enclosing function (which must return
// status or expected<T>).
#pragma once

#include <dnnl.hpp>

#include <string_view>

#include "schemas/error.hpp"

namespace hetflow::kernels::cpu {

// "oneDNN call `dnnl_primitive_execute(...)` failed: out_of_memory"
status dnnl_error(std::string_view call, dnnl_status_t code, std::string_view detail = {});

}  // namespace hetflow::kernels::cpu

#define HF_DNNL_CHECK(...)                                                          \
  do {                                                                              \
    dnnl_status_t hf_dnnl_status_ = (__VA_ARGS__);                                  \
    if (hf_dnnl_status_ != dnnl_success)                                            \
      return ::hetflow::kernels::cpu::dnnl_error(#__VA_ARGS__, hf_dnnl_status_);    \
  } while (0)

#define HF_DNNL_TRY(...)                                                            \
  do {                                                                              \
    try {                                                                           \
      __VA_ARGS__;                                                                  \
    } catch (const dnnl::error& hf_dnnl_error_) {                                   \
      return ::hetflow::kernels::cpu::dnnl_error(#__VA_ARGS__, hf_dnnl_error_.status, \
                                                 hf_dnnl_error_.what());            \
    }                                                                               \
  } while (0)
