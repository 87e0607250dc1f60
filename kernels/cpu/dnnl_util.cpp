#include "kernels/cpu/dnnl_util.hpp"

namespace hetflow::kernels::cpu {

status execute(const cpu_context& ctx, const dnnl::primitive& p, std::initializer_list<exec_arg> args,
               const std::string& what) {
  dnnl_exec_arg_t c_args[16];
  int n = 0;
  for (const exec_arg& a : args) {
    if (n == 16) return make_error(errc::internal, what + ": too many oneDNN arguments");
    c_args[n++] = {a.key, a.mem.get()};
  }
  dnnl_status_t st = dnnl_primitive_execute(p.get(), ctx.stream().get(), n, c_args);
  if (st != dnnl_success) return dnnl_error("dnnl_primitive_execute(" + what + ")", st);
  return {};
}

status reorder_now(const cpu_context& ctx, const dnnl::reorder& r, const dnnl::memory& from,
                   const dnnl::memory& to, const std::string& what) {
  return execute(ctx, r, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}, what);
}

}  // namespace hetflow::kernels::cpu
