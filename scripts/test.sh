#!/usr/bin/env bash
# Runs the whole test suite: unit tests and the end-to-end tests that start real nats-server,
# coordinator and worker processes, Chromium and LibreOffice. Installs what is missing first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
cargo build --bin atelier
cargo test --workspace "$@"
