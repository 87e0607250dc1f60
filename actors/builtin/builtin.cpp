#include "actors/builtin/preprocess.hpp"
#include "actors/builtin/skeleton.hpp"
#include "actors/registry.hpp"

namespace hetflow::actors {

void add_builtin_types(registry& reg) {
  builtin::add_skeleton(reg);
  builtin::add_transport_bench(reg);
  builtin::add_train(reg);
  builtin::add_preprocess(reg);
}

}  // namespace hetflow::actors
