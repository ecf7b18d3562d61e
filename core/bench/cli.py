"""``steplog bench cli``: process time of everyday commands, against starting Python at all.

Each command runs as its own process (as a user runs it), and its CPU time -- user plus system,
from the kernel's accounting of that child via ``wait4`` -- is taken over several runs, the
median kept. The baseline ``python -c pass`` is measured in the same run, so the ratio holds
when the machine is busy. ``runs`` and ``info`` read a small seeded SQLite store whose read
models are already caught up, as they are on a second call.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

TARGETS = {"steplog --help": 0.3, "steplog --version": 0.1, "steplog runs": 0.6}
"""Process-time targets in seconds (issue: the CLI answers at once)."""


@dataclass(frozen=True, slots=True)
class CommandTiming:
    """CPU seconds of one command over ``repeat`` runs."""

    command: str
    median_s: float
    min_s: float
    max_s: float
    baseline_s: float
    target_s: float | None

    @property
    def ratio(self) -> float:
        """How many times the cost of starting Python and doing nothing."""
        return self.median_s / self.baseline_s if self.baseline_s > 0 else float("inf")

    @property
    def verdict(self) -> str:
        """``ok`` or ``MISSED`` against the target; ``-`` without one."""
        if self.target_s is None:
            return "-"
        return "ok" if self.median_s < self.target_s else "MISSED"

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form, with the ratio and verdict."""
        return {**asdict(self), "ratio": self.ratio, "verdict": self.verdict}


def cpu_seconds(argv: list[str], env: dict[str, str]) -> float:
    """User + system CPU seconds of one run of ``argv`` (its output is discarded)."""
    child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    stderr = child.stderr.read().decode(errors="replace") if child.stderr else ""
    if child.stderr:
        child.stderr.close()
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {child.returncode}: {stderr.strip()}")
    return usage.ru_utime + usage.ru_stime


def _steplog() -> list[str]:
    script = Path(sys.executable).with_name("steplog")
    return [str(script)] if script.exists() else [sys.executable, "-m", "steplog"]


def run_cli_benchmark(repeat: int = 7) -> list[CommandTiming]:
    """Time ``steplog --help``, ``--version``, ``runs`` and ``info`` against ``python -c pass``."""
    steplog = _steplog()
    with tempfile.TemporaryDirectory(prefix="steplog-bench-cli-") as home:
        env = {**os.environ, "STEPLOG_HOME": home, "COLUMNS": "120"}
        env.pop("STEPLOG_DATABASE_URL", None)
        seed = [*steplog, "run", "sandbox", "-m", "sim-v1", "--runs", "20", "--seed", "1"]
        cpu_seconds(seed, env)
        cpu_seconds([*steplog, "runs"], env)  # catch the read models up once, as a user would
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "steplog --help": [*steplog, "--help"],
            "steplog --version": [*steplog, "--version"],
            "steplog runs": [*steplog, "runs"],
            "steplog info": [*steplog, "info"],
        }
        samples: dict[str, list[float]] = {name: [] for name in commands}
        cpu_seconds(commands["steplog --help"], env)  # warm the page cache and .pyc files
        for _ in range(repeat):  # interleaved, so drift hits every command alike
            for name, argv in commands.items():
                samples[name].append(cpu_seconds(argv, env))
    baseline = statistics.median(samples.pop("python -c pass"))
    return [
        CommandTiming(
            command=name,
            median_s=statistics.median(values),
            min_s=min(values),
            max_s=max(values),
            baseline_s=baseline,
            target_s=TARGETS.get(name),
        )
        for name, values in samples.items()
    ]
