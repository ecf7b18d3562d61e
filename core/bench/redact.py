"""``steplog bench redact``: seconds per MB of redaction, adversarial inputs against typical spans.

The adversarial inputs are the ones that make backtracking patterns quadratic or worse
(``a.a.a...`` against a JWT pattern, ``://`` with a long user part, base64 with dots, repeated
prefixes such as ``sk-sk-sk-...``), one family built from every kind's own example (the example
repeated back to back, its first half repeated, the example with a megabyte of its last
character, the example with its characters separated by dots), text dense with secrets, and
escaped text. Each is one string of the given size, redacted by :meth:`Redactor.text`. The
typical case is what the OTLP receiver does: a realistic request of spans (messages, tool calls,
attributes; a few secrets) decoded from JSON and redacted structurally by
:meth:`Redactor.value`. Each figure is the best of ``repeat`` runs.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..redaction import KINDS, Redactor, builtin_redactor

TARGET_SECONDS_PER_MB = 0.5
MB = 1 << 20

EXAMPLES: dict[str, str] = {
    # each assembled from parts, so this file holds no token a scanner would take for live
    "pem_private_key": "-----BEGIN RSA PRIVATE " + "KEY-----\nMIIEowIBAAKCAQEA7bq9\n"
    "c2VjcmV0LWtleS1ib2R5\n-----END RSA PRIVATE " + "KEY-----",
    "github_pat": "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    "github_token": "ghp_" + "0123456789abcdefghijABCDEFGHIJklmnop",
    "gitlab_token": "glpat-" + "abcdefghij0123456789",
    "openai_anthropic_key": "sk-ant-api03-" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2",
    "stripe_key": "sk_live_" + "a1B2c3D4e5F6g7H8",
    "slack_token": "xoxb-" + "1234567890-abcdefghijkl",
    "slack_webhook": "hooks.slack.com/services/" + "T000/B000/XXXXXXXX",
    "google_api_key": "AIza" + "SyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW",
    "aws_access_key_id": "AKIA" + "IOSFODNN7EXAMPL2",
    "huggingface_token": "hf_" + "abcdefghijklmnopqrstuvwxyzABCDEF",
    "npm_token": "npm_" + "abcdefghijklmnopqrstuvwxyz0123456789",
    "pypi_token": "pypi-AgE" + "IcHlwaS5vcmcCJGFiY2RlZmdoLWlqa2wtbW5vcC1xcnN0LXV2d3h5ejEyMzQ",
    "jwt": "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiIxMjM0NTY3ODkwIn0" + ".dozjgNryP4J3jVmNHl0w5N_X",
    "url_userinfo": "redis://:" + "s3cretPassw0rd" + "@cache:6379/0",
    "authorization_header": "Authorization: " + "token gho_abcDEF123456",
    "bearer_token": "Bearer " + "abcDEF123456ghiJKL789",
    "basic_auth": "Basic " + "dXNlcjpodW50ZXIyMg==",
    "cookie_header": "Cookie: " + "session=abc123def456",
    "cli_secret_flag": "--password " + "hunter2hunter2",
    "cli_user_password": "mysql -u root -p " + "s3cr3tPassw0rd",
    "key_value": "AWS_SECRET_ACCESS_KEY=" + "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
}
"""One example of every built-in kind (the drill and the tests plant these)."""


@dataclass(frozen=True, slots=True)
class Timing:
    """One input: its name, size and the best time to redact it."""

    name: str
    megabytes: float
    seconds: float

    @property
    def seconds_per_mb(self) -> float:
        return self.seconds / self.megabytes

    def as_dict(self) -> dict[str, Any]:
        return {
            "input": self.name,
            "megabytes": round(self.megabytes, 3),
            "seconds": round(self.seconds, 4),
            "seconds_per_mb": round(self.seconds_per_mb, 4),
        }


@dataclass(slots=True)
class RedactBench:
    """Every adversarial input's time, the typical case's, and the verdict."""

    adversarial: list[Timing] = field(default_factory=list)
    typical: Timing | None = None
    load_average: float = 0.0

    @property
    def worst(self) -> Timing:
        return max(self.adversarial, key=lambda t: t.seconds_per_mb)

    @property
    def ratio(self) -> float:
        """Worst adversarial seconds per MB over the typical case's."""
        assert self.typical is not None
        return self.worst.seconds_per_mb / self.typical.seconds_per_mb

    @property
    def verdict(self) -> str:
        ok = self.worst.seconds_per_mb <= TARGET_SECONDS_PER_MB
        return f"{'meets' if ok else 'misses'} <= {TARGET_SECONDS_PER_MB} s/MB"

    def as_dict(self) -> dict[str, Any]:
        assert self.typical is not None
        return {
            "worst": self.worst.as_dict(),
            "typical": self.typical.as_dict(),
            "ratio": round(self.ratio, 2),
            "target_seconds_per_mb": TARGET_SECONDS_PER_MB,
            "verdict": self.verdict,
            "load_average": self.load_average,
            "adversarial": [t.as_dict() for t in self.adversarial],
        }

    def lines(self) -> list[str]:
        """The report as text: every input, then the summary."""
        assert self.typical is not None
        width = max(len(t.name) for t in self.adversarial)
        rows = [
            f"  {t.name:<{width}}  {t.seconds_per_mb:7.3f} s/MB"
            for t in sorted(self.adversarial, key=lambda t: -t.seconds_per_mb)
        ]
        worst, typical = self.worst, self.typical
        return [
            f"redaction, best of the runs, 1-minute load {self.load_average:.1f}:",
            *rows,
            f"worst adversarial  {worst.seconds_per_mb:.3f} s/MB ({worst.name})",
            f"typical spans      {typical.seconds_per_mb:.3f} s/MB "
            f"({typical.megabytes:.2f} MB of OTLP JSON, decoded and redacted structurally)",
            f"ratio              {self.ratio:.1f}x   ({self.verdict})",
        ]


def adversarial_inputs(size: int = MB) -> dict[str, str]:
    """Every adversarial input, ``size`` characters each."""

    def fill(unit: str) -> str:
        return (unit * (size // max(len(unit), 1) + 1))[:size]

    inputs = {
        "a.a.a.": fill("a."),
        "base64 with dots": fill("QUJDRA" * 5 + "."),
        ":// long user part": "x://" + fill("u")[4:],
        ":// long password, then @": "x://u:" + fill("p")[8:] + "@h",
        "scheme:// repeated": fill("a://"),
        "sk- repeated": fill("sk-"),
        "eyJ. repeated": fill("eyJabcdefgh."),
        "password= repeated": fill("password="),
        "password: repeated": fill("password: "),
        "BEGIN repeated": fill("-----BEGIN PRIVATE KEY-----"),
        "Bearer then a megabyte": "Bearer " + fill("a")[7:],
        "escaped secrets": fill("\\u0073k-"),
        "dense secrets": fill(" ".join(EXAMPLES.values()) + " "),
        "plain prose": fill("The quick brown fox jumps over the lazy dog. "),
    }
    for name, example in EXAMPLES.items():
        half = example[: max(len(example) // 2, 1)]
        inputs[f"{name}: back to back"] = fill(example)
        inputs[f"{name}: first half repeated"] = fill(half)
        inputs[f"{name}: then its last character"] = example + fill(example[-1])[len(example) :]
        inputs[f"{name}: dotted"] = fill(".".join(example) + ".")
    return inputs


def typical_request(size: int = MB, seed: int = 7) -> str:
    """A realistic OTLP/JSON request of about ``size`` bytes: agent spans with chat messages,
    tool calls and the usual attributes, a secret in one span of fifty."""
    rng = random.Random(seed)
    words = ["the", "a", "to", "of", "and", "in", "file", "test", "error", "run", "fix", "line"]
    spans: list[dict[str, Any]] = []
    total = 0
    while total < size:
        index = len(spans)
        text = " ".join(rng.choice(words) for _ in range(rng.randint(20, 120)))
        if index % 50 == 7:
            text += f" {EXAMPLES['openai_anthropic_key']}"
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o-2024-08-06",
            "gen_ai.usage.input_tokens": rng.randint(100, 4000),
            "gen_ai.usage.output_tokens": rng.randint(10, 800),
            "gen_ai.input.messages": json.dumps([{"role": "user", "content": text}]),
            "gen_ai.tool.call.arguments": json.dumps({"path": f"src/m{index}.py", "line": index}),
            "session.id": f"session-{index // 20}",
        }
        span = {
            "traceId": f"{rng.getrandbits(128):032x}",
            "spanId": f"{rng.getrandbits(64):016x}",
            "name": "chat gpt-4o",
            "startTimeUnixNano": str(1_700_000_000_000_000_000 + index),
            "endTimeUnixNano": str(1_700_000_000_000_000_100 + index),
            "attributes": [
                {
                    "key": k,
                    "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v},
                }
                for k, v in attributes.items()
            ],
        }
        spans.append(span)
        total += len(json.dumps(span))
    return json.dumps(
        {"resourceSpans": [{"scopeSpans": [{"scope": {"name": "agent"}, "spans": spans}]}]}
    )


def best_of(repeat: int, work: Callable[[], object]) -> float:
    """The shortest of ``repeat`` timings of ``work`` (the least disturbed by other load)."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best


def run_redact_benchmark(
    *, size: int = MB, repeat: int = 3, redactor: Redactor | None = None
) -> RedactBench:
    """Time every adversarial input and the typical request."""
    chosen = redactor or builtin_redactor()
    report = RedactBench(load_average=os.getloadavg()[0])
    for name, text in adversarial_inputs(size).items():
        seconds = best_of(repeat, lambda text=text: chosen.text(text))  # type: ignore[misc]
        report.adversarial.append(Timing(name, len(text.encode()) / MB, seconds))
    body = typical_request(size)
    document = json.loads(body)
    seconds = best_of(repeat, lambda: chosen.value(document))
    report.typical = Timing("typical spans", len(body.encode()) / MB, seconds)
    return report


__all__ = ["EXAMPLES", "KINDS", "RedactBench", "adversarial_inputs", "run_redact_benchmark"]
