"""``Redactor.fresh``: one scan of a value's strings joined, exactly what ``Redactor.value`` does.

The recorder redacts every request and response it keeps with :meth:`Redactor.fresh`, which
joins the value's strings (keys too) by newlines and scans the joined text once; only when that
scan (or a backslash, a string starting as JSON, a key naming a secret, an OTLP pair, a type
other than ``dict``/``list``/``str``/scalars, an anchored pattern, a very large value) says
something may change does it redact string by string. These tests hold the fast path to the
per-string one on arbitrary values with secrets of every kind planted anywhere in them: the
same result, of the same types, and the value itself (not a copy) only when nothing changed.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_redaction import re2_classes

from steplog.bench.redact import EXAMPLES
from steplog.redaction import KINDS, MASK, Redactor, builtin_redactor
from steplog.redaction._linear import anchored
from steplog.redaction._redactor import MAX_JOINED

R = builtin_redactor()

CONTEXTS = [
    "", " ", "\n", "\t", "x", "-", "=", ":", "/", "@", '"', "'", "\\", "{", "[", " {", "\n[",
    "Authorization: ", "Bearer ", "password=", "token: ", "--api-key ", "Cookie: ", "-u root ",
    "mysql -u root -p ", "redis://user:", "http://", MASK, "\u00e9", "\ud800", "\u3000", "\\/",
]  # fmt: skip
"""What may stand around a planted secret (context words, anchors' neighbours, escapes,
JSON openers, non-ASCII and a lone surrogate)."""

KEYS = ["note", "key", "value", "text", "api_key", "Authorization", "max_tokens", "auth", "{k"]


@st.composite
def generated_match(draw: st.DrawFn) -> str:
    """A match of a random kind, drawn from its pattern (RE2's classes)."""
    kind = draw(st.sampled_from(KINDS))
    pattern = re2_classes(kind.pattern).encode()
    return str(draw(st.from_regex(pattern, fullmatch=True)).decode("latin-1"))


def escaped(text: str, how: str) -> str:
    """``text`` with every character escaped (no base64 run or kind is left to see)."""
    if how == "u":
        return "".join(f"\\u{ord(c):04x}" for c in text)
    return "".join(f"\\x{ord(c):02x}" if ord(c) < 256 else c for c in text)


HIDDEN = [escaped(example, how) for example in EXAMPLES.values() for how in "ux"] + [
    json.dumps({"auth": "hunter2"}),
    " \n" + json.dumps([{"session_key": 12345}]),
    "\u3000" + json.dumps({"key": "x-auth", "value": "v"}),
]
"""Secrets that only the per-string path finds: escaped whole (the decoded view), or JSON
inside a string whose key names a secret (structural) -- the joined scan sees nothing there."""
ENCODED = [
    base64.b64encode(f"x {example} y".encode()).decode().rstrip("=")
    for example in EXAMPLES.values()
] + [
    base64.b64encode(b"Bearer abcdefgh").decode(),  # a run of twenty, the shortest scanned
    "/v1/chat/completions",
    "c3VtbWFyeSBvZiB0aGUgcnVuIGVuZHMgaGVyZQ==",
]
"""Base64 runs, with a secret inside (found only decoded) and without."""


def fragments() -> st.SearchStrategy[str]:
    return st.one_of(
        st.text(max_size=12),
        st.text(alphabet="ab01-_/+=. \n", max_size=30),
        st.sampled_from(CONTEXTS),
        st.sampled_from(sorted(EXAMPLES.values())),
        st.sampled_from(HIDDEN),
        st.sampled_from(ENCODED),
        generated_match(),
    )


def strings() -> st.SearchStrategy[str]:
    return st.lists(fragments(), max_size=4).map("".join)


def keys() -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from(KEYS), strings(), st.integers(-3, 3))


SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.floats()
)


def values() -> st.SearchStrategy[Any]:
    return st.recursive(
        st.one_of(SCALARS, strings()),
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(keys(), inner, max_size=4),
            st.tuples(inner),
            st.fixed_dictionaries({"key": st.sampled_from(KEYS), "value": inner}),
        ),
        max_leaves=12,
    )


def typed(value: Any) -> Any:
    """``value`` with every node's exact type beside it (``==`` alone takes 1 for True)."""
    if isinstance(value, dict):
        return ("dict", type(value).__name__, [(typed(k), typed(v)) for k, v in value.items()])
    if isinstance(value, list | tuple):
        return (type(value).__name__, [typed(item) for item in value])
    if isinstance(value, float) and value != value:
        return ("float", "nan")
    return (type(value).__name__, value)


def assert_same(redactor: Redactor, value: Any) -> None:
    expected = redactor.value(copy.deepcopy(value))
    given_value = copy.deepcopy(value)
    got = redactor.fresh(given_value)
    assert typed(got) == typed(expected), (value, got, expected)
    if got is given_value:  # kept itself: only when it held nothing to replace
        assert typed(redactor.value(value)) == typed(value)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(values())
def test_fresh_redacts_exactly_as_value(value: Any) -> None:
    assert_same(R, value)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_a_planted_secret_of_every_kind_is_redacted_wherever_it_stands(
    data: st.DataObject,
) -> None:
    """A value of ordinary strings with one secret (an example or a generated match of any
    kind) planted as a whole string, a string's start, middle or end, or a key."""
    secret = data.draw(st.one_of(st.sampled_from(sorted(EXAMPLES.values())), generated_match()))
    before, after = data.draw(st.sampled_from(CONTEXTS)), data.draw(st.sampled_from(CONTEXTS))
    text = before + secret + after
    plain = data.draw(st.lists(st.text(alphabet="abc xyz.,", max_size=8), min_size=1, max_size=4))
    where = data.draw(st.integers(0, len(plain)))
    items: list[Any] = [*plain[:where], text, *plain[where:]]
    value = data.draw(
        st.sampled_from(
            [
                {"messages": [{"role": "user", "content": s} for s in items]},
                {"args": items, "kwargs": {}},
                {text: plain[0], "other": plain},
                {"body": {"choices": [{"message": {"content": text}}]}, "n": 1.5},
                items,
            ]
        )
    )
    assert_same(R, value)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(sorted(EXAMPLES)), st.sampled_from(["", " ", "\n", "x "]))
def test_every_example_is_caught_by_the_joined_scan(kind: str, before: str) -> None:
    example = EXAMPLES[kind]
    value = {"args": ["hello", before + example, "world"], "kwargs": {"n": 3}}
    got = R.fresh(copy.deepcopy(value))
    assert got != value and got == R.value(value)
    assert example not in json.dumps(got)


def test_ordinary_values_are_kept_themselves() -> None:
    value = {
        "args": ["task-3 12", {"nested": [1, 2.5, None, True, "prose with spaces"]}],
        "kwargs": {"limit": 3, "model": "gpt-4o-mini"},
        "messages": [{"role": "user", "content": "line one\nline two: [1] {2}"}],
    }
    assert R.fresh(value) is value
    assert R.fresh("short") == "short"
    assert R.fresh(3) == 3


def test_what_the_joined_scan_cannot_decide_goes_string_by_string() -> None:
    secret = EXAMPLES["github_token"]
    cases: list[Any] = [
        {"api_key": "anything at all"},  # a key that names a secret
        {"key": "authorization", "value": {"stringValue": "xyz"}},  # an OTLP pair
        {"note": json.dumps({"token": "abc"})},  # JSON inside a string
        {"note": "  " + json.dumps({"password": "abc"})},
        {"note": "\\u0067hp_" + secret[4:]},  # escaped: the decoded view
        *({"note": hidden} for hidden in HIDDEN),
        ("a tuple", secret),  # another type: a list comes back, as value() makes it
        {"note": "x" * (MAX_JOINED + 10) + " " + secret},  # very large
    ]
    for case in cases:
        assert_same(R, case)
        assert R.fresh(copy.deepcopy(case)) != case


def test_anchored_patterns_are_never_scanned_joined() -> None:
    added = Redactor.from_patterns([r"^zz[0-9]{6}$", r"(?:^|\s)yy[0-9]{6}"])
    assert anchored(r"^zz[0-9]{6}$") and not anchored(r"(?:^|\s)yy[0-9]{6}")
    assert not any(anchored(kind.pattern) for kind in KINDS)
    value = {"args": ["zz123456", "yy654321"], "kwargs": {}}
    assert added.fresh(copy.deepcopy(value)) == {"args": [MASK, MASK], "kwargs": {}}
    assert_same(added, value)


_ADDED = Redactor.from_patterns([r"(?:^|\s)ab[0-9]{2}", r"\bxyz\b", r"x\Bq"])
"""Unanchored added kinds (the joined scan is used) that the generated values often hold."""


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(values())
def test_fresh_with_added_patterns_redacts_exactly_as_value(value: Any) -> None:
    assert _ADDED._joinable
    assert_same(_ADDED, value)


def pair_values() -> st.SearchStrategy[Any]:
    """A request or response: a value, a string or a scalar at the top."""
    return st.one_of(values(), strings(), SCALARS)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(pair_values(), pair_values())
def test_fresh_pair_redacts_each_exactly_as_value(first: Any, second: Any) -> None:
    """A call's request and response scanned joined: each as ``value`` (or ``string``, at the
    top) redacts it alone, and each kept itself only when nothing in it changed."""
    for redactor in (R, _ADDED):
        given_first, given_second = copy.deepcopy(first), copy.deepcopy(second)
        got = redactor.fresh_pair(given_first, given_second)
        expected = tuple(
            redactor.string(v) if isinstance(v, str) else redactor.value(v)
            for v in (copy.deepcopy(first), copy.deepcopy(second))
        )
        assert typed(got) == typed(expected), (first, second, got, expected)
        for kept, original in zip(got, (given_first, given_second), strict=True):
            if kept is original and not isinstance(original, str):
                assert typed(redactor.value(original)) == typed(original)


def test_fresh_pair_with_a_secret_in_one_keeps_the_other() -> None:
    request = {"args": ["hello"], "kwargs": {}}
    response = {"text": "key " + EXAMPLES["github_token"]}
    kept, redacted = R.fresh_pair(request, copy.deepcopy(response))
    assert kept is request and redacted == R.value(response) != response


def test_strings_with_base64_runs_only_are_checked_one_by_one() -> None:
    """A URL path of twenty letters is a base64 run: the joined scan then asks each string
    long enough to hold one, as the per-string path would; a run that decodes to a secret is
    still found."""
    from steplog.redaction._scan import _BASE64_RUN, MIN_RUN

    assert b"{%d," % MIN_RUN in _BASE64_RUN
    request = {"method": "POST", "path": "/v1/chat/completions", "body": {"model": "m"}}
    assert R.fresh(request) is request
    hidden = base64.b64encode(f"token {EXAMPLES['github_token']} end".encode()).decode()
    assert_same(R, {"path": "/v1/chat/completions", "data": hidden})
    assert R.fresh({"data": hidden}) != {"data": hidden}
    for encoded in ENCODED[: len(EXAMPLES) + 1]:  # each alone: runs as short as a secret's
        for value in ({"path": "/v1/chat/completions", "data": encoded}, [encoded], {encoded: 1}):
            assert_same(R, value)
            assert R.fresh(copy.deepcopy(value)) != value, encoded


def test_base64_strings_found_clean_are_remembered_and_secrets_never() -> None:
    """A string of base64 runs that its own scan leaves unchanged is remembered (a client's
    path, on every call); one that hides a secret is never, and is redacted every time."""
    redactor = Redactor()
    request = {"method": "POST", "path": "/v1/chat/completions", "body": {"model": "m"}}
    assert redactor.fresh(request) is request
    assert "/v1/chat/completions" in redactor._unchanged
    hidden = base64.b64encode(f"token {EXAMPLES['github_token']} end".encode()).decode()
    for _ in range(3):
        value = {"path": "/v1/chat/completions", "data": hidden}
        assert redactor.fresh(copy.deepcopy(value)) == redactor.value(value) != value
    assert hidden not in redactor._unchanged


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.one_of(values(), st.sampled_from(ENCODED)), min_size=2, max_size=6))
def test_a_redactor_that_remembers_redacts_each_value_as_a_new_one(sequence: list[Any]) -> None:
    """Values redacted one after another by one redactor (its memory of clean strings
    growing) come out as each would from a redactor that has seen nothing."""
    redactor = Redactor()
    for value in sequence:
        assert_same(redactor, value)
        assert_same(redactor, [value, value])
