// lazy_library: a shared library hetflow does not link but dlopens at its
// first use, so that a process that never needs it neither loads it nor
// runs its constructors (kernels/cpu/dnnl_lazy.cpp: oneDNN;
// actors/dataplane/ucx_lazy.cpp: UCX; actors/cluster_auth.cpp: libcrypto).
// symbol() is thread-safe; a library or symbol that is missing gives
// nullptr (which the forwarders turn into their API's error) and is said on
// stderr, naming what needs it.
#pragma once

#include <dlfcn.h>

#include <cstdio>
#include <mutex>
#include <string>

namespace hetflow {

class lazy_library {
public:
  // `soname`: what dlopen loads ("libdnnl.so.2"); `needed_for`: the package
  // and its use, for the message ("oneDNN (Debian package libdnnl2), which
  // the CPU kernels need"). `say`: whether a failure is said on stderr
  // (false where the caller reports load_error() itself).
  constexpr lazy_library(const char* soname, const char* needed_for, bool say = true)
      : soname_(soname), needed_for_(needed_for), say_(say) {}
  lazy_library(const lazy_library&) = delete;
  lazy_library& operator=(const lazy_library&) = delete;

  // The symbol, loading the library first; nullptr when either is missing.
  void* symbol(const char* name) {
    load();
    if (handle_ == nullptr) return nullptr;
    void* f = ::dlsym(handle_, name);
    if (f == nullptr && say_)
      std::fprintf(stderr, "hetflow: %s has no %s (another version than hetflow was built for?)\n", soname_, name);
    return f;
  }
  // Why the library did not load ("" when it did), loading it first.
  const std::string& load_error() {
    load();
    return error_;
  }

private:
  void load() {
    std::call_once(once_, [this] {
      handle_ = ::dlopen(soname_, RTLD_NOW | RTLD_LOCAL);
      if (handle_ != nullptr) return;
      const char* why = ::dlerror();
      error_ = std::string("cannot load ") + soname_ + ", " + needed_for_ + ": " + (why ? why : "unknown error");
      if (say_) std::fprintf(stderr, "hetflow: %s\n", error_.c_str());
    });
  }

  const char* soname_;
  const char* needed_for_;
  bool say_;
  std::once_flag once_;
  void* handle_ = nullptr;
  std::string error_;
};

}  // namespace hetflow

// Defines extern "C" `ret name params` forwarding `args` to the library's
// symbol `name`, which `lib` (a hetflow::lazy_library) resolves once; `fail`
// is returned without it. Define it with the library's own declaration in
// scope: a parameter list that differs from the header's is a compile error
// ("conflicting declaration of C function").
#define HETFLOW_LAZY_FORWARD(lib, ret, name, params, args, fail)              \
  extern "C" ret name params {                                               \
    static const auto f = reinterpret_cast<ret(*) params>((lib).symbol(#name)); \
    if (f == nullptr) return fail;                                           \
    return f args;                                                           \
  }
// The same for a function returning void (nothing happens without it).
#define HETFLOW_LAZY_FORWARD_VOID(lib, name, params, args)                     \
  extern "C" void name params {                                              \
    static const auto f = reinterpret_cast<void(*) params>((lib).symbol(#name)); \
    if (f != nullptr) f args;                                                \
  }
