#!/usr/bin/env bash
# Runs the whole test suite: unit tests and the end-to-end tests that start real nats-server,
# coordinator and worker processes, Chromium and LibreOffice. Installs what is missing first.
# Without arguments the test binaries run a few at a time (scripts/run-tests.py); with
# arguments they go to `cargo test --workspace` (e.g. `scripts/test.sh -p atelier-agents`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
cargo build --bin atelier
if [ "$#" -gt 0 ]; then
  exec cargo test --workspace "$@"
fi
exec python3 scripts/run-tests.py
