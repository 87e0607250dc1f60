# One tensor on the wire. Element bytes are in the sender's native byte order
# (every supported host is little-endian); shape is row-major, outermost first.
# Private to schemas/: other layers use schemas/tensor_codec.hpp.
@0xb0e6660dcbfa2652;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("hetflow::schemas::wire");

# Numbering matches hetflow::dtype (schemas/dtype.hpp); append only.
enum DType {
  f32 @0;
  f16 @1;
  bf16 @2;
  i32 @3;
  i64 @4;
  u8 @5;
}

struct Tensor {
  dtype @0 :DType;
  shape @1 :List(Int64);  # empty = 0-d scalar
  data @2 :Data;          # exactly numel * size(dtype) bytes
}
