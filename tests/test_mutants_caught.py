"""Regression tests for deliberate bugs an audit planted that the suite did not notice (issue 20).

Each test here was checked by planting its bug and watching it fail (tests/mutation/
run_mutants.py keeps those mutants and re-checks them outside the default suite):

* ``--confidence`` ignored (Wilson always at 95%), through ``steplog compare`` on a store;
* replay's "fewer calls than recorded" check removed, in harness and SDK replays;
* UUID masking dropped from failure signatures;
* OTLP storage errors swallowed and answered 200: a real write lock held by another connection
  on SQLite and on PostgreSQL, against a real ``steplog serve``.
"""

from __future__ import annotations

import json
import math
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from statistics import NormalDist
from typing import Any

import pytest
from helpers.children import reap, spawn
from helpers.otlp import agent_trace, request
from helpers.scenarios import write_scenario
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from steplog.cli import app
from steplog.harness.runner import start_run
from steplog.harness.scenario import get_scenario
from steplog.projections.signature import normalize_message, signature_of
from steplog.replay import replay
from steplog.store import EventStore

runner = CliRunner()


def wilson_by_hand(x: int, n: int, confidence: float) -> tuple[float, float]:
    """Wilson (1927) as Newcombe (1998a, Stat Med 17:857-872) eq. 3 writes it; at 95% it gives
    Newcombe's Table I limits (tests/test_published_examples.py checks that)."""
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    centre, spread = 2 * x + z * z, z * math.sqrt(z * z + 4 * x * (1 - x / n))
    return (centre - spread) / (2 * (n + z * z)), (centre + spread) / (2 * (n + z * z))


# --- 1. --confidence through `steplog compare` ------------------------------------------------


@pytest.fixture(scope="module")
def counted_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """1/29 completed runs of v-base and 20/29 of v-cand, every run its own task instance (so
    the completion intervals are plain Wilson: Newcombe 1998a's 1/29 example)."""
    from steplog import record_run, step

    url = f"sqlite:///{tmp_path_factory.mktemp('conf')}/conf.db"
    store = EventStore.open(url)
    for version, completed in (("v-base", 1), ("v-cand", 20)):
        for i in range(29):
            try:
                with (
                    record_run(
                        "counted",
                        model_version=version,
                        task_instance_id=f"{version}-{i}",
                        seed=i,
                        store=store,
                    ),
                    step("only"),
                ):
                    if i >= completed:
                        raise RuntimeError("failed on purpose")
            except RuntimeError:
                pass
    store.close()
    return url


def _compare(url: str, *extra: str) -> dict[str, Any]:
    result = runner.invoke(
        app,
        [
            *("compare", "--baseline", "v-base", "--candidate", "v-cand", "--paired", "off"),
            *("--db", url, "--json", *extra),
        ],
    )
    assert result.exit_code == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


@pytest.mark.parametrize("confidence", [0.90, 0.99])
def test_compare_cli_uses_the_confidence_it_is_given(counted_store: str, confidence: float) -> None:
    report = _compare(counted_store, "--confidence", str(confidence))
    assert report["confidence"] == confidence
    base, cand = report["baseline"], report["candidate"]
    assert (base["completed"], base["runs"], cand["completed"], cand["runs"]) == (1, 29, 20, 29)
    assert base["ci_method"] == cand["ci_method"] == "wilson"
    assert base["ci"] == pytest.approx(list(wilson_by_hand(1, 29, confidence)), abs=1e-9)
    assert cand["ci"] == pytest.approx(list(wilson_by_hand(20, 29, confidence)), abs=1e-9)
    # Newcombe's hybrid difference at the same level, from the same hand limits
    p1, p2 = 20 / 29, 1 / 29
    (l1, u1), (l2, u2) = wilson_by_hand(20, 29, confidence), wilson_by_hand(1, 29, confidence)
    low = p1 - p2 - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    high = p1 - p2 + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    assert report["difference"]["ci"] == pytest.approx([low, high], abs=1e-9)


def test_compare_cli_default_is_newcombes_95_percent(counted_store: str) -> None:
    report = _compare(counted_store)
    assert [round(v, 4) for v in report["baseline"]["ci"]] == [0.0061, 0.1718]  # Table I


def test_compare_library_uses_the_confidence_it_is_given(counted_store: str) -> None:
    from steplog.compare import compare

    store = EventStore.open(counted_store)
    try:
        report = compare(
            store, baseline="v-base", candidate="v-cand", paired_mode="off", confidence=0.90
        ).as_dict()
    finally:
        store.close()
    assert report["baseline"]["ci"] == pytest.approx(list(wilson_by_hand(1, 29, 0.90)), abs=1e-9)


# --- 2. replay: fewer calls than recorded -----------------------------------------------------


def test_harness_replay_that_makes_fewer_calls_records_replay_diverged(
    store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "scenarios"
    wrap = '\n[[steps]]\nname = "wrap"\nfields = ["w"]\n'
    path = write_scenario(folder, steps=2, extra_step=wrap)
    monkeypatch.setenv("STEPLOG_SCENARIOS", str(folder))
    original = start_run(
        store, get_scenario("drill"), instance_id="case-1", model_version="sim-v2", seed=2
    )
    recorded = [e for e in store.read_run(original.run_id) if e.type == "ModelCalled"]
    assert recorded[-1].payload["step_index"] == 3  # `wrap` called the model
    path.write_text(path.read_text().replace(wrap, "\n"))  # the code no longer has `wrap`
    result = replay(store, original.run_id)
    assert result.identical is False
    assert result.divergence is not None, result.summary
    assert result.divergence["step_index"] == 3
    assert result.divergence["got"] == "the end of the run"
    assert "ModelCalled" in result.divergence["expected"]
    stored = [e.payload for e in store.read_run(result.run_id) if e.type == "ReplayDiverged"]
    assert stored == [result.divergence]


def test_sdk_replay_that_skips_a_whole_step_or_a_run_level_call_records_replay_diverged(
    tmp_path: Path,
) -> None:
    from steplog import model_call, record_run, register_agent, step

    store = EventStore.open(f"sqlite:///{tmp_path}/sdk.db")

    @model_call("planner")
    def plan(prompt: str) -> dict[str, str]:
        return {"plan": prompt}

    def agent_of(steps: int, closing_call: bool) -> Any:
        def agent(goal: str) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for index in range(steps):
                with step(f"s{index}") as s:
                    s.output = out = plan(f"{goal} {index}")
            if closing_call:
                out = plan(f"summary of {goal}")  # outside any step
            return out

        return agent

    def recorded(name: str, steps: int, closing_call: bool) -> str:
        agent = register_agent(name)(agent_of(steps, closing_call))
        with record_run(
            "sdk-fewer", model_version="m-1", agent=name, input={"goal": "g"}, store=store, seed=1
        ) as run:
            run.output = agent("g")
        return run.run_id

    try:
        cases = {
            # (recorded steps, closing call) -> (replayed steps, closing call), step_index
            "a-step-less": ((3, False), (2, False), 2),
            "no-closing-call": ((2, True), (2, False), None),
        }
        for name, (before, after, step_index) in cases.items():
            run_id = recorded(name, *before)
            register_agent(name)(agent_of(*after))
            result = replay(store, run_id)
            assert result.divergence is not None, (name, result.summary)
            assert result.divergence["step_index"] == step_index, name
            assert "ModelCalled(planner" in result.divergence["expected"], name
            events = store.read_run(result.run_id)
            stored = [e.payload for e in events if e.type == "ReplayDiverged"]
            assert stored == [result.divergence], name
    finally:
        store.close()


# --- 3. failure signatures mask UUIDs ---------------------------------------------------------

UUIDS = (
    "3f2b8c1e-9a4d-4e6f-8b7a-1c2d3e4f5a6b",
    "00000000-0000-0000-0000-000000000000",  # all digits: looks like numbers, is one id
    "12345678-1234-5678-9012-123456789012",
    "ABCDEF01-2345-4678-9ABC-DEF012345678",  # upper case
)


@pytest.mark.parametrize("uuid", UUIDS)
def test_a_uuid_is_masked_as_one_id(uuid: str) -> None:
    assert normalize_message(f"run {uuid} not found") == "run <id> not found"
    assert normalize_message(f"lost session {uuid}, retrying") == "lost session <id>, retrying"


def test_failures_differing_only_by_uuid_share_a_signature() -> None:
    signatures = {
        signature_of("support", "lookup", "KeyError", f"order {uuid} missing").id for uuid in UUIDS
    }
    assert len(signatures) == 1


def test_uuid_failures_group_into_one_library_signature(store: EventStore) -> None:
    """End to end: failed runs whose messages differ only by a UUID are one library entry."""
    from steplog import record_run, step
    from steplog.projections.queries import list_failures, refresh

    for i, uuid in enumerate(UUIDS):
        try:
            with (
                record_run("uuids", model_version="m", task_instance_id=f"t{i}", store=store),
                step("fetch"),
            ):
                raise LookupError(f"session {uuid} expired")
        except LookupError:
            pass
    refresh(store)
    failures = list_failures(store)
    assert len(failures) == 1, failures
    assert failures[0].count == len(UUIDS)
    assert failures[0].message == "session <id> expired"


# --- 4. OTLP: a held write lock is 503, never 200 ---------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def serve() -> Iterator[Callable[[str], int]]:
    """Start ``steplog serve --db URL`` (a real process); returns its port."""
    started: list[subprocess.Popen[str]] = []

    def start(url: str) -> int:
        port = _free_port()
        proc = spawn(
            [
                *(sys.executable, "-m", "steplog.cli", "serve", "--db", url),
                *("--port", str(port), "--settle", "0"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        assert f":{port}/v1/traces" in banner, (banner, proc.stderr.read() if proc.stderr else "")
        return port

    try:
        yield start
    finally:
        for proc in started:
            reap(proc, grace=30)


def _post(port: int, document: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/traces",
        data=json.dumps(document).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def _staged_and_stored(url: str) -> tuple[int, int]:
    store = EventStore.open(url)
    try:
        with store.engine.connect() as conn:
            staged = conn.execute(text("SELECT count(*) FROM otlp_spans")).scalar_one()
        return int(staged), store.last_position()
    finally:
        store.close()


def _wait_for(condition: Callable[[], bool], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def _check_503_then_200(url: str, port: int, hold: Callable[[], Callable[[], None]]) -> None:
    import random

    spans = agent_trace(random.Random(20))
    document = request(*spans)
    release = hold()
    try:
        status, headers, body = _post(port, document)
        assert status == 503, (status, body)
        assert headers.get("Retry-After") == "5"
        assert "retry later" in json.loads(body)["message"]
    finally:
        release()
    assert _staged_and_stored(url) == (0, 0)  # refused: nothing acknowledged, nothing kept
    status, _headers, body = _post(port, document)  # the exporter's retry
    assert status == 200, body
    _wait_for(lambda: _staged_and_stored(url)[1] > 0)  # the trace becomes a run
    store = EventStore.open(url)
    try:
        assert store.count_runs() == 1
    finally:
        store.close()


def test_sqlite_write_lock_held_elsewhere_is_503_never_200(
    tmp_path: Path, serve: Callable[[str], int]
) -> None:
    path = tmp_path / "otlp.db"
    EventStore.open(f"sqlite:///{path}").close()  # created and migrated
    url = f"sqlite:///{path}?timeout=1"  # wait 1 s for a lock, not the default 30
    port = serve(url)

    def hold() -> Callable[[], None]:
        holder = sqlite3.connect(path, isolation_level=None, timeout=30)
        holder.execute("BEGIN EXCLUSIVE")  # what an open sqlite3 shell or a long writer does
        return lambda: (holder.rollback(), holder.close())  # type: ignore[func-returns-value]

    _check_503_then_200(url, port, hold)


@pytest.mark.postgres
def test_postgres_table_lock_held_elsewhere_is_503_never_200(
    pg_schemas: Any, serve: Callable[[str], int]
) -> None:
    base = pg_schemas.new(migrate=True)
    # the server waits 1 s for a lock, then refuses (PostgreSQL's own lock_timeout)
    option = "options=-csearch_path%3D"
    url = base.replace(option, "options=-clock_timeout%3D1000%20-csearch_path%3D")
    assert url != base
    port = serve(url)

    def hold() -> Callable[[], None]:
        engine = create_engine(base)
        conn = engine.connect()
        transaction = conn.begin()
        conn.execute(text("LOCK TABLE otlp_spans IN EXCLUSIVE MODE"))  # blocks every insert

        def release() -> None:
            transaction.rollback()
            conn.close()
            engine.dispose()

        return release

    _check_503_then_200(url, port, hold)
