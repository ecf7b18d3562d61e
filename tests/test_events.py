"""The event catalogue: validation errors name the event and field; upcasters run on read."""

from __future__ import annotations

from typing import ClassVar

import pytest
from pydantic import Field

from steplog.errors import InvalidEventError
from steplog.events import (
    Catalogue,
    Event,
    RunStarted,
    StepStarted,
    catalogue,
)
from steplog.events import ModelCalled as BuiltinModelCalled


def test_catalogue_knows_the_design_events() -> None:
    expected = {
        "RunStarted", "StepStarted", "ModelCalled", "ToolCalled", "RandomDrawn", "ClockRead",
        "StepAttemptFailed", "ValidationFailed", "StepCompleted", "StepFailed",
        "ApprovalRequested", "ApprovalDecided", "BudgetExceeded", "RunCompleted", "RunFailed",
        "RunAborted", "FailureLabeled", "SampleAddedToRegressionSet",
    }  # fmt: skip
    assert expected <= set(catalogue.names())


def test_parse_returns_the_typed_event() -> None:
    event = catalogue.parse("StepStarted", {"step": "extract", "step_index": 2})
    assert event == StepStarted(step="extract", step_index=2)


def test_unknown_type_is_named_with_the_known_ones() -> None:
    with pytest.raises(InvalidEventError, match=r"unknown event type 'StepExploded'.*RunStarted"):
        catalogue.parse("StepExploded", {})


def test_invalid_payload_names_event_and_field() -> None:
    with pytest.raises(InvalidEventError) as info:
        catalogue.parse(
            "RunStarted",
            {"scenario": "s", "model_version": "v1", "agent": "a", "config": {"max_steps": 0}},
        )
    assert "RunStarted.config.max_steps" in str(info.value)
    assert "greater than or equal to 1" in str(info.value)


def test_missing_and_extra_fields_are_reported() -> None:
    with pytest.raises(InvalidEventError) as info:
        catalogue.parse("StepStarted", {"step_index": 0, "stepp": "typo"})
    message = str(info.value)
    assert "StepStarted.step: Field required" in message
    assert "StepStarted.stepp: Extra inputs are not permitted" in message


def test_payload_must_be_an_object() -> None:
    with pytest.raises(InvalidEventError, match="payload must be a JSON object, not list"):
        catalogue.parse("StepStarted", [1, 2])


def test_newer_schema_version_than_known_is_refused() -> None:
    with pytest.raises(InvalidEventError, match="schema_version 7 is newer"):
        catalogue.parse("StepStarted", {"step": "a", "step_index": 0}, schema_version=7)


def test_events_are_immutable() -> None:
    event = StepStarted(step="a", step_index=0)
    with pytest.raises(ValueError, match="frozen"):
        event.step = "b"  # type: ignore[misc]


class TokensCounted(Event):
    """v2 split v1's single ``tokens`` into input and output tokens."""

    schema_version: ClassVar[int] = 3
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    model: str


def _v1_to_v2(payload: dict[str, object]) -> dict[str, object]:
    tokens = payload.pop("tokens")
    return {**payload, "input_tokens": tokens, "output_tokens": 0}


def _v2_to_v3(payload: dict[str, object]) -> dict[str, object]:
    return {**payload, "model": payload.get("model", "unknown")}


@pytest.fixture
def versioned() -> Catalogue:
    versioned = Catalogue([TokensCounted])
    versioned.register_upcaster("TokensCounted", 1, _v1_to_v2)
    versioned.register_upcaster("TokensCounted", 2, _v2_to_v3)
    return versioned


def test_upcasters_chain_from_any_old_version(versioned: Catalogue) -> None:
    assert versioned.upcast("TokensCounted", 1, {"tokens": 12}) == (
        3,
        {"input_tokens": 12, "output_tokens": 0, "model": "unknown"},
    )
    assert versioned.upcast("TokensCounted", 2, {"input_tokens": 1, "output_tokens": 2}) == (
        3,
        {"input_tokens": 1, "output_tokens": 2, "model": "unknown"},
    )
    assert versioned.parse("TokensCounted", {"tokens": 5}, schema_version=1) == TokensCounted(
        input_tokens=5, output_tokens=0, model="unknown"
    )


def test_missing_upcaster_is_a_clear_error() -> None:
    broken = Catalogue([TokensCounted])
    with pytest.raises(InvalidEventError, match="no upcaster to v2"):
        broken.upcast("TokensCounted", 1, {"tokens": 1})


def test_unknown_types_pass_through_upcast_unchanged() -> None:
    assert catalogue.upcast("FromTheFuture", 4, {"x": 1}) == (4, {"x": 1})


def test_registering_a_different_class_under_a_taken_name_fails() -> None:
    class ModelCalled(Event):  # same name as the built-in
        pass

    fresh = Catalogue([RunStarted])
    fresh.register(RunStarted)  # the same class again is fine
    with pytest.raises(ValueError, match="already registered"):
        Catalogue([BuiltinModelCalled, ModelCalled])
