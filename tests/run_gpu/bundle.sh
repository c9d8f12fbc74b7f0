#!/usr/bin/env bash
# Builds what tests/run_gpu/run-cases.sh needs on the GPU machine (which has no Rust
# toolchain): the streamsan CLI and the tool library, release, into .run-bundle/.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --bin streamsan -p streamsan
cargo build --release -p streamsan-tool
mkdir -p .run-bundle
cp target/release/streamsan target/release/libstreamsan_tool.so .run-bundle/
strip .run-bundle/streamsan .run-bundle/libstreamsan_tool.so
ls -la .run-bundle
