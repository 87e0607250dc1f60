#include "kernels/cpu/dnnl_util.hpp"

namespace hetflow::kernels::cpu {

status execute(const cpu_context& ctx, const dnnl::primitive& p, std::initializer_list<exec_arg> args,
               const std::string& unit, const char* what) {
  dnnl_exec_arg_t c_args[16];
  int n = 0;
  for (const exec_arg& a : args) {
    if (n == 16) return make_error(errc::internal, unit + " " + what + ": too many oneDNN arguments");
    c_args[n++] = {a.key, a.mem.get()};
  }
  dnnl_status_t st = dnnl_primitive_execute(p.get(), ctx.stream().get(), n, c_args);
  if (st != dnnl_success) return dnnl_error("dnnl_primitive_execute(" + unit + " " + what + ")", st);
  return {};
}

status reorder_now(const cpu_context& ctx, const dnnl::reorder& r, const dnnl::memory& from,
                   const dnnl::memory& to, const std::string& unit, const char* what) {
  return execute(ctx, r, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}, unit, what);
}

void staged_memory::init(const cpu_context& ctx, const dnnl::memory::desc& plain,
                         const dnnl::memory::desc& wanted) {
  wanted_ = wanted;
  staged_ = wanted != plain;
  plain_ = unbound_memory(plain, ctx);
  if (staged_) {
    inner_ = dnnl::memory(wanted, ctx.engine());
    to_inner_ = dnnl::reorder(plain_, inner_);
    to_plain_ = dnnl::reorder(inner_, plain_);
  } else {
    inner_ = dnnl::memory();
    to_inner_ = dnnl::reorder();
    to_plain_ = dnnl::reorder();
  }
}

status staged_memory::to_inner(const cpu_context& ctx, const std::string& unit, const char* what) const {
  if (!staged_) return {};
  return reorder_now(ctx, to_inner_, plain_, inner_, unit, what);
}

status staged_memory::to_plain(const cpu_context& ctx, const std::string& unit, const char* what) const {
  if (!staged_) return {};
  return reorder_now(ctx, to_plain_, inner_, plain_, unit, what);
}

}  // namespace hetflow::kernels::cpu
