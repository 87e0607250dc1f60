#include "kernels/cpu/cpu_context.hpp"

#include <sched.h>

#include <dnnl_debug.h>
#include <omp.h>

#include <string>
#include <thread>

#include "kernels/cpu/dnnl_check.hpp"

namespace hetflow::kernels::cpu {

status dnnl_error(std::string_view call, dnnl_status_t code, std::string_view detail) {
  std::string msg = "oneDNN call `";
  msg.append(call);
  msg += "` failed: ";
  msg += dnnl_status2str(code);
  if (!detail.empty()) {
    msg += " (";
    msg.append(detail);
    msg += ")";
  }
  errc ec = code == dnnl_out_of_memory ? errc::out_of_memory
            : code == dnnl_unimplemented ? errc::unsupported
                                         : errc::device_error;
  return make_error(ec, std::move(msg));
}

namespace {
// threads <= 0: every CPU this process may run on (its affinity mask, which
// a node's `cpus` narrows), not every CPU of the machine.
int resolve_threads(int t) {
  if (t > 0) return t;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : int(hw);
}
}  // namespace

cpu_context::cpu_context(int threads)
    : threads_(resolve_threads(threads)),
      engine_(dnnl::engine::kind::cpu, 0),
      stream_(engine_),
      arena_(threads_) {}

void cpu_context::bind_current_thread() const { omp_set_num_threads(threads_); }

std::string cpu_context::isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx512_mic: return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    default: return "other";
  }
}

}  // namespace hetflow::kernels::cpu
