"""Bounded input at every importer (issue 21, item 1): nesting and size are checked before any
parser sees a document, a bad item is refused alone with the rest stored, and every importer runs
within a fixed address-space limit on hostile input."""

from __future__ import annotations

import fcntl
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers.children import reap, spawn
from helpers.otlp import agent_trace, request
from hypothesis import given, settings
from hypothesis import strategies as st

from steplog.harness.scenario import ScenarioError, load_scenario
from steplog.ingest.bounds import MAX_JSON_DEPTH, json_depth_error, nesting_error
from steplog.ingest.jsonl import import_jsonl
from steplog.ingest.otlp.files import read_documents
from steplog.ingest.otlp.pipeline import OtlpIngest, import_documents
from steplog.ingest.redaction import default_redactor
from steplog.store import EventStore

DEEP = "[" * 100_000 + "]" * 100_000  # 200 KB: took 23.8 GB in Inspect's reader before
ADDRESS_SPACE = 1024 * 1024 * 1024


def _event_line(run: str, seq: int, step: str) -> str:
    payload = {"step": step, "step_index": seq}
    return json.dumps({"run_id": run, "type": "StepStarted", "payload": payload, "seq": seq})


# --- the scanner, against an independent measure of depth ------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab,:'),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=30,
)


def _depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(json_values, st.integers(min_value=0, max_value=6))
def test_the_depth_scan_agrees_with_the_parsed_value(value: object, limit: int) -> None:
    encoded = json.dumps(value).encode()  # strings full of brackets and escaped quotes
    assert (json_depth_error(encoded, limit) is None) == (_depth(value) <= limit)


def test_toml_strings_and_comments_do_not_count() -> None:
    text = b"a = [[1]]\nb = \"[[[[[[\" \n# [[[[[[[\nc = '''[[[[[['''\n[[tables]]\nx = {y = [1]}\n"
    assert nesting_error(text, limit=3, toml=True) is None
    assert nesting_error(b"a = [[[[1]]]]", limit=3, toml=True) is not None


# --- each importer: the deep item refused alone ------------------------------------------------


def test_a_deep_jsonl_line_is_quarantined_and_its_neighbours_stored(
    store: EventStore, tmp_path: Path
) -> None:
    file = tmp_path / "events.jsonl"
    file.write_text(
        "\n".join([_event_line("run-a", 0, "one"), DEEP, _event_line("run-a", 1, "two")]) + "\n"
    )
    report = import_jsonl(store, file)
    assert report.appended == 2
    (bad,) = report.quarantined
    assert bad.location == "line 2"
    assert f"nested more than {MAX_JSON_DEPTH} levels" in bad.reason
    assert [e.payload["step"] for e in store.read_run("run-a")] == ["one", "two"]


def test_a_deep_otlp_json_line_is_quarantined_and_its_neighbours_stored(
    store: EventStore, tmp_path: Path
) -> None:
    file = tmp_path / "capture.jsonl"
    good = [json.dumps(request(*agent_trace(random.Random(n), instance=f"t{n}"))) for n in (1, 2)]
    file.write_text("\n".join([good[0], '{"resourceSpans": ' + DEEP + "}", good[1]]) + "\n")
    ingest = OtlpIngest(store, default_redactor(), source=f"otlp:{file}")
    report = import_documents(ingest, read_documents(file))
    assert report.runs == 2
    (bad,) = report.quarantined
    assert bad.location == "line 2" and "nested more than" in bad.reason


def test_a_deep_scenario_file_is_a_clear_error_naming_it(tmp_path: Path) -> None:
    file = tmp_path / "deep.toml"
    file.write_text("name = 'x'\nvalue = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ScenarioError, match=r"deep\.toml: not accepted: nested more than"):
        load_scenario(file)
    big = tmp_path / "big.toml"
    big.write_text("# " + "x" * (2 * 1024 * 1024))
    with pytest.raises(ScenarioError, match="larger than"):
        load_scenario(big)


Logs = dict[str, dict[str, Path]]


@pytest.fixture(scope="session")
def inspect_logs(tmp_path_factory: pytest.TempPathFactory) -> Logs:
    """The Inspect logs of test_ingest_inspect, written once per session (same files, lock)."""
    pytest.importorskip("inspect_ai")
    from helpers.inspect_logs import generate_logs

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, done = root / "inspect-logs", root / "inspect-logs.json"
    with (root / "inspect-logs.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            written = generate_logs(folder)
            as_text = {m: {k: str(p) for k, p in v.items()} for m, v in written.items()}
            done.write_text(json.dumps(as_text))
        loaded = json.loads(done.read_text())
    return {model: {k: Path(p) for k, p in paths.items()} for model, paths in loaded.items()}


def _with_one_deep_sample(source: Path, target: Path) -> str:
    """A copy of the ``.eval`` log ``source`` whose first sample member nests 100,000 deep."""
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(target, "w") as copy:
        members = [i.filename for i in original.infolist()]
        victim = sorted(m for m in members if m.startswith("samples/"))[0]
        for name in members:
            data = original.read(name)
            if name == victim:
                data = b'{"id": 1, "x": ' + DEEP.encode() + b"}"
            copy.writestr(name, data, compress_type=zipfile.ZIP_DEFLATED)
    return victim


def test_a_deep_sample_is_refused_alone_in_an_eval_log(
    inspect_logs: Logs, tmp_path: Path, store: EventStore
) -> None:
    from steplog.ingest.inspect import import_inspect

    source = next(iter(inspect_logs.values()))["eval"]
    target = tmp_path / "damaged.eval"
    victim = _with_one_deep_sample(source, target)
    report = import_inspect(store, target, redactor=default_redactor())
    (bad,) = report.quarantined
    assert victim in bad.reason and "nested more than" in bad.reason
    clean = import_inspect(store, source, redactor=default_redactor())
    assert report.runs == clean.runs - 1  # every other sample stored


# --- every importer under an address-space limit -----------------------------------------------


def _limited(
    args: list[str], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    process = spawn(
        [sys.executable, "-m", "steplog.cli", *args],
        preexec=limit,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        out, err = process.communicate(timeout=300)
    finally:
        reap(process)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def test_every_importer_stays_within_an_address_space_limit_on_hostile_input(
    tmp_path: Path, inspect_logs: Logs
) -> None:
    db = f"sqlite:///{tmp_path}/bounded.db"
    deep_json = tmp_path / "deep.json"
    deep_json.write_text('{"version": 2, "status": "success", "eval": ' + DEEP + "}")
    deep_eval = tmp_path / "deep.eval"
    _with_one_deep_sample(next(iter(inspect_logs.values()))["eval"], deep_eval)
    lines = tmp_path / "deep.jsonl"
    lines.write_text(
        "\n".join([_event_line("run-b", 0, "one"), DEEP, _event_line("run-b", 1, "two")]) + "\n"
    )
    otlp_lines = tmp_path / "deep-otlp.jsonl"
    good = json.dumps(request(*agent_trace(random.Random(7))))
    otlp_lines.write_text("\n".join([good, good, '{"resourceSpans": ' + DEEP + "}"]) + "\n")
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    (scenarios / "deep.toml").write_text("name = 'x'\nv = " + "[" * 100_000 + "]" * 100_000)
    runs = [
        (["import", "inspect", str(deep_json), "--db", db], "refused before parsing", None),
        (["import", "inspect", str(deep_eval), "--db", db], "nested more than", None),
        (["import", "jsonl", str(lines), "--db", db], "line 2: not stored", None),
        (["import", "otlp", str(otlp_lines), "--db", db], "line 3: not stored", None),
        (["scenarios"], "deep.toml: not accepted", {"STEPLOG_SCENARIOS": str(scenarios)}),
    ]
    for args, said, env in runs:
        done = _limited(args, env)
        assert done.returncode == 1, (args, done.stderr[-2000:])
        assert said in done.stderr, (args, done.stderr[-2000:])
        assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr, args
    shutil.rmtree(scenarios)


def test_import_otlp_counts_traces_a_running_receiver_assembled_first(
    store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``serve`` on the same database, its assembler may turn the file's traces into runs
    between staging and the import's own assembly; the report still counts them."""
    file = tmp_path / "capture.jsonl"
    lines = [json.dumps(request(*agent_trace(random.Random(n), instance=f"i{n}"))) for n in (1, 2)]
    file.write_text("\n".join(lines) + "\n")
    ingest = OtlpIngest(store, default_redactor(), source=f"otlp:{file}")
    own = ingest.assemble_traces

    def after_the_receiver(traces: list[str]) -> object:
        OtlpIngest(store, default_redactor()).assemble(everything=True)  # serve got there first
        return own(traces)

    monkeypatch.setattr(ingest, "assemble_traces", after_the_receiver)
    report = import_documents(ingest, read_documents(file))
    assert report.runs == 2
    assert report.appended == 0 and report.already_stored > 0


def test_serve_stays_within_an_address_space_limit_under_hostile_requests(tmp_path: Path) -> None:
    import gzip
    import socket
    import urllib.error
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    serve = spawn(
        [
            *(sys.executable, "-m", "steplog.cli", "serve"),
            *("--db", f"sqlite:///{tmp_path}/s.db", "--port", str(port)),
        ],
        preexec=limit,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert serve.stdout is not None and "/v1/traces" in serve.stdout.readline()
        url = f"http://127.0.0.1:{port}/v1/traces"

        def post(body: bytes, **headers: str) -> int:
            headers = {"Content-Type": "application/json", **headers}
            req = urllib.request.Request(url, data=body, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=60) as response:
                    return int(response.status)
            except urllib.error.HTTPError as exc:
                return exc.code

        bomb = gzip.compress(b" " * (300 * 1024 * 1024))  # 300 MB of whitespace, ~300 KB sent
        assert post(bomb, **{"Content-Encoding": "gzip"}) == 413
        assert post(b'{"resourceSpans": ' + DEEP.encode() + b"}") == 400
        with socket.create_connection(("127.0.0.1", port), timeout=60) as raw:
            raw.sendall(
                b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n-1\r\n" + b"x" * 65536
            )
            assert raw.recv(64).split()[1] == b"400"
        good = json.dumps(request(*agent_trace(random.Random(8)))).encode()
        assert post(good) == 200  # still serving
    finally:
        serve.terminate()
        try:
            _, err = serve.communicate(timeout=60)
        finally:
            reap(serve)
    assert serve.returncode == 0, err
    assert "MemoryError" not in err and "Traceback" not in err
