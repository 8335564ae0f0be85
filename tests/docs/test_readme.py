"""What the README promises, checked: its Python examples run as written against a real broker, its
table of Kafka APIs is the handlers' own, its test command is the one CI runs, and no document
points outside the repository.

The examples are the fenced ``python`` blocks after a ``<!-- readme-example: NAME -->`` comment; the
only change made to them is the broker's address. The read-process-write example is a service that
runs until killed: it runs as a subprocess, is killed with SIGKILL mid-stream, runs again (the
README's "a second run"), and the output must hold every input doubled exactly once. A killed
member stays in its group until its session times out (Kafka's 45 s), so the second run waits for
that: the one slow test here.
"""

from __future__ import annotations

import importlib.util
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from onceflow.client import SimpleClient

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
SESSION_TIMEOUT_S = 45  # the consumer's session.timeout.ms default, Kafka's


def readme_example(name: str) -> str:
    text = README.read_text()
    marker = f"<!-- readme-example: {name} -->"
    assert marker in text, f"README.md lost its {name!r} example"
    found = re.match(r"\s*```python\n(.*?)```", text.split(marker, 1)[1], re.S)
    assert found, f"no ```python block follows {marker}"
    return found.group(1)


def example_script(name: str, bootstrap: str, directory: Path) -> Path:
    code = readme_example(name)
    assert DEFAULT_BOOTSTRAP in code
    path = directory / f"{name}.py"
    path.write_text(code.replace(DEFAULT_BOOTSTRAP, bootstrap))
    return path


def test_hello_world_prints_the_three_records(broker, tmp_path):
    script = example_script("hello", broker.bootstrap, tmp_path)
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert [line.split(" ", 2)[2] for line in result.stdout.splitlines()] == [
        "b'demo' b'hello'",
        "b'demo' b'exactly'",
        "b'demo' b'once'",
    ]


def committed_totals(bootstrap: str) -> list[int]:
    with SimpleClient(bootstrap) as client:
        return [
            int(r.value) for r in client.consume("totals", isolation_level="read_committed", timeout_s=1.0)
        ]


def wait_for_totals(bootstrap: str, count: int, service: subprocess.Popen, timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    totals: list[int] = []
    while time.monotonic() < deadline:
        assert service.poll() is None, f"the read-process-write example exited with {service.returncode}"
        totals = committed_totals(bootstrap)
        if len(totals) >= count:
            return totals
        time.sleep(0.5)
    raise AssertionError(f"{len(totals)} of {count} totals within {timeout_s:.0f} s")


def produce_numbers(bootstrap: str, numbers: range) -> None:
    """As the README says to: ``seq A B | onceflow produce --topic orders``."""
    lines = "".join(f"{n}\n" for n in numbers)
    result = subprocess.run(
        [sys.executable, "-m", "onceflow", "produce", "--topic", "orders", "--bootstrap-server", bootstrap],
        input=lines,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def start_service(script: Path, log: Path) -> subprocess.Popen:
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, str(script)], cwd=script.parent, stdout=out, stderr=out)


def wait_for_topics(bootstrap: str, service: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert service.poll() is None, f"the read-process-write example exited with {service.returncode}"
        with SimpleClient(bootstrap) as client:
            if {"orders", "totals"} <= set(client.list_topics()):
                return
        time.sleep(0.2)
    raise AssertionError("the example did not create its topics")


@pytest.mark.slow
@pytest.mark.timeout(420)  # the second run waits out the killed member's session (45 s)
def test_read_process_write_doubles_every_order_once_across_a_kill_and_a_second_run(broker, tmp_path):
    script = example_script("read-process-write", broker.bootstrap, tmp_path)
    log = tmp_path / "service.log"
    service = start_service(script, log)
    try:
        wait_for_topics(broker.bootstrap, service)
        produce_numbers(broker.bootstrap, range(1, 101))
        first = wait_for_totals(broker.bootstrap, 100, service, timeout_s=60)
        produce_numbers(broker.bootstrap, range(101, 201))  # still being processed when it dies
        service.send_signal(signal.SIGKILL)
        service.wait()
        service = start_service(script, log)  # the second run: the topics exist, the old producer is fenced
        produce_numbers(broker.bootstrap, range(201, 251))
        totals = wait_for_totals(broker.bootstrap, 250, service, timeout_s=SESSION_TIMEOUT_S + 60)
    finally:
        service.kill()
        service.wait()
    assert sorted(first) == [2 * n for n in range(1, 101)]
    time.sleep(1.0)  # anything written twice would be committed by now
    assert sorted(committed_totals(broker.bootstrap)) == sorted(totals) == [2 * n for n in range(1, 251)], (
        log.read_text()[-3000:]
    )


def _api_table_tool():
    spec = importlib.util.spec_from_file_location("api_table", REPO_ROOT / "tools" / "api_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_api_table_is_the_handlers():
    tool = _api_table_tool()
    text = README.read_text()
    assert tool.replace_table(text, tool.api_table()) == text, "run: python tools/api_table.py"
    from onceflow.broker.handlers import HANDLERS

    rows = re.findall(r"^\| (\d+) \| (\w+) \| (\d+)(?:–(\d+))? \|", text, re.M)
    assert len(rows) == len(HANDLERS)
    table = {int(key): (int(low), int(high or low)) for key, _, low, high in rows}
    assert table == {h.API_KEY: (h.MIN_VERSION, h.MAX_VERSION) for h in HANDLERS}


def test_the_api_table_check_fails_when_a_version_drifts(tmp_path):
    tool = _api_table_tool()
    drifted = README.read_text().replace("| 0 | Produce | 0–", "| 0 | Produce | 1–", 1)
    assert tool.replace_table(drifted, tool.api_table()) != drifted


def test_the_readme_test_command_is_the_one_ci_runs():
    text = README.read_text()
    command = re.search(r"## Run the tests\s*```bash\n(.*?)\n```", text, re.S).group(1)
    steps = [step.strip() for step in command.split("&&")]
    assert steps[0] == "apt-get update"
    assert steps[1].startswith("apt-get install -y ")
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    ci_packages = re.search(r"apt-get install -y -qq ([\w. -]+?);", ci).group(1).split()
    assert sorted(steps[1].split()[3:]) == sorted(ci_packages)
    ci_commands = [
        line.strip() for line in ci.splitlines() if line.strip() and not line.strip().startswith("#")
    ]
    for step in steps[2:]:
        assert step in ci_commands, f"{step!r} is in the README's test command but not in .ci/run"


# A link or path that leaves the repository: up past its root, or absolute.
OUTSIDE = re.compile(r"\]\((?!https?://|#)(/|\.\./)|`(\.\./|/work/|/tmp/)[^`]*`|\.\./shared")


@pytest.mark.parametrize(
    "document", ["README.md", *sorted(p.name for p in (REPO_ROOT / "docs").glob("*.md"))]
)
def test_documents_point_nowhere_outside_the_repository(document):
    path = README if document == "README.md" else REPO_ROOT / "docs" / document
    text = path.read_text()
    assert not OUTSIDE.search(text), OUTSIDE.search(text).group(0)
    for target in re.findall(r"\]\((?!https?://|#)([^)#]+)", text):
        resolved = (path.parent / target).resolve()
        assert resolved.is_relative_to(REPO_ROOT), f"{document} links outside the repository: {target}"


def test_the_license_file_is_the_one_pyproject_names():
    import tomllib

    declared = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["license"]["text"]
    assert declared == "Apache-2.0"
    text = (REPO_ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
