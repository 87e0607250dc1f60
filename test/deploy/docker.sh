#!/usr/bin/env bash
# deploy/docker/Dockerfile, without a daemon or network: dockerfile_check.py
# parses it (instructions, stages, COPY sources present and not ignored,
# debian:12 + deploy/setup.sh + the hetflow target, ENTRYPOINT ["hetflow"]);
# broken copies must fail; and the build stage's runtime-package pipeline
# (ldd + dpkg -S), run on the binary built here, must find a Debian package
# for every shared library the binary loads, the dlopened ones included.
source "$HETFLOW_SRC/test/integration/lib.sh"
df=$HETFLOW_SRC/deploy/docker/Dockerfile
check=$HETFLOW_SRC/test/deploy/dockerfile_check.py
python3 "$check" "$df" "$HETFLOW_SRC" || fail "Dockerfile check"
pass "Dockerfile parses and its COPY sources exist"

broken() {  # broken NAME SED_EXPR [IGNORE_SED_EXPR]: a changed copy must fail
  mkdir -p "$1"
  sed "$2" "$df" >"$1/Dockerfile"
  sed "${3:-}" "$df.dockerignore" >"$1/Dockerfile.dockerignore"
  if python3 "$check" "$1/Dockerfile" "$HETFLOW_SRC" >"$1.out" 2>&1; then
    fail "broken Dockerfile '$1' passed"
  fi
  echo "caught '$1': $(head -1 "$1.out")"
}
broken shell-entrypoint 's/^ENTRYPOINT .*/ENTRYPOINT hetflow/'
broken missing-source 's#^COPY deploy/examples #COPY deploy/no-such-dir #'
broken ignored-source 's/^x//' '$a deploy'
broken unknown-instruction 's/^WORKDIR /WORKDRI /'
broken bad-stage 's/--from=build /--from=builder /'
broken no-setup 's#bash deploy/setup.sh#true#'
broken lost-continuation 's#-DCMAKE_BUILD_TYPE="$BUILD_TYPE" \\$#-DCMAKE_BUILD_TYPE="$BUILD_TYPE"#'
pass "broken Dockerfiles caught"

if ! command -v dpkg >/dev/null || ! command -v ldd >/dev/null; then
  echo "SKIP: no dpkg/ldd here; the runtime-package pipeline was not run"
  exit 77
fi
run=$(python3 "$check" --print-run 2 "$df")
pipeline=${run#*&& lazy=}
pipeline="lazy=${pipeline%% >/out/runtime-packages*}"
pipeline=${pipeline//\/out\/bin\/hetflow/$HETFLOW}
bash -c "$pipeline" >packages 2>packages.err
[[ ! -s packages.err ]] || { cat packages.err; fail "a library of $HETFLOW belongs to no Debian package"; }
grep -qx libcaf-core0.17 packages || { cat packages; fail "runtime packages lack libcaf-core0.17"; }
grep -qx libc6 packages || { cat packages; fail "runtime packages lack libc6"; }
# The libraries hetflow loads with dlopen (kernels/cpu/dnnl_lazy.cpp,
# actors/dataplane/ucx_lazy.cpp, actors/cluster_auth.cpp): ldd of the binary
# does not list them.
grep -qx libdnnl2 packages || { cat packages; fail "runtime packages lack libdnnl2 (oneDNN, loaded at the first CPU kernel)"; }
grep -qx libssl3 packages || { cat packages; fail "runtime packages lack libssl3 (libcrypto, loaded for a cluster secret)"; }
grep -qx libucx0 packages || { cat packages; fail "runtime packages lack libucx0 (UCX, loaded when its data plane starts)"; }
pass "runtime packages of the binary: $(tr '\n' ' ' <packages)"
