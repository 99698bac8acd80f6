"""``linkerd-config run`` as a process of its own, its output lines collected: for tests that
need what only a process shows (its log, its exit code, a SIGTERM, an event loop it blocks)."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import threading
from typing import Any


class RunProcess:
    """Started at once; ``stop`` sends SIGTERM, then SIGKILL if the process does not end
    (a blocked event loop never reaches its SIGTERM handler)."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def records(self) -> list[dict[str, Any]]:
        """The JSON log lines so far."""
        out = []
        for line in list(self.lines):
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def stop(self, timeout: float = 30.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=timeout)
        finally:
            self._reader.join(timeout=5)
