#!/usr/bin/env bash
# Runs the whole test suite: unit tests and the end-to-end tests that start real nats-server,
# coordinator and worker processes. Needs scripts/setup.sh to have run once.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --bin atelier
cargo test --workspace "$@"
