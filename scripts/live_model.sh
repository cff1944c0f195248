#!/usr/bin/env bash
# Start or stop the local model server (llama-server + SmolLM2-135M) on 127.0.0.1, by PID file.
#   scripts/live_model.sh start [PORT]   installs if needed, starts, prints the env to use it
#   scripts/live_model.sh stop
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${STATEWARD_VENV:-.venv}
PID_FILE=${STATEWARD_LIVE_PID_FILE:-${TMPDIR:-/tmp}/stateward-llama.pid}
case "${1:-}" in
  start)
    ./scripts/install_live_model.sh "$VENV"
    if [ -f "$PID_FILE" ] && kill -0 "$(cut -d' ' -f1 "$PID_FILE")" 2>/dev/null; then
      echo "already running: pid $(cut -d' ' -f1 "$PID_FILE"), port $(cut -d' ' -f2 "$PID_FILE")" >&2
      exit 0
    fi
    read -r pid url < <("$VENV/bin/python" -m stateward.models.local_server start --pid-file "$PID_FILE" ${2:+--port "$2"})
    echo "llama-server pid $pid at $url" >&2
    echo "export STATEWARD_OPENAI_BASE_URL=$url/v1 STATEWARD_ANTHROPIC_BASE_URL=$url"
    echo "# then e.g.: stateward eval stop-signal --model openai+json:smollm2 --runs 10"
    ;;
  stop)
    "$VENV/bin/python" -m stateward.models.local_server stop --pid-file "$PID_FILE"
    ;;
  *) echo "usage: $0 start [PORT] | stop" >&2; exit 2 ;;
esac
