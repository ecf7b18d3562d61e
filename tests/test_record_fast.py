"""The recording fast paths give exactly what the general paths give: event ids, fingerprints,
and the harness's events built without re-validation."""

from __future__ import annotations

import datetime
import itertools
import json
import pickle
import random
import uuid
from collections.abc import Sequence
from hashlib import sha256
from typing import Any

import pytest

from steplog.canonical import fingerprint, fingerprint_str_keyed, jsonable
from steplog.events import Event
from steplog.harness.batch import plan_runs
from steplog.harness.runner import launch
from steplog.harness.scenario import get_scenario
from steplog.recorder.ids import new_ids
from steplog.store import AppendResult, EventStore, NewEvent


def test_ids_are_increasing_unique_uuid7s_whatever_the_batch_sizes() -> None:
    ids: list[uuid.UUID] = []
    for count in (1, 5, 3000, 5000, 4096, 4097, 0, 1, 2, 9000, 7):
        batch = new_ids(count)
        assert len(batch) == count
        ids += batch
    assert all(a.int < b.int for a, b in itertools.pairwise(ids))
    assert len(set(ids)) == len(ids)
    assert {(i.version, i.variant) for i in ids} == {(7, uuid.RFC_4122)}
    sample = ids[4321]
    assert uuid.UUID(str(sample)) == sample and pickle.loads(pickle.dumps(sample)) == sample
    now_ms = datetime.datetime.now(datetime.UTC).timestamp() * 1000
    assert abs((ids[0].int >> 80) - now_ms) < 60_000  # the timestamp is the clock's


def _reference(name: str, request: Any) -> str:
    """The fingerprint as first defined: json.dumps of the jsonable form."""
    text = json.dumps([name, jsonable(request)], sort_keys=True, separators=(",", ":"))
    return sha256(text.encode()).hexdigest()[:32]


def _values(seed: int) -> list[Any]:
    draw = random.Random(seed)
    values: list[Any] = [
        {"a": 1.0, "b": [1, 2, (3, 4)], "é": "ü\u0000\n\ud800", "z": None, "t": True},
        {"nan": float("nan"), "inf": float("inf"), "big": 10**30, "tiny": 1e-7, "neg": -0.0},
        {"when": datetime.date(2024, 1, 2), "at": datetime.datetime(2024, 1, 2, 3, 4, 5)},
        {"nested": {"z": 1, "a": {"y": [{"b": 2, "a": 1}]}}},
        {"object": object(), "bytes": b"ab"},
        [],
        "text",
        1.5,
        None,
    ]
    for _ in range(300):
        values.append(
            {
                str(draw.random()): [
                    draw.random() * 10 ** draw.randint(-20, 20),
                    draw.randint(-(10**20), 10**20),
                    chr(draw.randint(0, 0x2FFFF)),
                    {"k": draw.choice([True, False, None, "x"])},
                ]
                for _ in range(draw.randint(0, 5))
            }
        )
    return values


@pytest.mark.parametrize("seed", [1, 2])
def test_fingerprints_match_the_reference_form(seed: int) -> None:
    for value in _values(seed):
        expected = _reference("name", value)
        assert fingerprint("name", value) == expected
        assert fingerprint_str_keyed("name", value) == expected


class _Keeping(EventStore):
    """Keeps every event object handed to it, as built."""

    built: list[Event]

    def append_batch(
        self, run_id: str, events: Sequence[Event | NewEvent], expected_version: int | None = None
    ) -> AppendResult:
        self.built.extend(e.event if isinstance(e, NewEvent) else e for e in events)
        return super().append_batch(run_id, events, expected_version)


def test_harness_events_are_exactly_what_validation_makes(tmp_path: Any) -> None:
    """Events the harness builds without validating are the ones validation would build: same
    values, same types (an int where validation makes a float would store ``3``, not ``3.0``)."""
    store = _Keeping(EventStore.open(str(tmp_path / "runs.db")).engine)
    store.built = []
    for name in ("sandbox", "invoice-extraction", "customer-service", "data-migration"):
        spec = get_scenario(name)
        for version in spec.versions_for_demo():
            for plan in plan_runs(spec, model_version=version, runs=4, seed=11):
                launch(store, spec, instance_id=plan.instance_id, model_version=version,
                       seed=plan.seed, run_id=plan.run_id)  # fmt: skip
    kinds = {type(event).__name__ for event in store.built}
    assert {"ModelCalled", "ToolCalled", "StepStarted", "StepCompleted"} <= kinds
    for event in store.built:
        validated = type(event).model_validate(event.model_dump())
        assert validated.model_dump_json() == event.model_dump_json()
        assert {k: type(v) for k, v in validated.__dict__.items()} == {
            k: type(v) for k, v in event.__dict__.items()
        }
    store.close()
