"""Several receivers, one PostgreSQL: two ``steplog serve`` processes on different ports (as on
two hosts behind a load balancer) share one store. Each trace is split across them -- its
children to one, its root to the other -- and one receiver is SIGKILLed mid-load; its share of
the load goes to the survivor, as a load balancer retries elsewhere.

The rule: every trace both receivers acknowledged becomes exactly one run, assembled once (one
``RunStarted``, one ending, never revised: the children were committed before the root was
sent), with every call it holds, ending the way its agent did; nothing stays staged and nothing
is quarantined. The staging table is the shared queue: whichever receiver's assembler claims a
trace (by deleting its staged spans in the claiming transaction) assembles it, the other finds
it taken.
"""

from __future__ import annotations

import os
import random
import signal
import threading

import pytest
from helpers.otlp import agent_trace, request
from test_drills_ingest import TERMINAL, free_port, group_gone, post, serve, wait_for

from steplog.ingest.otlp.pipeline import OtlpIngest
from steplog.ingest.redaction import default_redactor
from steplog.projections.queries import list_runs, refresh
from steplog.store import EventStore

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.xdist_group("drills")]


class SplitExporter(threading.Thread):
    """Sends each agent trace in two requests: the children to one receiver, then (once they
    are acknowledged) the root to the other; a receiver that does not answer is skipped from
    then on, as a load balancer would."""

    def __init__(self, ports: list[int], seed: int) -> None:
        super().__init__(daemon=True)
        self.ports, self.rng = list(ports), random.Random(seed)
        self.alive = set(ports)
        self.acknowledged: dict[str, str] = {}  # trace id -> how its run must end
        self.stop = threading.Event()

    def _send(self, first: int, document: dict[str, object]) -> bool:
        for port in (first, *(p for p in self.ports if p != first)):
            if port in self.alive:
                if post(port, document):
                    return True
                self.alive.discard(port)
        return False

    def run(self) -> None:
        n = 0
        while not self.stop.is_set() and self.alive:
            fails = n % 3 == 0
            spans = agent_trace(self.rng, fail_tool=fails, instance=f"i{n}")
            trace = spans[0]["traceId"]
            children, root = spans[:-1], spans[-1]  # agent_trace puts the root last
            one, other = self.ports[n % 2], self.ports[(n + 1) % 2]
            if self._send(one, request(*children)) and self._send(other, request(root)):
                self.acknowledged[trace] = "failed" if fails else "completed"
            n += 1


def test_two_receivers_on_one_postgresql_lose_nothing_and_assemble_each_trace_once(
    pg_schemas: object,
) -> None:
    db: str = pg_schemas.new(migrate=True)  # type: ignore[attr-defined]
    ports = [free_port(), free_port()]
    first, second = (serve(db, port, "--settle", "0") for port in ports)
    exporter = SplitExporter(ports, seed=29)
    exporter.start()
    store = EventStore.open(db)
    try:
        wait_for(lambda: len(exporter.acknowledged) >= 40 and store.count_runs() >= 10)
        os.kill(first.pid, signal.SIGKILL)  # mid-load: some of its spans staged, some runs not
        first.wait(30)
        wait_for(lambda: group_gone(first.pid), what="the killed receiver's children to exit")
        killed_at = len(exporter.acknowledged)
        wait_for(lambda: len(exporter.acknowledged) >= killed_at + 30, what="the survivor alone")
        exporter.stop.set()
        exporter.join(60)
        acknowledged = dict(exporter.acknowledged)

        def all_ended() -> bool:
            runs = {e.run_id for e in store.read_all() if e.type in TERMINAL}
            return all(f"otel-{t}" in runs for t in acknowledged)

        wait_for(all_ended, what="every acknowledged trace to end as a run")
        types: dict[str, list[str]] = {}
        for event in store.read_all():
            types.setdefault(event.run_id.removeprefix("otel-"), []).append(event.type)
        assert set(acknowledged) <= set(types)
        for trace in acknowledged:  # assembled once, whole
            kinds = types[trace]
            assert kinds.count("RunStarted") == 1 and "RunRevised" not in kinds, (trace, kinds)
            assert sum(kinds.count(k) for k in TERMINAL) == 1, (trace, kinds)
            assert kinds.count("ToolCalled") == 1 and kinds.count("ModelCalled") == 1, kinds
        refresh(store)
        status = {r.run_id.removeprefix("otel-"): r.status for r in list_runs(store, limit=10_000)}
        assert {t: status[t] for t in acknowledged} == acknowledged
        assert OtlpIngest(store, default_redactor()).pending()[0] == 0
        assert list(store.quarantined()) == []
    finally:
        exporter.stop.set()
        store.close()
        for process in (first, second):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.communicate(timeout=60)
    assert second.returncode == 0
