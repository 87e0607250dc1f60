#!/usr/bin/env bash
# One entry point for a fresh Debian 12 machine (run as root, or with sudo):
#
#   deploy/dev.sh demo    install what is missing, build, run the main job
#   deploy/dev.sh test    install what is missing, build, run unit then integration tests
#   deploy/dev.sh build   install what is missing and build
#
# BUILD_DIR (default: build) and BUILD_TYPE (default: RelWithDebInfo) can be set.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
type=${BUILD_TYPE:-RelWithDebInfo}
jobs=$(nproc)

setup_and_build() {
  bash deploy/setup.sh
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="$type"
  cmake --build "$build" -j"$jobs"
}

case "${1:-}" in
  build)
    setup_and_build
    ;;
  demo)
    setup_and_build
    # The main job on the default local topology: LeNet-5 on Fashion-MNIST.
    exec "$build/bin/hetflow" run deploy/examples/fashion-lenet.toml --report "$build/fashion-lenet-report.json"
    ;;
  test)
    setup_and_build
    echo "== unit tests"
    ctest --test-dir "$build" -L unit --output-on-failure -j"$jobs"
    echo "== integration tests"
    # Serial: they start several node processes each and time failures.
    ctest --test-dir "$build" -L "integration|slow|gpu" --output-on-failure
    ;;
  *)
    echo "usage: deploy/dev.sh demo|test|build" >&2
    exit 2
    ;;
esac
