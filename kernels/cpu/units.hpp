// Internal to the cpu backend: one constructor per unit kind (each defined in
// its own .cpp). Use make_unit (unit_factory.hpp) instead.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/dnnl_util.hpp"
#include "kernels/cpu/unit_factory.hpp"

namespace hetflow::kernels::cpu {

expected<built_unit> make_linear(cpu_context&, const layer_spec&, const shape& in, rng&, const std::string& prefix);
expected<built_unit> make_conv2d(cpu_context&, const layer_spec&, const shape& in, rng&, const std::string& prefix);
expected<built_unit> make_pool(cpu_context&, const layer_spec&, const shape& in, rng&, const std::string& prefix);
expected<built_unit> make_batch_norm(cpu_context&, const layer_spec&, const shape& in, rng&, const std::string& prefix);
expected<built_unit> make_relu(cpu_context&, const layer_spec&, const shape& in, rng&, const std::string& prefix);
expected<built_unit> make_dropout(cpu_context&, const layer_spec&, const shape& in, rng&, const std::string& prefix);
expected<built_unit> make_flatten(cpu_context&, const layer_spec&, const shape& in, rng&, const std::string& prefix);
expected<built_unit> make_residual(cpu_context&, const layer_spec&, const shape& in, rng&, const std::string& prefix);
expected<built_unit> make_dlrm_features(cpu_context&, const layer_spec&, const shape& in, rng&, const std::string& prefix);

// Adjacent units inside a composite (a residual body: conv -> batch norm ->
// conv ...) hand activations and gradients to each other in their
// primitives' layout, without the reorder to plain NCHW and back at the
// boundary (ResNet-50 at width 0.25 on the 2-core AVX2 VM spent 47% of its
// time in those reorders). The composite links a pair when the producer's
// output layout is the consumer's input layout and the consumer's input
// gradient layout is the producer's output gradient layout (link_units).
// A linked producer leaves its plain output unwritten and takes its output
// gradient from the consumer's staged input gradient; the consumer reads its
// input from the producer's staged output (also in backward: the lockstep
// contract keeps it until the producer's next forward) and leaves its plain
// input gradient unwritten. The numbers are the same bit for bit: a reorder
// is a copy.
struct inner_link {
  const staged_memory* input = nullptr;        // forward input: the producer's staged output
  bool output_inner = false;                   // forward output: left in the layout only
  const staged_memory* output_grad = nullptr;  // backward: the consumer's staged input gradient
  bool input_grad_inner = false;               // backward input gradient: left in the layout only
};

class linkable {
public:
  virtual ~linkable() = default;
  // Staged tensors (their wanted() layouts are compared) and whether the
  // unit can take each side of a link at all.
  virtual const staged_memory* link_output() const = 0;       // forward output, nullptr: cannot
  virtual const staged_memory* link_output_grad() const = 0;  // backward output gradient as the primitives take it
  virtual const staged_memory* link_input() const = 0;        // forward input, nullptr: cannot
  virtual const staged_memory* link_input_grad() const = 0;   // backward input gradient
  virtual void set_link(const inner_link& l) = 0;
};

// Sets the links of every linkable unit of `chain`: each adjacent pair that
// can be is linked, every other side cleared (call after preparing the
// chain's units for the shapes that will run). Returns the pairs linked.
int link_units(const std::vector<std::unique_ptr<unit>>& chain);

}  // namespace hetflow::kernels::cpu
