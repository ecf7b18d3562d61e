"""The httpx capture reads headers from httpx's own entries: the same answers as its public API.

Recognising an LLM client (an ``x-stainless-*`` header), the content type (and whether a
request's names JSON, read without decoding) and the headers a recorded response keeps are
read in one pass over ``Headers._list`` (raw name, lower-cased name, value) instead of one
decoding scan per question. These tests hold each to the public API on arbitrary header lists
(any bytes in names and values, repeated names, every case, and non-ASCII names whose Unicode
lower case comes near ``x-stainless-``), in httpx and httpx2.
"""

from __future__ import annotations

from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steplog.capture.httpx_capture import (
    KEPT_HEADERS,
    _content_type,
    _http_modules,
    _is_llm_client,
    _json_typed,
    _kept,
)

MODULES: list[ModuleType] = _http_modules()

NAMES = [
    "content-type", "Content-Type", "CONTENT-TYPE", "x-request-id", "X-Request-Id", "request-id",
    "x-stainless-lang", "X-Stainless-Arch", "X-STAINLESS-", "x-stainless", "x-stainlesss",
    "x-sta\u0130nless-lang", "\u212a-stainless-x", "x-st\u00e4inless-a", "accept", "authorization",
]  # fmt: skip
"""Names that are, nearly are, or Unicode-lower-case towards the ones asked about."""


def encodings(text: str) -> list[bytes]:
    return [text.encode("utf-8"), *([text.encode("latin-1")] if max(text) < "\u0100" else [])]


def names() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.sampled_from(NAMES).flatmap(lambda name: st.sampled_from(encodings(name))),
        st.binary(max_size=16),
    )


def values() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.sampled_from(
            [b"application/json", b"text/event-stream; charset=utf-8", b"", b"a/x+json", b"JSON"]
        ),
        st.binary(max_size=12),
        st.text(max_size=8).map(lambda text: text.encode("utf-8")),
    )


def header_lists() -> st.SearchStrategy[list[tuple[bytes, bytes]]]:
    return st.lists(st.tuples(names(), values()), max_size=8)


def public_is_llm_client(headers: Any) -> bool:
    """The check before: every name decoded and lower-cased."""
    return any(key.lower().startswith("x-stainless-") for key in headers)


@pytest.mark.parametrize("module", MODULES, ids=lambda module: module.__name__)
@settings(max_examples=300, deadline=None)
@given(items=header_lists())
def test_headers_read_in_one_pass_answer_as_httpx_does(
    module: ModuleType, items: list[tuple[bytes, bytes]]
) -> None:
    headers = module.Headers(items)
    assert _kept(headers) == {name: headers[name] for name in KEPT_HEADERS if name in headers}
    assert _content_type(headers) == headers.get("content-type", "")
    assert _json_typed(headers) == ("json" in headers.get("content-type", ""))
    request = SimpleNamespace(headers=headers)
    assert _is_llm_client(request) == public_is_llm_client(headers)


@pytest.mark.parametrize("module", MODULES, ids=lambda module: module.__name__)
def test_repeated_kept_headers_are_joined_as_httpx_joins_them(module: ModuleType) -> None:
    headers = module.Headers(
        [(b"X-Request-Id", b"a"), (b"x-stainless-os", b"Linux"), (b"x-request-id", b"b\xe9")]
    )
    assert (
        _kept(headers)
        == {"x-request-id": headers["x-request-id"]}
        == {"x-request-id": "a, b\u00e9"}
    )
    assert _is_llm_client(SimpleNamespace(headers=headers))
    assert not _is_llm_client(SimpleNamespace(headers=module.Headers({"x-stainless": "1"})))


def test_headers_kept_otherwise_are_read_through_the_public_api() -> None:
    """A headers object without httpx's entry list is asked through its mapping API."""
    headers = {"Content-Type": "application/json", "x-request-id": "r1"}

    class Plain(dict[str, str]):
        def __contains__(self, key: object) -> bool:
            return isinstance(key, str) and key.lower() in {k.lower() for k in self}

        def __getitem__(self, key: str) -> str:
            return next(v for k, v in self.items() if k.lower() == key.lower())

    plain = Plain(headers)
    assert _kept(plain) == {"content-type": "application/json", "x-request-id": "r1"}
    assert _content_type(plain) == "application/json"
    assert _json_typed(plain)
    assert not _is_llm_client(SimpleNamespace(headers=plain))
    assert _is_llm_client(SimpleNamespace(headers=Plain({"X-Stainless-Lang": "python"})))
