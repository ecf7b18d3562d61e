"""A replay matches each request by its fingerprint before redacting it (issue 34, speed): a
request that held no secret is served without being redacted, one that held a secret goes the
full way -- and no secret is ever stored, in the recording or in its replay."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from steplog import EventStore, model_call, record_run, register_agent, step, tool_call
from steplog.bench.redact import EXAMPLES
from steplog.recorder.divergence import Divergence
from steplog.recorder.playback import Playback
from steplog.redaction import MASK, builtin_redactor
from steplog.replay import replay
from steplog.store import StoredEvent

SECRET = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0KLMN"  # assembled: this file holds no live token
TOKEN = "tok-" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2"
SWITCH: dict[str, str] = {}


@model_call("exact-model")
def ask(prompt: str, api_key: str | None = None) -> dict[str, str]:
    return {"text": prompt.upper()}


@tool_call("exact-tool")
def look_up(query: str, limit: int = 2) -> list[str]:
    return [f"{query}-{i}" for i in range(limit)]


@register_agent("exact-match-agent")
def agent(task: str) -> dict[str, object]:
    with step("ask") as s:
        clean = ask(f"{task}: {SWITCH.get('words', 'plain words')}")
        keyed = ask(f"{task}: with a key", api_key=TOKEN)  # a secret-named argument
        prose = ask(f"{task}: the key is {SECRET}")  # a secret inside the text
        s.output = {"answers": [clean["text"], keyed["text"], prose["text"]]}
    with step("look") as s:
        s.output = {"found": look_up(task) + look_up(task, limit=1)}
    return {"done": True}


def _record(store: EventStore, task: str) -> str:
    with record_run(
        "exact-match", model_version="m-1", agent="exact-match-agent", input={"task": task},
        store=store, seed=1,
    ) as run:  # fmt: skip
        run.output = agent(task)
    return run.run_id


def test_requests_with_and_without_secrets_replay_and_no_secret_is_stored(
    tmp_path: Path,
) -> None:
    path = tmp_path / "exact.db"
    store = EventStore.open(f"sqlite:///{path}")
    try:
        run_id = _record(store, "t1")
        result = replay(store, run_id)
        assert result.identical, (result.summary, result.divergence)
        assert replay(store, run_id, check=True).identical
        requests = [e.payload["request"] for e in store.read_run(run_id) if e.type == "ModelCalled"]
        assert requests[1]["kwargs"]["api_key"] == MASK
        assert MASK in requests[2]["args"][0]
    finally:
        store.close()
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("exact.db"))
    for secret in (SECRET, TOKEN):
        assert secret.encode() not in stored
        assert base64.b64encode(secret.encode())[:16] not in stored


def test_a_clean_request_is_matched_raw_and_a_secret_one_only_redacted(tmp_path: Path) -> None:
    store = EventStore.open(f"sqlite:///{tmp_path}/exact.db")
    try:
        events = store.read_run(_record(store, "t2"))
    finally:
        store.close()
    redact = builtin_redactor().value
    clean = {"args": ["t2: plain words"], "kwargs": {}}
    keyed = {"args": ["t2: with a key"], "kwargs": {"api_key": TOKEN}}
    prose = {"args": [f"t2: the key is {SECRET}"], "kwargs": {}}
    playback = Playback(events)
    served = playback.take_exact("ModelCalled", 0, "exact-model", clean)
    assert served is not None and served["response"] == {"text": "T2: PLAIN WORDS"}
    for raw in (keyed, prose):  # its fingerprint is of the redacted request: not matched raw
        assert playback.take_exact("ModelCalled", 0, "exact-model", raw) is None
        taken = playback.take("ModelCalled", 0, name="exact-model", request=redact(raw))
        assert taken["request"] == redact(raw)
    changed = {"args": ["t2: other words"], "kwargs": {}}
    assert Playback(events).take_exact("ModelCalled", 0, "exact-model", changed) is None
    with pytest.raises(Divergence, match="request"):
        Playback(events).take("ModelCalled", 0, name="exact-model", request=redact(changed))
    # identical calls are served in recorded order, the n-th call the n-th answer
    again = Playback(events)
    first = again.take_exact("ToolCalled", 1, "exact-tool", {"args": ["t2"], "kwargs": {}})
    second = again.take_exact(
        "ToolCalled", 1, "exact-tool", {"args": ["t2"], "kwargs": {"limit": 1}}
    )
    assert first is not None and second is not None
    assert (first["result"], second["result"]) == (["t2-0", "t2-1"], ["t2-0"])


def test_a_changed_request_still_diverges_at_its_call(tmp_path: Path) -> None:
    store = EventStore.open(f"sqlite:///{tmp_path}/exact.db")
    try:
        run_id = _record(store, "t3")
        SWITCH["words"] = "other words"
        try:
            result = replay(store, run_id, check=True)
        finally:
            SWITCH.clear()
    finally:
        store.close()
    assert not result.identical
    assert result.divergence is not None and result.divergence["step_index"] == 0
    assert "exact-model" in str(result.divergence) and "request" in str(result.divergence)


@model_call("echo-model")
def echo(prompt: str) -> dict[str, str]:
    return {"text": prompt}


@register_agent("exact-kinds-agent")
def kinds_agent(kinds: list[str]) -> dict[str, object]:
    with step("every kind") as s:
        answers = [echo(f"use {EXAMPLES[kind]} now")["text"] for kind in kinds]
        s.output = {"answers": len(answers)}  # a secret it echoed would be a served [REDACTED]
    return {"done": True}


def _kinds_replayed(tmp_path: Path, kinds: list[str]) -> list[StoredEvent]:
    store = EventStore.open(f"sqlite:///{tmp_path}/kinds.db")
    try:
        with record_run(
            "exact-kinds", model_version="m-1", agent="exact-kinds-agent",
            input={"kinds": kinds}, store=store, seed=1,
        ) as run:  # fmt: skip
            run.output = kinds_agent(kinds)
        result = replay(store, run.run_id, check=True)
        assert result.identical, (result.summary, result.divergence)
        return store.read_run(run.run_id)
    finally:
        store.close()


def test_every_kind_of_secret_in_a_request_replays_and_is_never_matched_raw(
    tmp_path: Path,
) -> None:
    """A raw request matches only a recorded request it equals (no reliance on redaction
    being idempotent), and every request that held a secret goes the full way."""
    kinds = sorted(EXAMPLES)
    playback = Playback(_kinds_replayed(tmp_path, kinds))
    for kind in kinds:
        raw = {"args": [f"use {EXAMPLES[kind]} now"], "kwargs": {}}
        assert playback.take_exact("ModelCalled", 0, "echo-model", raw) is None, kind


def test_a_request_equal_to_the_recorded_redacted_one_is_matched_raw(tmp_path: Path) -> None:
    """A request that *is* the recorded, redacted one (an agent replaying what it was served)
    is matched raw: it is what the recording holds. Redacting it again changes nothing either
    (redaction is idempotent: ``Authorization: token [REDACTED]`` keeps its scheme word)."""
    example = EXAMPLES["authorization_header"]
    events = _kinds_replayed(tmp_path, ["authorization_header"])
    kept = next(e.payload["request"] for e in events if e.type == "ModelCalled")
    assert example not in kept["args"][0] and MASK in kept["args"][0]
    redact = builtin_redactor().value
    assert redact(kept) == kept  # redacting the recorded form again changes nothing
    served = Playback(events).take_exact("ModelCalled", 0, "echo-model", kept)
    assert served is not None and served["request"] == kept
