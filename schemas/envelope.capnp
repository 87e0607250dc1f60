# The one message type between hetflow processes: a single-segment Cap'n Proto
# message whose root is an Envelope. Private to schemas/: other layers use
# schemas/tensor_codec.hpp.
@0x99e976ac646828e7;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("hetflow::schemas::wire");

using import "tensor.capnp".Tensor;

struct Envelope {
  kind @0 :UInt32;           # application message type, read by the target actor
  seq @1 :UInt64;            # order within one stream
  sender @2 :Text;           # actor name
  target @3 :Text;           # actor name
  tensors @4 :List(Tensor);
  payload @5 :Data;          # free-form control bytes
  auth @6 :UInt64;           # the cluster's data-plane token (0: none); see
                             # tensor_codec.hpp, "Data-plane token"
}
