"""The httpx capture's token counts: a JSON object's read directly, as every payload's are.

``_tokens`` reads a response body that is one JSON object without building the list of
payloads a server-sent stream needs; ``_all_tokens`` is that general reading. These tests hold
the direct one to the general one on arbitrary bodies (counts of every type, ``bool`` among
them, negative ones, usage nested under ``message``, keys of either naming)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from steplog.capture.httpx_capture import _all_tokens, _tokens

NAMES = ["input_tokens", "prompt_tokens", "output_tokens", "completion_tokens", "total_tokens"]
COUNTS = st.one_of(
    st.integers(-5, 10**12), st.booleans(), st.none(), st.floats(), st.text(max_size=3)
)


def usages() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.dictionaries(st.sampled_from(NAMES), COUNTS, max_size=5),
        st.none(),
        st.integers(),
        st.lists(st.integers(), max_size=2),
        st.just({}),
    )


def bodies() -> st.SearchStrategy[Any]:
    message = st.one_of(
        st.none(), st.text(max_size=3), st.fixed_dictionaries({}, optional={"usage": usages()})
    )
    return st.fixed_dictionaries(
        {}, optional={"usage": usages(), "message": message, "id": st.text(max_size=4)}
    )


@settings(max_examples=500, deadline=None)
@given(bodies())
def test_one_object_counts_as_every_payload_counts(body: dict[str, Any]) -> None:
    got, expected = _tokens(body), _all_tokens(body)
    assert got == expected
    assert [type(count) for count in got] == [type(count) for count in expected]


def test_streams_and_other_bodies_are_read_payload_by_payload() -> None:
    stream = 'data: {"usage": {"prompt_tokens": 3}}\n\ndata: {"usage": {"completion_tokens": 4}}\n'
    assert _tokens(stream) == (3, 4)
    assert _tokens(None) == _tokens([1]) == (0, 0)
