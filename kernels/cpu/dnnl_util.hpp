// Small helpers around oneDNN for the cpu units: memory descriptors in our
// canonical layouts, and primitive execution through the C API (a stack array
// of arguments: no std::unordered_map per call on the hot path) with errors
// turned into status by HF_DNNL_CHECK.
#pragma once

#include <dnnl.hpp>

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/cpu_context.hpp"
#include "kernels/cpu/dnnl_check.hpp"
#include "kernels/shape.hpp"

namespace hetflow::kernels::cpu {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

inline dnnl::memory::dims to_dims(const shape& s) {
  return dnnl::memory::dims(s.dims().begin(), s.dims().end());
}

// Plain row-major f32 descriptor for `s` (nc, nchw, oihw, x ... by rank).
inline dnnl::memory::desc plain_md(const shape& s) {
  static constexpr tag by_rank[] = {tag::undef, tag::a, tag::ab, tag::abc, tag::abcd, tag::abcde};
  return {to_dims(s), dt::f32, s.rank() <= 5 ? by_rank[s.rank()] : tag::undef};
}

inline dnnl::memory::desc any_md(const shape& s) { return {to_dims(s), dt::f32, tag::any}; }

// The blocked activation layouts of oneDNN's jit kernels, widest block first
// (nChw16c: AVX-512; nChw8c: AVX2), that `channels` fill without padding.
// oneDNN 2.6 accepts either on every CPU and runs the one the CPU has no jit
// kernel for through a reference or plain C++ loop (batch norm in nChw16c on
// AVX2: 85% of a width-0.25 ResNet-18's time), so a unit takes the first
// whose primitives are jit (is_jit).
inline std::vector<tag> blocked_tags(int64_t channels) {
  std::vector<tag> out;
  if (channels % 16 == 0) out.push_back(tag::aBcd16b);
  if (channels % 8 == 0) out.push_back(tag::aBcd8b);
  return out;
}

inline bool is_jit(const dnnl::primitive_desc_base& pd) {
  return std::string_view(pd.impl_info_str()).find("jit") != std::string_view::npos;
}

// A memory object with no data yet; attach() a buffer before each execution.
inline dnnl::memory unbound_memory(const dnnl::memory::desc& md, const cpu_context& ctx) {
  return dnnl::memory(md, ctx.engine(), DNNL_MEMORY_NONE);
}

// (Not named bind: std::byte* arguments would pull std::bind in by ADL.)
inline void attach(dnnl::memory& m, const void* p) { m.set_data_handle(const_cast<void*>(p)); }

struct exec_arg {
  int key;
  const dnnl::memory& mem;
};

// Executes `p` on the context's stream. `unit` and `what` name the call in
// errors ("conv1", "forward"); the message is only built on failure, so the
// hot path does not allocate.
status execute(const cpu_context& ctx, const dnnl::primitive& p, std::initializer_list<exec_arg> args,
               const std::string& unit, const char* what);

// Executes a reorder from `from` to `to` (both bound).
status reorder_now(const cpu_context& ctx, const dnnl::reorder& r, const dnnl::memory& from,
                   const dnnl::memory& to, const std::string& unit, const char* what);

// A tensor that we keep in our plain layout while a primitive wants it in
// another (blocked) one: then a oneDNN-owned copy in that layout and the two
// reorders. When the layouts agree it is just the plain memory, and the
// conversions are no-ops.
class staged_memory {
public:
  // Throws dnnl::error (call inside HF_DNNL_TRY).
  void init(const cpu_context& ctx, const dnnl::memory::desc& plain, const dnnl::memory::desc& wanted);
  bool staged() const noexcept { return staged_; }
  // Our plain buffer for the next conversions / executions.
  void attach(const void* p) { cpu::attach(plain_, p); }
  // What to pass to the primitive.
  const dnnl::memory& arg() const noexcept { return staged_ ? inner_ : plain_; }
  const dnnl::memory::desc& wanted() const noexcept { return wanted_; }
  status to_inner(const cpu_context& ctx, const std::string& unit, const char* what) const;
  status to_plain(const cpu_context& ctx, const std::string& unit, const char* what) const;
  uint64_t inner_bytes() const noexcept { return staged_ ? wanted_.get_size() : 0; }

private:
  bool staged_ = false;
  dnnl::memory::desc wanted_;
  dnnl::memory plain_, inner_;
  dnnl::reorder to_inner_, to_plain_;
};

}  // namespace hetflow::kernels::cpu
