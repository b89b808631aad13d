"""A real `ator serve` process for end-to-end tests (layer: tests; imports nothing of ator).

`Replica.start(...)` launches `ator serve` as a subprocess on a free port with an explicit
ATOR_* environment (nothing inherited from the caller's ATOR_* variables), sends its stderr
to a file, and returns once GET /readyz answers 200. Process start is the one place a test
polls: there is no event to wait on from outside the process.
"""

from __future__ import annotations

import base64
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

__all__ = ["Replica", "StartupFailed", "bootstrap_key", "master_key"]

_SERVE = "from ator.cli.main import main; main()"
_READY_DEADLINE = 120.0  # migrating a fresh database took 55-61 s at a load of 20 on 2 cores
_STOP_GRACE = 8.0
_TAIL = 20_000


class StartupFailed(RuntimeError):
    """The process exited or never became ready."""


def master_key() -> str:
    """A fresh ATOR_MASTER_KEY (base64 of 32 bytes); replicas of one deployment share it."""
    return base64.b64encode(secrets.token_bytes(32)).decode()


def bootstrap_key() -> str:
    """A fresh ATOR_BOOTSTRAP_KEY, so the test knows the operator's admin key up front."""
    return f"ator_{secrets.token_hex(4)}_{secrets.token_urlsafe(24)}"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _clean_environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ATOR_")}


@dataclass
class Replica:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    env: dict[str, str] = field(repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def owner(self) -> str:
        return self.env["ATOR_OWNER_ID"]

    @classmethod
    def launch(cls, name: str, log_dir: Path, env: dict[str, str], port: int | None = None
               ) -> Replica:
        """Start the process without waiting for it; `wait_ready` finishes the start."""
        port = port or _free_port()
        log_path = log_dir / f"{name}-{port}.stderr.log"
        full_env = {**_clean_environ(), "ATOR_OWNER_ID": name, "ATOR_LOG_JSON": "false", **env}
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-c", _SERVE, "serve", "--host", "127.0.0.1", "--port",
                 str(port)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=full_env,
            )
        return cls(name, port, proc, log_path, full_env)

    @classmethod
    def start(cls, name: str, log_dir: Path, env: dict[str, str], port: int | None = None
              ) -> Replica:
        """Start `ator serve` and wait until it is ready. Retries once on a port clash (the
        free port is found before the child binds it, so another process may take it)."""
        for attempt in range(3):
            replica = cls.launch(name, log_dir, env, port)
            try:
                replica.wait_ready()
                return replica
            except StartupFailed:
                replica.stop()
                if attempt == 2 or "address already in use" not in replica.log().lower():
                    raise
        raise AssertionError("unreachable")

    def wait_ready(self, deadline: float = _READY_DEADLINE) -> None:
        end = time.monotonic() + deadline
        with httpx.Client(base_url=self.url, timeout=2.0) as client:
            while time.monotonic() < end:
                if self.proc.poll() is not None:
                    raise StartupFailed(
                        f"{self.name} exited with {self.proc.returncode} before it was "
                        f"ready:\n{self.log()}"
                    )
                try:
                    if client.get("/readyz").status_code == 200:
                        return
                except httpx.TransportError:
                    pass  # not listening yet
                time.sleep(0.05)
        raise StartupFailed(f"{self.name} not ready after {deadline:g}s:\n{self.log()}")

    def log(self) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return text if len(text) <= _TAIL else "…" + text[-_TAIL:]

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to release leases or close turns."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it has not exited within the grace period."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(_STOP_GRACE)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.wait()
