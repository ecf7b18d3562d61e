"""The tests' child processes (tests/helpers/children.py): default signal dispositions, reaped."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers.children import reap, reaped, spawn

PROBE = (
    "import signal\n"
    "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler,"
    " signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,"
    " signal.getsignal(signal.SIGHUP) == signal.SIG_DFL)"
)


def test_children_get_default_dispositions_when_the_parent_ignores_signals() -> None:
    """As under `nohup` or a background job of a non-interactive shell (CI runners): SIGINT,
    SIGTERM and SIGHUP ignored in the parent are back at their defaults in the child, so a
    child Python raises KeyboardInterrupt on Ctrl-C and a server stops when told to."""
    saved = {n: signal.signal(n, signal.SIG_IGN) for n in (signal.SIGINT, signal.SIGHUP)}
    try:
        inherited = subprocess.run(
            [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
        ).stdout.split()
        with reaped(spawn([sys.executable, "-c", PROBE], stdout=subprocess.PIPE, text=True)) as c:
            restored = c.communicate(timeout=60)[0].split()
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)
    assert inherited[0] == "False"  # what a plain Popen child would get: SIGINT ignored
    assert restored == ["True", "True", "True"]


def test_reap_stops_a_child_that_ignores_sigterm_and_its_group() -> None:
    stubborn = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    process = spawn(
        [sys.executable, "-c", stubborn],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    grandchild = int(process.stdout.readline())
    started = time.monotonic()
    reap(process, grace=0.5)
    assert process.returncode == -signal.SIGKILL
    assert time.monotonic() - started < 30
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the grandchild went with its group
        try:
            if Path(f"/proc/{grandchild}/stat").read_text().split(") ")[1][0] in "ZX":
                break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"the grandchild {grandchild} outlived reap()")


def test_every_test_child_is_spawned_through_the_helper() -> None:
    """A plain ``subprocess.Popen`` in a test would inherit ignored signals again."""
    tests = Path(__file__).parent
    offenders = [
        str(path.relative_to(tests))
        for path in tests.rglob("*.py")
        if "subprocess.Popen(" in path.read_text()
        and path.name not in ("children.py", "test_children.py")
        and "corpus" not in path.parts  # the corpus recorder builds venvs, outside the suite
    ]
    assert offenders == [], f"start children with helpers.children.spawn: {offenders}"
