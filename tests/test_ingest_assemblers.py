"""Several assemblers on one store (``serve --assemblers N``, or two ``serve`` instances): each
trace is claimed by exactly one of them, stored once, and a straggler span is never taken for
"late" because another assembler was working on the same trace.

The interleavings are forced step by step (read, other assembler's round, own round), so the
assertions hold whatever the scheduler does; the threaded test adds free interleavings.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from typing import Any

import pytest
from helpers.otlp import agent_trace, request, span

from steplog.ingest.otlp.pipeline import OtlpIngest
from steplog.ingest.otlp.revise import current_reading
from steplog.ingest.otlp.rounds import assemble_round
from steplog.ingest.otlp.spans import decode_document
from steplog.ingest.redaction import default_redactor
from steplog.store import EventStore


def two_assemblers(url: str) -> tuple[EventStore, OtlpIngest, OtlpIngest]:
    """Two assemblers with engines (connection pools) of their own, as two processes have."""
    first, second = EventStore.open(url), EventStore.open(url)
    return (
        first,
        OtlpIngest(first, default_redactor(), settle_seconds=0.0),
        OtlpIngest(second, default_redactor(), settle_seconds=0.0),
    )


def test_a_round_between_anothers_read_and_write_leaves_it_nothing(store_url: str) -> None:
    store, a, b = two_assemblers(store_url)
    try:
        chat, tool, root = agent_trace(random.Random(31))
        a.receive(decode_document(request(chat, root)))
        (trace,) = a.ready_traces()
        read_by_a = a._load([trace])  # A has read and mapped the trace...
        a.receive(decode_document(request(tool)))  # ...a straggler is acknowledged...
        assert b.assemble().runs == 1  # ...and B assembles the whole trace first
        outcome = assemble_round(a._round_context(), read_by_a)
        assert outcome.taken_elsewhere == [trace] and outcome.report.runs == 0
        assert store.quarantined() == [] and a.pending() == (0, 0)
        (run_id,) = {e.run_id for e in store.read_all()}
        types = Counter(e.type for e in store.read_run(run_id))
        # stored once, with all three spans, no revision: 1 run, 2 steps, 1 model + 1 tool call
        assert types["RunStarted"] == 1 and types["RunRevised"] == 0
        assert types["StepStarted"] == 2 and types["ModelCalled"] == types["ToolCalled"] == 1
    finally:
        b.store.close()
        store.close()


def test_a_straggler_staged_after_anothers_read_joins_that_assemblers_run(
    store_url: str,
) -> None:
    store, a, b = two_assemblers(store_url)
    try:
        chat, tool, root = agent_trace(random.Random(32))
        a.receive(decode_document(request(chat, root)))
        (trace,) = a.ready_traces()
        read_by_b = b._load([trace])  # B read the trace before the straggler came
        a.receive(decode_document(request(tool)))
        read_by_a = a._load([trace])  # A read it with the straggler
        # B's claim takes every staged span of the trace, the straggler too
        assert assemble_round(b._round_context(), read_by_b).report.runs == 1
        outcome = assemble_round(a._round_context(), read_by_a)
        # before: A found B's run, differing, and quarantined the tool span as "late"
        assert store.quarantined() == [] and a.pending() == (0, 0)
        assert outcome.taken_elsewhere == [trace] and outcome.report.runs == 0
        (run_id,) = {e.run_id for e in store.read_all()}
        types = Counter(e.type for e in store.read_run(run_id))
        assert types["RunStarted"] == 1 and types["RunRevised"] == 0
        assert types["ToolCalled"] == types["ModelCalled"] == 1
    finally:
        b.store.close()
        store.close()


def test_a_span_after_the_run_was_stored_revises_it_whoever_reads_it(store_url: str) -> None:
    store, a, b = two_assemblers(store_url)
    try:
        chat, tool, root = agent_trace(random.Random(35))
        a.receive(decode_document(request(chat, root)))
        (trace,) = a.ready_traces()
        read_by_b, read_by_a = b._load([trace]), a._load([trace])  # both read it whole
        assert assemble_round(b._round_context(), read_by_b).report.runs == 1
        a.receive(decode_document(request(tool)))  # a genuinely late span
        outcome = assemble_round(a._round_context(), read_by_a)
        # A's claim finds only the late span (B took the rest): it revises B's run
        assert store.quarantined() == [] and a.pending() == (0, 0)
        assert outcome.taken_elsewhere == [] and outcome.report.runs == 1
        (run_id,) = {e.run_id for e in store.read_all()}
        stored = store.read_run(run_id)
        reading, revision = current_reading(stored)
        kinds = Counter(type(e).__name__ for e in reading)
        assert revision == 1 and kinds["ToolCalled"] == kinds["ModelCalled"] == 1
        assert [e.type for e in stored].count("RunStarted") == 1  # assembled once, then revised
    finally:
        b.store.close()
        store.close()


def test_an_assembler_whose_claim_is_gone_quarantines_nothing(store_url: str) -> None:
    store, a, b = two_assemblers(store_url)
    try:
        a.receive(decode_document(request(*agent_trace(random.Random(33)))))
        (trace,) = a.ready_traces()
        read_by_a, read_by_b = a._load([trace]), b._load([trace])
        first = assemble_round(b._round_context(), read_by_b)
        second = assemble_round(a._round_context(), read_by_a)
        assert first.report.runs == 1 and first.taken_elsewhere == []
        assert second.report.runs == 0 and second.taken_elsewhere == [trace]
        assert store.quarantined() == [] and store.count_runs() == 1
    finally:
        b.store.close()
        store.close()


@pytest.mark.slow
def test_two_assemblers_racing_over_many_traces_store_each_once(store_url: str) -> None:
    store, a, b = two_assemblers(store_url)
    try:
        rng = random.Random(34)
        traces = [agent_trace(rng) for _ in range(60)]
        for spans in traces:
            a.receive(decode_document(request(*spans)))
        errors: list[BaseException] = []
        runs: list[int] = []

        def assemble(ingest: OtlpIngest) -> None:
            try:
                for _ in range(5):  # rounds of few traces: many chances to collide
                    runs.append(ingest.assemble().runs)
            except BaseException as exc:  # collected: a thread's failure fails the test
                errors.append(exc)

        threads = [threading.Thread(target=assemble, args=(x,)) for x in (a, b, a, b)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert sum(runs) == 60 and store.count_runs() == 60
        assert store.quarantined() == [] and a.pending() == (0, 0)
        started = Counter(e.run_id for e in store.read_all() if e.type == "RunStarted")
        revised = [e for e in store.read_all() if e.type == "RunRevised"]
        assert set(started.values()) == {1} and revised == []
    finally:
        b.store.close()
        store.close()


# --- the paged look-up of ready traces --------------------------------------------------------


def _trace(trace_id: str, children: int, *, root_id: str = "f" * 16) -> list[dict[str, Any]]:
    """A trace with ``children`` spans under a root span ``root_id``: its children's ids are
    ``0000000000000002``... so a root of ``ff..`` sorts after them in a page of staged spans,
    one of ``00..01`` before them (an all-zero id is invalid)."""
    root = span(trace_id, root_id, "invoke_agent booking", gen_ai__operation__name="invoke_agent")
    return [
        span(trace_id, f"{i + 2:016x}", "tool", parent=root_id, gen_ai__operation__name="x")
        for i in range(children)
    ] + [root]


@pytest.mark.parametrize("root_id", ["f" * 16, f"{1:016x}"], ids=["root-last", "root-first"])
def test_a_page_that_ends_inside_a_trace_looks_at_that_trace_again(
    store: EventStore, root_id: str
) -> None:
    # a look-up of 1 trace reads a page of 10 spans; the second trace is cut after 3 of its 7
    # spans: it must be judged by the next look-up, on all its spans -- never passed by as not
    # ready (root-last: its root is not in the page), nor taken as ready on part of them and
    # then looked at again (root-first)
    ingest = OtlpIngest(store, default_redactor(), settle_seconds=0.0)
    first, second = "1" * 32, "2" * 32
    ingest.receive(decode_document(request(*_trace(first, 6))))
    ingest.receive(decode_document(request(*_trace(second, 6, root_id=root_id))))
    assert ingest._next_ready(everything=False, limit=1, shard=None, after="") == ([first], first)
    assert ingest.ready_traces(limit=1, after=first) == [second]
    assert ingest.ready_traces(limit=5) == [first, second]


def test_a_trace_larger_than_a_page_is_looked_at_whole(store: EventStore) -> None:
    ingest = OtlpIngest(store, default_redactor(), settle_seconds=0.0)
    big = "3" * 32
    ingest.receive(decode_document(request(*_trace(big, 24))))  # 25 spans > 10
    assert ingest._next_ready(everything=False, limit=1, shard=None, after="") == ([big], big)
    assert ingest.assemble().runs == 1 and ingest.pending() == (0, 0)


def test_sharded_look_ups_split_the_ready_traces_between_assemblers(store: EventStore) -> None:
    ingest = OtlpIngest(store, default_redactor(), settle_seconds=0.0)
    rng = random.Random(41)
    traces = [agent_trace(rng) for _ in range(40)]
    for spans in traces:
        ingest.receive(decode_document(request(*spans)))
    ids = sorted(spans[0]["traceId"] for spans in traces)
    shards = [ingest.ready_traces(limit=2, shard=(i, 3)) for i in range(3)]  # pages of 60 spans
    assert all(len(found) == 2 for found in shards)
    whole = [ingest.ready_traces(limit=100, shard=(i, 3)) for i in range(3)]
    assert sorted(t for found in whole for t in found) == ids
    for i, found in enumerate(whole):
        assert all(int(t[-1], 16) % 3 == i for t in found) and found[:2] == shards[i]
