"""A mode's name from its most distinctive tokens: a short phrase a reader recognises.

Known tokens read as phrases (``err:loop`` + ``budget:max_retry_per_step`` -> "loops on the same
action, until the step's retries run out"); others by their kind (``err:x.TimeoutError`` ->
"timeouterror errors", ``code:400_invalid_prompt`` -> "HTTP 400_invalid_prompt").
"""

from __future__ import annotations

from collections.abc import Sequence

_PHRASES: dict[str, str] = {
    "repeat:same": "the same error on every attempt",
    "repeat:varied": "a different error on each attempt",
    "layer:schema": "malformed output (schema check)",
    "layer:business_rule": "wrong values (business rule)",
    "layer:custom": "values out of range (custom check)",
    "budget:max_retry_per_step": "until the step's retries run out",
    "budget:allowed_total_retries": "until the run's retries run out",
    "budget:max_steps": "until the step limit",
    "budget:step_token_budget": "until the step's token budget runs out",
    "budget:run_token_budget": "until the run's token budget runs out",
    "budget:timeout_seconds": "until the run times out",
    "budget:max_messages": "until the message limit",
    "tool_err:tool_timeout": "tool timeouts",
    "tool_err:tool_rate_limit": "tool rate limits",
    "err:model_error": "the model call fails",
    "err:schema": "malformed output (schema check)",
    "err:business_rule": "wrong values (business rule)",
    "err:custom_check": "values out of range (custom check)",
    "err:tool_timeout": "tool timeouts",
    "err:tool_rate_limit": "tool rate limits",
    "concept:timeout": "timeouts",
    "concept:rate_limit": "rate limits",
    "concept:transient": "transient errors",
    "concept:context_limit": "the context window overflows",
    "concept:content_policy": "the prompt is flagged (content policy)",
    "concept:auth": "authentication fails",
    "concept:not_found": "something is not found",
    "concept:server_error": "the provider fails (5xx)",
    "errs:all_along": "with errors all along",
    "errs:sparse": "after scattered errors",
    "at:first": "at the first step",
    "at:early": "early in the run",
    "at:middle": "mid-run",
    "at:late": "late in the run",
    "at:run": "at the end of the run",
    "end:aborted": "aborted",
    "end:completed": "completed",
    "err:loop": "loops on the same action",
    "clean:early": "after a clean start",
    "onset:late": "errors growing along the run",
    "err:completion_criterion": "passes every step, fails the completion check",
}
_KINDS = (
    "concept:",
    "err:",
    "layer:",
    "repeat:",
    "code:",
    "tool_err:",
    "budget:",
    "w:",
    "at:",
    "errs",
    "before:",
    "clean:",
    "clean_until:",
    "onset:",
)
"""The order phrases are joined in: what happens, then why it ended, then where."""
PARTS = 3


def _phrase(token: str) -> str:
    if token in _PHRASES:
        return _PHRASES[token]
    kind, _, value = token.partition(":")
    if kind == "err" and f"budget:{value}" in _PHRASES:  # the run ended on that limit
        return _PHRASES[f"budget:{value}"]
    value = value.replace("_", " ")
    return {
        "code": f"HTTP {value}",
        "tool_err": f"tool {value}",
        "w": f"'{value}'",
        "before": f"after earlier {value} errors",
        "errs_in": f"after errors in the {value} third",
        "err": f"{value.rsplit('.', 1)[-1]} errors",
        "budget": f"until {value} runs out",
        "clean_until": "after a long clean run",
    }.get(kind, value)


def mode_name(defining: Sequence[str]) -> str:
    """A name from the first ``PARTS`` informative tokens of ``defining`` (most distinctive
    first), put in reading order; words of the message (``w:``) only when nothing else speaks."""
    informative = [t for t in defining if not t.startswith(("end:failed", "retried", "retries:"))]
    chosen = [t for t in informative if not t.startswith("w:")][:PARTS]
    if len(chosen) < 2:
        chosen += [t for t in informative if t.startswith("w:")][: PARTS - len(chosen)]
    if not chosen:
        return "fails"
    ordered = sorted(
        chosen, key=lambda t: next(i for i, k in enumerate((*_KINDS, "")) if t.startswith(k))
    )
    # a provider code said twice (``code:400`` beside ``code:400_context_length_exceeded``)
    ordered = [t for t in ordered if not any(o != t and o.startswith(t + "_") for o in ordered)]
    phrases = list(dict.fromkeys(_phrase(t) for t in ordered))
    return ", ".join(phrases)
