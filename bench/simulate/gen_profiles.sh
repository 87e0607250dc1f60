#!/usr/bin/env bash
# Builds bench/simulate/gen_paper_profiles against an existing build's static
# libraries (it needs only the model zoo's specs) and writes the HetPipe-paper
# profiles deploy/examples/hetpipe-paper/{vgg19,resnet152}-b32.json.
#
#   bench/simulate/gen_profiles.sh              # libraries from build/
#   BUILD_DIR=build-x bench/simulate/gen_profiles.sh
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
b="${BUILD_DIR:-$src/build}"
out="$b/bench-bin"
mkdir -p "$out"
g++ -std=c++20 -O1 -I"$src" -I"$b" "$src/bench/simulate/gen_paper_profiles.cpp" \
  -Wl,--start-group "$b/kernels/libhetflow_kernels.a" "$b/schemas/libhetflow_schemas.a" \
  "$b/kernels/cuda/libhetflow_cuda_loader.a" -Wl,--end-group -ltbb -ldnnl -lz -fopenmp -lcapnp -lkj -ldl \
  -o "$out/gen_paper_profiles"
for m in vgg19 resnet152; do
  "$out/gen_paper_profiles" "$m" 32 > "$src/deploy/examples/hetpipe-paper/$m-b32.json"
  echo "wrote deploy/examples/hetpipe-paper/$m-b32.json"
done
