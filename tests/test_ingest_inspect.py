"""Importing Inspect AI logs: real logs written by inspect-ai with mockllm (see helpers)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
import zipfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from steplog.compare import compare
from steplog.errors import SteplogError
from steplog.events import RunStarted
from steplog.ingest.inspect import (
    _exception_of,
    _is_correct,
    _Log,
    _SampleMapper,
    import_inspect,
    run_id_for,
)
from steplog.ingest.redaction import default_redactor
from steplog.projections.queries import list_failures, list_runs, refresh
from steplog.projections.run_state import fold
from steplog.store import EventStore

pytest.importorskip("inspect_ai")

from helpers.inspect_logs import (
    BASELINE,
    CANDIDATE,
    EPOCHS,
    SAMPLES,
    SECRET,
    TASK,
    generate_logs,
)

REDACTOR = default_redactor()
RUNS_PER_LOG = len(SAMPLES) * EPOCHS
Logs = dict[str, dict[str, Path]]


@pytest.fixture(scope="session")
def inspect_logs(tmp_path_factory: pytest.TempPathFactory) -> Logs:
    """The logs, written once per test session (shared by xdist workers through a lock)."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = root / "inspect-logs"
    done = root / "inspect-logs.json"
    with (root / "inspect-logs.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            written = generate_logs(folder)
            as_text = {m: {k: str(p) for k, p in v.items()} for m, v in written.items()}
            done.write_text(json.dumps(as_text))
        loaded = json.loads(done.read_text())
    return {model: {k: Path(p) for k, p in paths.items()} for model, paths in loaded.items()}


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[EventStore]:
    """For tests of file handling, which does not depend on the engine."""
    opened = EventStore.open(f"sqlite:///{tmp_path}/files.db")
    yield opened
    opened.close()


@pytest.fixture
def imported(store: EventStore, inspect_logs: Logs) -> EventStore:
    for model in (BASELINE, CANDIDATE):
        report = import_inspect(store, inspect_logs[model]["eval"], redactor=REDACTOR)
        assert report.quarantined == [], report.as_dict()
    refresh(store)
    return store


def _events(store: EventStore) -> Iterator[tuple[str, str, dict[str, object]]]:
    for event in store.read_all():
        yield event.run_id, event.type, event.payload


def _run(eval_log: Path, sample: str, epoch: int = 1) -> str:
    """The run id an imported sample gets."""
    from inspect_ai.log import read_eval_log

    eval_id = read_eval_log(str(eval_log), header_only=True).eval.eval_id
    return run_id_for(eval_id, sample, epoch)


# --- the mapping -----------------------------------------------------------------------------


def test_samples_become_runs_with_the_right_outcomes(store: EventStore, inspect_logs: Logs) -> None:
    seen: list[tuple[int, int]] = []
    report = import_inspect(
        store,
        inspect_logs[BASELINE]["eval"],
        redactor=REDACTOR,
        on_progress=lambda done, total: seen.append((done, total)),
    )
    assert report.runs == RUNS_PER_LOG and report.already_stored == 0
    assert report.appended == store.last_position() and report.quarantined == []
    assert seen[-1] == (RUNS_PER_LOG, RUNS_PER_LOG)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)

    refresh(store)
    runs = list_runs(store, scenario=TASK, limit=100)
    outcome = Counter((r.task_instance_id, r.status) for r in runs)
    assert outcome == {
        ("sum", "completed"): EPOCHS,
        ("lookup", "completed"): EPOCHS,
        ("wrong", "failed"): EPOCHS,
        ("delete", "failed"): EPOCHS,
        ("crash", "failed"): EPOCHS,
        ("budget", "aborted"): EPOCHS,
    }
    assert {r.model_version for r in runs} == {BASELINE}
    assert {r.source for r in runs} == {"inspect"}
    assert {r.seed for r in runs} == set(range(1, EPOCHS + 1))
    by_instance = {r.task_instance_id: r for r in runs}
    assert by_instance["sum"].task_type == "arithmetic"
    assert by_instance["delete"].task_type is None
    assert by_instance["sum"].tokens == 50  # two turns of 20 in + 5 out
    assert by_instance["budget"].error_type == "run_token_budget"

    # a tool error is a failed attempt of its turn; the model recovers in the next turn
    lookup = fold(store.read_run(_run(inspect_logs[BASELINE]["eval"], "lookup")))
    assert [s.name for s in lookup.steps] == ["call lookup", "answer"]
    assert lookup.steps[0].failed_attempts == 1 and lookup.steps[0].status == "done"
    assert lookup.steps[0].last_error_type == "tool_error"
    assert lookup.first_step_correct is False and lookup.retries == 0
    assert (lookup.model_calls, lookup.tool_calls) == (2, 1)
    lookup_events = store.read_run(_run(inspect_logs[BASELINE]["eval"], "lookup"))
    (call,) = [e.payload for e in lookup_events if e.type == "ToolCalled"]
    assert (call["tool"], call["args"], call["status"]) == ("lookup", {"key": "atlantis"}, "error")
    assert "no record for 'atlantis'" in call["error"]

    delete_events = store.read_run(_run(inspect_logs[BASELINE]["eval"], "delete"))
    types = [e.type for e in delete_events]
    assert types == [
        "RunStarted",
        "StepStarted",
        "ModelCalled",
        "ApprovalRequested",
        "ApprovalDecided",
        "ToolCalled",
        "StepCompleted",
        "StepStarted",
        "ModelCalled",
        "StepCompleted",
        "RunFailed",
    ]
    decided = next(e.payload for e in delete_events if e.type == "ApprovalDecided")
    assert decided["approved"] is False and decided["decided_by"] == "auto"
    tool = next(e.payload for e in delete_events if e.type == "ToolCalled")
    assert tool["status"] == "error" and tool["error_type"] == "tool_approval"
    failed = delete_events[-1].payload
    assert failed["error_type"] == "IncorrectAnswer" and failed["step"] == "answer"
    assert '"no"' in failed["message"]
    times = [e.recorded_at for e in delete_events]
    assert times == sorted(times)

    started = RunStarted.model_validate(delete_events[0].payload)
    assert started.scenario == TASK and started.model_version == BASELINE
    assert started.agent == "use_tools+generate" and started.config.run_token_budget == 5000
    assert started.input["input"] == "Clean up /tmp/x" and started.input["target"] == "done"


def test_failure_library_groups_inspect_failures(imported: EventStore) -> None:
    failures = list_failures(imported, scenario=TASK)
    groups = {(f.step, f.error_type): f for f in failures}
    assert set(groups) == {
        ("answer", "IncorrectAnswer"),
        ("generate", "RuntimeError"),
        ("answer", "run_token_budget"),
    }
    wrong = groups[("answer", "IncorrectAnswer")]
    # wrong answers to different questions are one failure: the answers are masked
    assert wrong.counts_by_version == {BASELINE: 2 * EPOCHS, CANDIDATE: EPOCHS}
    assert wrong.message == "match scored I (answer <str>; explanation <str>)"
    crash = groups[("generate", "RuntimeError")]
    assert crash.message == "mock backend exploded"
    assert crash.counts_by_version == {BASELINE: EPOCHS, CANDIDATE: EPOCHS}
    assert groups[("answer", "run_token_budget")].count == 2 * EPOCHS


def test_compare_pairs_inspect_runs_by_sample_and_epoch(imported: EventStore) -> None:
    report = compare(imported, baseline=BASELINE, candidate=CANDIDATE, scenario=TASK).as_dict()
    assert report["baseline"]["runs"] == RUNS_PER_LOG
    assert report["baseline"]["completed"] == 2 * EPOCHS
    assert report["candidate"]["completed"] == 3 * EPOCHS
    assert report["pairing"]["matched_items"] == RUNS_PER_LOG
    assert report["paired"]["candidate_only"] == EPOCHS
    assert report["paired"]["baseline_only"] == 0


# --- idempotence and files -------------------------------------------------------------------


def test_reimport_and_the_json_twin_add_nothing(store: EventStore, inspect_logs: Logs) -> None:
    logs = inspect_logs[BASELINE]
    first = import_inspect(store, logs["eval"], redactor=REDACTOR)
    position = store.last_position()
    again = import_inspect(store, logs["eval"], redactor=REDACTOR)
    twin = import_inspect(store, logs["json"], redactor=REDACTOR)
    assert again.appended == twin.appended == 0
    assert again.already_stored == twin.already_stored == first.appended
    assert again.runs == twin.runs == RUNS_PER_LOG
    assert store.last_position() == position


def test_directory_import_reads_every_log_and_skips_a_bad_file(
    sqlite_store: EventStore, inspect_logs: Logs, tmp_path: Path
) -> None:
    nested = tmp_path / "logs" / "nested"
    nested.mkdir(parents=True)
    shutil.copy(inspect_logs[BASELINE]["eval"], tmp_path / "logs")
    shutil.copy(inspect_logs[CANDIDATE]["json"], nested)
    (nested / "notes.json").write_text('{"not": "a log"}')
    (tmp_path / "logs" / "logs.json").write_text("{}")  # Inspect's manifest: not a log
    seen: list[tuple[int, int]] = []
    report = import_inspect(
        sqlite_store, tmp_path / "logs", redactor=REDACTOR, on_progress=lambda *p: seen.append(p)
    )
    assert report.runs == 2 * RUNS_PER_LOG
    assert seen[-1] == (2 * RUNS_PER_LOG, 2 * RUNS_PER_LOG)
    (bad,) = report.quarantined
    assert bad.location == str(nested / "notes.json")
    assert "not a readable Inspect AI log" in bad.reason
    (kept,) = sqlite_store.quarantined()
    assert kept.source == f"inspect:{nested / 'notes.json'}"


def test_unreadable_files_are_clear_errors(
    sqlite_store: EventStore, inspect_logs: Logs, tmp_path: Path
) -> None:
    truncated = tmp_path / "truncated.eval"
    truncated.write_bytes(inspect_logs[BASELINE]["eval"].read_bytes()[:5000])
    not_a_log = tmp_path / "results.json"
    not_a_log.write_text('{"accuracy": 0.5}')
    cut_json = tmp_path / "cut.json"
    cut_json.write_bytes(inspect_logs[BASELINE]["json"].read_bytes()[:20000])
    for path in (truncated, not_a_log, cut_json):
        with pytest.raises(SteplogError, match="not a readable Inspect AI log") as caught:
            import_inspect(sqlite_store, path, redactor=REDACTOR)
        assert str(path) in str(caught.value) and "Traceback" not in str(caught.value)
    with pytest.raises(SteplogError, match="no such file"):
        import_inspect(sqlite_store, tmp_path / "missing.eval", redactor=REDACTOR)
    text = tmp_path / "log.txt"
    text.write_text("x")
    with pytest.raises(SteplogError, match=r"expected a \.eval or \.json"):
        import_inspect(sqlite_store, text, redactor=REDACTOR)
    assert sqlite_store.last_position() == 0 and sqlite_store.quarantined() == []


def test_missing_inspect_ai_is_a_clear_error(
    sqlite_store: EventStore, inspect_logs: Logs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "inspect_ai.log", None)
    with pytest.raises(SteplogError, match=r"pip install 'steplog\[inspect\]'"):
        import_inspect(sqlite_store, inspect_logs[BASELINE]["eval"], redactor=REDACTOR)


# --- bad samples never cost the good ones ----------------------------------------------------


def test_a_bad_sample_in_a_json_log_is_quarantined(
    sqlite_store: EventStore, inspect_logs: Logs, tmp_path: Path
) -> None:
    log = json.loads(inspect_logs[BASELINE]["json"].read_text())
    bad = next(s for s in log["samples"] if s["id"] == "sum" and s["epoch"] == 1)
    bad["epoch"] = "first"  # not an int: Inspect refuses the sample (and so the whole log)
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(log))
    report = import_inspect(sqlite_store, edited, redactor=REDACTOR)
    assert report.runs == RUNS_PER_LOG - 1
    (rejected,) = report.quarantined
    assert rejected.location == "sample sum epoch first"
    assert "epoch" in rejected.reason
    (kept,) = sqlite_store.quarantined()
    assert kept.source == f"inspect:{edited}" and '"What is 2 + 2?' in kept.raw
    assert SECRET not in kept.raw and "[REDACTED]" in kept.raw


def test_a_corrupt_sample_in_an_eval_log_is_quarantined(
    sqlite_store: EventStore, inspect_logs: Logs, tmp_path: Path
) -> None:
    damaged = tmp_path / "damaged.eval"
    with (
        zipfile.ZipFile(inspect_logs[BASELINE]["eval"]) as source,
        zipfile.ZipFile(damaged, "w") as target,
    ):
        for item in source.infolist():
            data = source.read(item)
            if item.filename == "samples/wrong_epoch_2.json":
                data = data[: len(data) // 2]
            target.writestr(item, data)
    report = import_inspect(sqlite_store, damaged, redactor=REDACTOR)
    assert report.runs == RUNS_PER_LOG - 1
    (rejected,) = report.quarantined
    assert rejected.location == "sample wrong epoch 2"
    assert rejected.reason.startswith("unreadable sample")


def test_a_run_the_store_refuses_is_quarantined(store: EventStore, inspect_logs: Logs) -> None:
    taken = _run(inspect_logs[BASELINE]["eval"], "sum")
    store.append(
        taken, [RunStarted(scenario="other", model_version="x", agent="x")], expected_version=0
    )
    report = import_inspect(store, inspect_logs[BASELINE]["eval"], redactor=REDACTOR)
    assert report.runs == RUNS_PER_LOG - 1
    (rejected,) = report.quarantined
    assert rejected.location == "sample sum epoch 1"
    assert "already stored with different events" in rejected.reason
    assert SECRET not in rejected.raw


def test_secrets_never_reach_the_store(imported: EventStore) -> None:
    payloads = [json.dumps(p) for _, _, p in _events(imported)]
    assert not any(SECRET in text for text in payloads)
    assert sum("[REDACTED]" in text for text in payloads) >= 2 * EPOCHS * 2  # input + request


# --- endings the demo task does not produce --------------------------------------------------


def test_other_endings(inspect_logs: Logs) -> None:
    import inspect_ai.log as api

    path = inspect_logs[BASELINE]["eval"]
    log = _Log.open(api, path)

    def mapped(sample: object) -> list[tuple[str, dict[str, object]]]:
        return [(e.event.type_name(), e.event.model_dump()) for e in _SampleMapper(
            log, sample, REDACTOR).events()]  # fmt: skip

    crash = api.read_eval_log_sample(str(path), "crash", 1)
    before_any_call = mapped(crash.model_copy(update={"events": []}))
    assert [t for t, _ in before_any_call] == ["RunStarted", "RunFailed"]
    assert before_any_call[-1][1]["step"] is None
    assert before_any_call[-1][1]["error_type"] == "RuntimeError"

    answered = api.read_eval_log_sample(str(path), "sum", 1)
    limit = api.EvalSampleLimit(type="message", limit=4, reason="Message limit exceeded")
    limited = mapped(answered.model_copy(update={"limit": limit}))
    assert [t for t, _ in limited][-2:] == ["BudgetExceeded", "RunAborted"]
    assert (limited[-2][1]["budget"], limited[-2][1]["limit"]) == ("max_messages", 4)
    assert limited[-1][1]["step"] == "answer"
    assert "message limit" in str(limited[-1][1]["reason"])
    operator = api.EvalSampleLimit(type="operator", limit=1, reason="stopped by the operator")
    stopped = mapped(answered.model_copy(update={"limit": operator}))
    assert [t for t, _ in stopped][-2:] == ["ModelCalled", "RunAborted"]  # no budget fits

    unscored = mapped(answered.model_copy(update={"scores": None}))
    assert unscored[-1][0] == "RunCompleted" and unscored[-1][1]["output"] == {"answer": "4"}


# --- pure helpers ----------------------------------------------------------------------------


def test_run_ids_are_printable_bounded_and_distinct() -> None:
    assert run_id_for("E1", "sum", 2) == "inspect-E1-sum-e2"
    long_a, long_b = "x" * 300 + "a", "x" * 300 + "b"
    ids = {run_id_for("E1", s, 1) for s in (long_a, long_b, "a\nb", "a\tb")}
    assert len(ids) == 4
    assert all(len(i) <= 255 and i.isprintable() for i in ids)


@pytest.mark.parametrize(
    ("value", "correct"),
    [("C", True), ("I", False), ("P", False), (1, True), (0, False), (0.5, False),
     (True, True), ("yes", True), ({"a": "C", "b": 1}, True), ({"a": "C", "b": "I"}, False),
     (None, None)],
)  # fmt: skip
def test_score_values(value: object, correct: bool | None) -> None:
    assert _is_correct(value) is correct


def test_exception_types_from_inspect_errors() -> None:
    assert _exception_of("RuntimeError('boom')", "") == ("RuntimeError", "boom")
    assert _exception_of("httpx.ReadTimeout('late')", "") == ("ReadTimeout", "late")
    traceback = 'Traceback:\n  File "x.py", line 1\n    f()\nValueError: bad input\n'
    assert _exception_of("bad input", traceback) == ("ValueError", "bad input")
    assert _exception_of("", "") == ("SampleError", "the sample failed")


def test_import_inspect_command(store_url: str, inspect_logs: Logs, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from steplog.cli import app

    cli = CliRunner()
    log = inspect_logs[BASELINE]["eval"]
    result = cli.invoke(app, ["import", "inspect", str(log), "--db", store_url, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["runs"] == RUNS_PER_LOG and report["quarantined"] == 0
    again = cli.invoke(app, ["import", "inspect", str(log), "--db", store_url, "--json"])
    assert json.loads(again.stdout)["appended"] == 0
    failures = cli.invoke(app, ["failures", "--db", store_url, "--json"])
    assert any(f["scenario"] == TASK for f in json.loads(failures.stdout)["signatures"])
    bad = tmp_path / "results.json"
    bad.write_text('{"accuracy": 0.5}')
    result = cli.invoke(app, ["import", "inspect", str(bad), "--db", store_url])
    assert result.exit_code == 1
    assert "not a readable Inspect AI log" in result.stderr and "Traceback" not in result.output


# --- an imported sample replayed against the user's own agent (issue 14, item 5) ---------------


def _inspect_like_agent(shift: int = 0) -> object:
    """The solver the logs came from, written as a user's agent: a tool turn, then the answer."""
    from steplog import model_call, step, tool_call

    @model_call(BASELINE)
    def generate(messages: list[str]) -> dict[str, object]:
        raise AssertionError("a replay must serve the model, not call it")

    @tool_call("add")
    def add(a: int, b: int) -> str:
        raise AssertionError("a replay must serve the tool, not run it")

    def agent(input: str, **_: object) -> dict[str, object]:
        with step("turn 0") as s:
            reply = generate([input])
            results = [
                add(**{k: int(v) + shift for k, v in call["arguments"].items()})
                for call in reply["tool_calls"]
            ]
            s.output = {"results": results}
        with step("turn 1") as s:
            s.output = {"answer": generate([input, *results])["content"]}
        return dict(s.output)

    return agent


def test_an_imported_sample_replays_against_a_registered_agent(
    imported: EventStore, inspect_logs: Logs
) -> None:
    from steplog import register_agent
    from steplog.replay import replay

    run_id = _run(inspect_logs[BASELINE]["eval"], "sum")
    register_agent("inspect-solver")(_inspect_like_agent())
    with pytest.raises(SteplogError, match="replay it against your registered agent"):
        replay(imported, run_id)
    result = replay(imported, run_id, agent="inspect-solver")
    assert result.identical and result.status == "completed", result.summary
    replayed = fold(imported.read_run(result.run_id))
    assert replayed.values["turn 0"] == {"results": ["4"]}  # the recorded tool result, served
    assert replayed.values["turn 1"] == {"answer": "4"}

    register_agent("inspect-solver")(_inspect_like_agent(shift=1))  # a changed tool argument
    changed = replay(imported, run_id, agent="inspect-solver")
    assert changed.divergence is not None, changed.summary
    assert (changed.divergence["step_index"], changed.divergence["call_index"]) == (0, 1)
    assert changed.divergence["expected"].startswith("ToolCalled(add, step 0")
