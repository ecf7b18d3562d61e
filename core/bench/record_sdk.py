"""``steplog bench record --sdk``: what recording costs a user's own agent, per event.

For each kind of SDK agent -- decorated functions (``step``, ``model_call``, ``tool_call``) and
the real ``openai`` client recorded with zero code (the httpx hook) -- the same runs are timed
in several passes, interleaved run by run in one process so load elsewhere hits them alike:

- **alone**: the agent with recording off (outside any run; the openai client's requests are
  answered inside the process, so no socket or server thread is timed);
- **recorded**: the same agent inside ``record_run`` into a fresh SQLite store, every step
  committed durably before the run goes on (ack = durable, as always);
- **interleaved** (the baseline): the agent with recording off again, appending through
  ``EventStore.append``, into its own fresh store, the very batches the recorded pass committed
  and where it committed them: the run's first batch (``RunStarted``) before the agent, one
  step's batch as each step ends, the last (``RunCompleted``) after it. Same events, ids,
  expected versions, number of commits and durability (the same ``EventStore.open`` of a
  SQLite file): what a user writing those events themselves, durably per step, would pay. The
  pass is refused unless the recorded run committed exactly once before, once per step and
  once after;
- **append**: the same batches appended back to back into another fresh store, apart from the
  agent (the earlier baseline: it never pays for the agent's work and the durable waits
  alternating, so that cost was billed to the recorder);
- **no commit**: the recorded pass again into a stub store that keeps the batches and writes
  nothing -- the recorder's own CPU with no commit to wait for.

The recorder's overhead per event is ``(recorded - interleaved) / events`` in CPU time: what
steplog adds beyond the agent's own work and the same durable appends at the same points.
Target: <= 20 us per event (issue 38). The earlier ``(recorded - alone - append) / events`` is
reported beside it. Every store is counted afterwards and must hold every captured event. The
recorded pass's store also keeps each batch in memory (:class:`~._agents.CapturingStore`, a
list append per batch): billed to the recorder, not to the baseline. Those batches are dropped
once the baselines have appended them, as a user's process drops each event once committed:
kept across runs they filled the heap that every full collection of the cyclic garbage collector
walks, and the recorded passes, which allocate the most, paid for most of those collections
(about 9 us per event with no commit, 12-05). A full collection runs before each pass's clock
(as in ``bench append``), so no pass pays for garbage another left.
"""

from __future__ import annotations

import gc
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
    Batches,
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
    interleaved_ms_per_run: float

    @property
    def overhead_us_per_event(self) -> float:
        """Recorder CPU per event beyond the agent appending the same batches itself at the
        same points (the interleaved baseline): the headline."""
        extra = self.recorded_ms_per_run - self.interleaved_ms_per_run
        return 1000 * extra / self.events_per_run

    @property
    def separate_us_per_event(self) -> float:
        """Recorder CPU per event beyond the agent alone and the batches appended apart."""
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
            "separate_us_per_event": self.separate_us_per_event,
            "no_commit_us_per_event": self.no_commit_us_per_event,
            "verdict": self.verdict,
        }


Agent = Callable[[str, bool, Callable[[], object] | None], Any]
"""(task, recorded, step_ended) -> answer: ``step_ended`` is called after each step."""


def _openai_agent(steps: int) -> Agent:
    """The ``bench replay --sdk`` agent: three concurrent chat completions per step."""
    url = "http://127.0.0.1:9/v1"  # never reached: answered inside the process
    alone, recorded = openai_agent(url, steps, 3, alone=True), openai_agent(url, steps, 3)
    return lambda task, record, ended: (recorded if record else alone)(task, ended)


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


def _interleaved(store: EventStore, agent: Agent, task: str, batches: Batches) -> float:
    """CPU of the agent alone appending ``batches`` where the recorded run committed them: the
    first before the agent, one as each step ends, the last after it."""
    pending = iter(batches)
    append = store.append

    def step_ended() -> None:
        append(*next(pending))

    started = time.process_time()
    append(*next(pending))
    agent(task, False, step_ended)
    for batch in pending:
        append(*batch)
    return time.process_time() - started


def _append_apart(store: EventStore, batches: Batches) -> float:
    """CPU of appending ``batches`` back to back."""
    started = time.process_time()
    for run_id, events, expected in batches:
        store.append(run_id, events, expected)
    return time.process_time() - started


def _measure(folder: Path, name: str, agent: Agent, runs: int, steps: int) -> SdkRecordBench:
    """Alone, recorded, append, interleaved and no commit, run by run; checks that every store
    holds every event."""
    recorded_store = capturing(CapturingStore, folder / f"{name}.db")
    baseline = EventStore.open(str(folder / f"{name}-append.db"))
    interleaved_store = EventStore.open(str(folder / f"{name}-interleaved.db"))
    stub = capturing(StubStore, folder / f"{name}-stub.db")
    alone, recorded, append, interleaved, no_commit = [], [], [], [], []

    def record(task: str, seed: int, store: EventStore) -> float:
        started = time.process_time()
        with record_run(name, model_version="bench-model", agent=name, input={"task": task},
                        store=store, seed=seed) as run:  # fmt: skip
            run.output = agent(task, True, None)
        return time.process_time() - started

    agent("warm-up", False, None)
    record("warm-up", -1, stub)
    count = 0
    for index in range(runs):
        task = f"task-{index}"
        gc.collect()
        started = time.process_time()
        agent(task, False, None)
        alone.append(time.process_time() - started)
        gc.collect()
        recorded.append(record(task, index, recorded_store))
        batches, recorded_store.batches = recorded_store.batches, []
        if len(batches) != steps + 2:  # RunStarted, one per step, RunCompleted
            raise RuntimeError(f"{name}: {len(batches)} commits for {steps} steps, not 1 + 1 each")
        count += sum(len(events) for _, events, _ in batches)
        gc.collect()
        append.append(_append_apart(baseline, batches))
        gc.collect()
        interleaved.append(_interleaved(interleaved_store, agent, task, batches))
        del batches  # a user's process keeps no event past its commit (see the docstring)
        stub.batches.clear()
        gc.collect()
        no_commit.append(record(task, index, stub))
    for store in (recorded_store, baseline, interleaved_store, stub):
        store.close()
    for suffix in ("", "-append", "-interleaved"):
        path = folder / f"{name}{suffix}.db"
        if (stored := stored_events(path)) != count:
            raise RuntimeError(f"{path.name} holds {stored:,} events; {count:,} were appended")

    def ms(values: list[float]) -> float:
        return 1000 * statistics.median(values)

    return SdkRecordBench(
        name,
        runs,
        count / runs,
        ms(alone),
        ms(recorded),
        ms(append),
        ms(no_commit),
        ms(interleaved),
    )


def run_sdk_record_benchmark(*, runs: int = 20, steps: int = 50) -> list[SdkRecordBench]:
    """The decorated agent and the zero-code openai agent, each ``runs`` runs of ``steps``."""
    with tempfile.TemporaryDirectory(prefix="steplog-bench-record-sdk-") as tmp:
        folder = Path(tmp)
        decorated = _measure(folder, "decorated", decorated_agent(steps), runs, steps)
        with _openai_answered():
            zero_code = _measure(folder, "openai-zero-code", _openai_agent(steps), runs, steps)
    return [decorated, zero_code]
