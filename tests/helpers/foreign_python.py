"""A shell whose ``python3`` is not the interpreter onceflow is installed in.

Installed in a virtual environment and run by its path without activating it (as pipx, a Makefile
or a cron job runs a tool), ``onceflow`` finds on ``PATH`` a ``python3`` that cannot import it.
Spark starts its Python workers with ``python3`` from ``PATH`` unless told otherwise, so a test of
that case needs such a ``python3``: a fresh virtual environment without the system's site packages
(made in well under a second, no pip), put first on ``PATH``, with this interpreter's own directory
taken off it. In CI onceflow is installed editable into the machine's only Python, which then plays
the virtual environment's part: ``onceflow_command()`` is its ``bin/onceflow`` by absolute path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

# What a user may set to choose Spark's Python themselves; a foreign shell has none of them.
PYSPARK_PYTHON_VARIABLES = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")


def onceflow_command() -> list[str]:
    """The ``onceflow`` script beside this interpreter, by absolute path (``python -m onceflow`` by
    absolute path where the install made no script)."""
    script = Path(sys.executable).parent / "onceflow"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "onceflow"]


def foreign_python_env(base: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment, except that ``python3`` on ``PATH`` is a bare virtual environment's
    (made under ``base``) and no PySpark interpreter variable is set. Raises if that ``python3`` could
    import onceflow's client after all, since the test would then prove nothing."""
    env_dir = base / "foreign-venv"
    venv.EnvBuilder(with_pip=False, system_site_packages=False, symlinks=True).create(env_dir)
    own_dir = str(Path(sys.executable).parent)
    path = [str(env_dir / "bin")]
    path += [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != own_dir]
    env = {k: v for k, v in os.environ.items() if k not in PYSPARK_PYTHON_VARIABLES}
    env.pop("VIRTUAL_ENV", None)
    env["PATH"] = os.pathsep.join(path)
    env.update(extra or {})
    python3 = shutil.which("python3", path=env["PATH"])
    if python3 is None or not python3.startswith(str(env_dir)):
        raise RuntimeError(f"python3 on the test's PATH is {python3}, not the bare venv's")
    probe = subprocess.run(
        [python3, "-c", "import onceflow.client"], env=env, capture_output=True, text=True, timeout=60
    )
    if probe.returncode == 0:
        raise RuntimeError(f"{python3} imports onceflow.client: it cannot stand for a foreign python3")
    return env
