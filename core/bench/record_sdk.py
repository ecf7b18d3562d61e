"""``steplog bench record --sdk``: what recording costs a user's own agent, per event.

For each kind of SDK agent -- decorated functions (``step``, ``model_call``, ``tool_call``) and
the real ``openai`` client recorded with zero code (the httpx hook) -- the same runs are timed
three ways, interleaved run by run in one process so load elsewhere hits all three alike:

- **alone**: the agent with recording off (outside any run; the openai client's requests are
  answered inside the process, so no socket or server thread is timed);
- **recorded**: the same agent inside ``record_run`` into a fresh SQLite store, every step
  committed durably before the run goes on (ack = durable, as always);
- **append**: the very batches the recorded pass appended, appended again straight through
  ``EventStore.append`` into another fresh store (same sizes, expected versions, commits);
- **no commit**: the recorded pass again into a stub store that keeps the batches and writes
  nothing -- the recorder's own CPU with no commit to wait for.

The recorder's overhead per event is ``(recorded - alone - append) / events`` in CPU time: what
steplog adds beyond the agent's own work and the store's durable append. Target: <= 20 us per
event (issue 38). Both stores are counted afterwards and must hold every captured event. The
no-commit pass shows how much of the overhead is the recorder's code itself and how much is
that code running between durable commits (a process that blocks on each fsync comes back to
cold caches; see the record benchmark in the performance guide).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import SteplogError
from ..recorder import record_run
from ..store import EventStore
from ._agents import (
    CapturingStore,
    StubStore,
    answered_in_process,
    capturing,
    decorated_agent,
    openai_agent,
    stored_events,
)

TARGET_US = 20.0


@dataclass(frozen=True, slots=True)
class SdkRecordBench:
    """One agent kind: CPU per run of each pass, events per run, and the overhead per event."""

    agent: str
    runs: int
    events_per_run: float
    alone_ms_per_run: float
    recorded_ms_per_run: float
    append_ms_per_run: float
    no_commit_ms_per_run: float

    @property
    def overhead_us_per_event(self) -> float:
        """Recorder CPU per event beyond the agent alone and the store's append."""
        extra = self.recorded_ms_per_run - self.alone_ms_per_run - self.append_ms_per_run
        return 1000 * extra / self.events_per_run

    @property
    def no_commit_us_per_event(self) -> float:
        """The recorder's own CPU per event, recording into a store that writes nothing."""
        return 1000 * (self.no_commit_ms_per_run - self.alone_ms_per_run) / self.events_per_run

    @property
    def verdict(self) -> str:
        """``<= 20 us ok`` or ``MISSED``."""
        met = self.overhead_us_per_event <= TARGET_US
        return f"<= {TARGET_US:g} us {'ok' if met else 'MISSED'}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            **asdict(self),
            "overhead_us_per_event": self.overhead_us_per_event,
            "no_commit_us_per_event": self.no_commit_us_per_event,
            "verdict": self.verdict,
        }


def _openai_agent(steps: int) -> Callable[[str, bool], Any]:
    """The ``bench replay --sdk`` agent: three concurrent chat completions per step."""
    url = "http://127.0.0.1:9/v1"  # never reached: answered inside the process
    alone, recorded = openai_agent(url, steps, 3, alone=True), openai_agent(url, steps, 3)
    return lambda task, record: (recorded if record else alone)(task)


@contextmanager
def _openai_answered() -> Iterator[None]:
    try:
        import openai  # noqa: F401
    except ImportError:
        raise SteplogError(
            "bench record --sdk needs the openai package (pip install openai)"
        ) from None
    with answered_in_process():
        yield


def _measure(
    folder: Path, name: str, agent: Callable[[str, bool], Any], runs: int
) -> SdkRecordBench:
    """Alone, recorded and append, run by run; checks both stores hold every event."""
    recorded_store = capturing(CapturingStore, folder / f"{name}.db")
    baseline = EventStore.open(str(folder / f"{name}-append.db"))
    stub = capturing(StubStore, folder / f"{name}-stub.db")
    alone, recorded, append, no_commit = [], [], [], []

    def record(task: str, seed: int, store: EventStore) -> float:
        started = time.process_time()
        with record_run(name, model_version="bench-model", agent=name, input={"task": task},
                        store=store, seed=seed) as run:  # fmt: skip
            run.output = agent(task, True)
        return time.process_time() - started

    agent("warm-up", False)
    record("warm-up", -1, stub)
    for index in range(runs):
        task = f"task-{index}"
        started = time.process_time()
        agent(task, False)
        alone.append(time.process_time() - started)
        first = len(recorded_store.batches)
        recorded.append(record(task, index, recorded_store))
        started = time.process_time()
        for run_id, events, expected in recorded_store.batches[first:]:
            baseline.append(run_id, events, expected)
        append.append(time.process_time() - started)
        no_commit.append(record(task, index, stub))
    recorded_store.close()
    baseline.close()
    stub.close()
    count = sum(len(events) for _, events, _ in recorded_store.batches)
    for path in (folder / f"{name}.db", folder / f"{name}-append.db"):
        if (stored := stored_events(path)) != count:
            raise RuntimeError(f"{path.name} holds {stored:,} events; {count:,} were appended")

    def ms(values: list[float]) -> float:
        return 1000 * statistics.median(values)

    return SdkRecordBench(
        name, runs, count / runs, ms(alone), ms(recorded), ms(append), ms(no_commit)
    )


def run_sdk_record_benchmark(*, runs: int = 20, steps: int = 50) -> list[SdkRecordBench]:
    """The decorated agent and the zero-code openai agent, each ``runs`` runs of ``steps``."""
    with tempfile.TemporaryDirectory(prefix="steplog-bench-record-sdk-") as tmp:
        folder = Path(tmp)
        decorated = _measure(folder, "decorated", decorated_agent(steps), runs)
        with _openai_answered():
            zero_code = _measure(folder, "openai-zero-code", _openai_agent(steps), runs)
    return [decorated, zero_code]
