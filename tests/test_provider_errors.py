"""Readable causes: provider errors, in each provider's real format, read as ``Class`` +
``status code: message``; failure signatures keep the class, status and code and mask the parts
that vary (numbers, ids, quoted values).

The texts come from the real SDK classes where they are installed (``openai``, ``anthropic``,
``botocore``: the client's own ``_make_status_error_from_response`` on a real HTTP response, or
the exception itself); Google Gen AI and LiteLLM are written in the format their source prints
(``google/genai/errors.py``: ``f"{code} {status}. {details}"``; ``litellm/exceptions.py``:
``"litellm.<Class>: <Provider>Exception - <text>"``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steplog.ingest.otlp.span_errors import error_of
from steplog.ingest.otlp.span_model import STATUS_ERROR, Span, SpanEvent
from steplog.projections.signature import normalize_message, signature_of

_CODES = st.from_regex(r"[a-z]{3,10}(_[a-z]{2,8}){0,3}", fullmatch=True)
_STATUS = st.sampled_from([400, 401, 403, 404, 409, 413, 422, 429, 500, 503, 529])
_WORD = st.sampled_from(["maximum", "context", "length", "tokens", "request", "schema", "limit"])


@st.composite
def _texts(draw: st.DrawFn) -> tuple[str, int, str]:
    """A provider message with the variable parts an error carries: a number, a quoted value."""
    number = draw(st.integers(min_value=2, max_value=10**7))
    quoted = draw(st.text(alphabet="abcxyz_-", min_size=1, max_size=8))
    words = " ".join(draw(st.lists(_WORD, min_size=1, max_size=4)))
    return f"The {words} is {number}, for '{quoted}'.", number, quoted


def _openai(status: int, code: str, message: str) -> tuple[str, str, str]:
    import openai

    client = openai.OpenAI(api_key="x", base_url="http://127.0.0.1:9/v1")
    body = {"error": {"message": message, "type": "invalid_request_error", "code": code}}
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    error = client._make_status_error_from_response(
        httpx.Response(status, json=body, request=request)
    )
    return f"openai.{type(error).__name__}", str(error), f"{status}: "  # the text has no code


def _openai_1x(status: int, code: str, message: str) -> tuple[str, str, str]:
    """openai 1.x printed the whole body (``f"Error code: {status} - {body}"``)."""
    body = {
        "error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}
    }
    return "openai.BadRequestError", f"Error code: {status} - {body}", f"{status} {code}: "


def _anthropic(status: int, code: str, message: str) -> tuple[str, str, str]:
    import anthropic

    client = anthropic.Anthropic(api_key="x", base_url="http://127.0.0.1:9")
    body = {"type": "error", "error": {"type": code, "message": message}, "request_id": "req_01"}
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/messages")
    error = client._make_status_error_from_response(
        httpx.Response(status, json=body, request=request)
    )
    return f"anthropic.{type(error).__name__}", str(error), f"{status} {code}: "


def _google(status: int, code: str, message: str) -> tuple[str, str, str]:
    upper = code.upper()
    details = {"error": {"code": status, "message": message, "status": upper}}
    return "google.genai.errors.ClientError", f"{status} {upper}. {details}", f"{status} {upper}: "


def _bedrock(status: int, code: str, message: str) -> tuple[str, str, str]:
    from botocore.exceptions import ClientError

    name = "".join(part.title() for part in code.split("_")) + "Exception"
    response: Any = {
        "Error": {"Code": name, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    error = ClientError(response, "Converse")
    return "botocore.exceptions.ClientError", str(error), f"{name}: "


def _litellm(status: int, code: str, message: str) -> tuple[str, str, str]:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": code}}
    text = f"litellm.BadRequestError: OpenAIException - Error code: {status} - {body}"
    return "litellm.exceptions.BadRequestError", text, f"{status} {code}: "


PROVIDERS: dict[str, Callable[[int, str, str], tuple[str, str, str]]] = {
    "openai": _openai,
    "openai-1.x": _openai_1x,
    "anthropic": _anthropic,
    "google-genai": _google,
    "bedrock": _bedrock,
    "litellm": _litellm,
}


def _span(error_type: str, message: str) -> Span:
    event = SpanEvent("exception", 0, {"exception.type": error_type, "exception.message": message})
    return Span("t" * 32, "s" * 16, None, "chat", 1, 0, 1, {}, STATUS_ERROR, "", (event,))


@pytest.mark.parametrize("provider", list(PROVIDERS))
@settings(max_examples=40, deadline=None)
@given(status=_STATUS, code=_CODES, text=_texts(), other=_texts())
def test_a_provider_error_keeps_class_status_and_code_and_masks_the_rest(
    provider: str, status: int, code: str, text: tuple[str, int, str], other: tuple[str, int, str]
) -> None:
    error_type, raw, head = PROVIDERS[provider](status, code, text[0])
    error = error_of(_span(error_type, raw))
    assert error.error_type == error_type
    assert error.message == head + text[0]  # "400 context_length_exceeded: The maximum is..."
    normal = normalize_message(error.message)
    assert normal.startswith(head)
    assert str(text[1]) not in normal[len(head) :] and f"'{text[2]}'" not in normal
    # the same failure with other numbers and values is the same signature...
    again = error_of(_span(*PROVIDERS[provider](status, code, other[0])[:2]))
    if text[0].split(" is ")[0] == other[0].split(" is ")[0]:
        assert _signature(error_type, error.message) == _signature(error_type, again.message)
    # ...another status or code is another one
    elsewhere = error_of(
        _span(*PROVIDERS[provider](599 if status != 599 else 598, code + "_x", text[0])[:2])
    )
    assert _signature(error_type, error.message) != _signature(error_type, elsewhere.message)


def _signature(error_type: str, message: str) -> str:
    return signature_of("agent", "chat", error_type, message).id


def test_two_different_400s_are_two_signatures() -> None:
    context = _openai_1x(
        400,
        "context_length_exceeded",
        "This model's maximum context length "
        "is 8192 tokens. However, your messages resulted in 9001 tokens.",
    )
    schema = _openai_1x(400, "invalid_function_parameters", "Invalid schema for function 'x'.")
    first, second = (error_of(_span(t, m)) for t, m, _ in (context, schema))
    assert first.message.startswith("400 context_length_exceeded: This model's maximum")
    assert _signature(first.error_type, first.message) != _signature(
        second.error_type, second.message
    )  # before: both "Error code: <n> - {<str>: {<str>: <str>, ..."


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            (None, "ContextWindowExceeded: the prompt is too long"),
            ("ContextWindowExceeded", "the prompt is too long"),
        ),
        (
            (
                "litellm.exceptions.ContextWindowExceededError",
                "litellm.ContextWindowExceededError: litellm.BadRequestError: too long",
            ),
            ("litellm.exceptions.ContextWindowExceededError", "too long"),
        ),
        (
            (
                "litellm.exceptions.RateLimitError",
                'litellm.RateLimitError: AnthropicException - {"type":"error","error":{"type":'
                '"rate_limit_error","message":"Too many tokens"}}',
            ),
            ("litellm.exceptions.RateLimitError", "rate_limit_error: Too many tokens"),
        ),
        (
            ("google.api_core.exceptions.ResourceExhausted", "429 Resource has been exhausted"),
            ("google.api_core.exceptions.ResourceExhausted", "429: Resource has been exhausted"),
        ),
        (("ValueError", "no such city: Atlantis"), ("ValueError", "no such city: Atlantis")),
        (("RuntimeError", "CustomError: details"), ("RuntimeError", "CustomError: details")),
        (("ValueError", "500 items left"), ("ValueError", "500 items left")),
        (  # anthropic 2.x: the code in the parentheses after the message, details after it
            (
                "anthropic.BadRequestError",
                "400 prompt is too long (about 3 pages) (error_code: prompt_too_long, "
                "request_id: req_1, path: /v1/messages, type: invalid_request_error)"
                '\n\n{\n  "limit": 200000\n}',
            ),
            (
                "anthropic.BadRequestError",
                "400 prompt_too_long: prompt is too long (about 3 pages)",
            ),
        ),
        (  # parentheses that are not the SDK's labels are the message's own
            ("ValueError", "400 rows (of 9) failed (see: the log)"),
            ("ValueError", "400 rows (of 9) failed (see: the log)"),
        ),
    ],
)
def test_wrappers_and_plain_errors(
    raw: tuple[str | None, str], expected: tuple[str | None, str]
) -> None:
    from steplog.ingest.provider_errors import readable_error

    assert readable_error(*raw) == expected
