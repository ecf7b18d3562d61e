"""The kinds of secret steplog recognises, each one RE2 pattern (no backtracking constructs).

A pattern either *is* the secret (a token with a known prefix: the whole match is replaced) or
finds it by context (``password=...``, ``Bearer ...``, ``scheme://user:...@``): then groups named
``secret`` (or ``secret2``, ``secret3``... for alternatives) are replaced and the context kept.
All kinds are joined into one alternation and scanned once per string (:mod:`._scan`), so the
cost of a string is linear in its length whatever it holds; where two kinds could start at the
same place, the one listed first wins, which is why the specific kinds come before the generic
``key_value``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of secret: its name (reported by ``steplog bench redact``) and RE2 pattern."""

    name: str
    pattern: str


_TOKEN: Final = r"A-Za-z0-9._~+/=-"  # RFC 6750 b64token
_MASKED: Final = r"\[REDACTED\]"
"""What a secret was replaced by: after a scheme word it is the credential (so that redacting
``Authorization: Basic [REDACTED]`` again keeps it, rather than taking ``Basic`` for one)."""
_UNQUOTED: Final = r"[^\s\"'\\&,;<>]+"
_KEY_WORDS: Final = (
    r"password|passwd|passphrase|secret|token|api[_-]?key|apikey|access[_-]?key|"
    r"private[_-]?key|credentials?|authorization|cookie"
)
_FLAG_WORDS: Final = (
    r"password|passwd|passphrase|token|secret|api-?key|apikey|access-key|secret-key|"
    r"private-key|auth-token"
)

KINDS: Final[tuple[Kind, ...]] = (
    # -- self-identifying: the whole match is the secret --------------------------------------
    Kind(
        "pem_private_key",
        r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY-----(?:[A-Za-z0-9+/=\s:,.\\]|-[A-Za-z0-9])*"
        r"(?:-----END[A-Z0-9 ]{0,40}PRIVATE KEY-----)?",
    ),
    Kind("github_pat", r"\bgithub_pat_[A-Za-z0-9_]{22,}"),
    Kind("github_token", r"\bgh[pousr]_[A-Za-z0-9]{30,}"),
    Kind("gitlab_token", r"\bglpat-[A-Za-z0-9_-]{20,}"),
    Kind("openai_anthropic_key", r"\bsk-(?:ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_-]{16,}"),
    Kind(
        "stripe_key",
        r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}|\bwhsec_[A-Za-z0-9]{20,}",
    ),
    Kind(
        "slack_token",
        r"\bxox[abposre]-[A-Za-z0-9-]{10,}|\bxapp-[A-Za-z0-9-]{10,}",
    ),
    Kind("slack_webhook", r"hooks\.slack\.com/services/[A-Za-z0-9/]+"),
    Kind("google_api_key", r"\bAIza[0-9A-Za-z_-]{35}"),
    Kind("aws_access_key_id", r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b"),
    Kind("huggingface_token", r"\bhf_[A-Za-z0-9]{30,}"),
    Kind("npm_token", r"\bnpm_[A-Za-z0-9]{36}"),
    Kind("pypi_token", r"\bpypi-AgE[A-Za-z0-9_-]{50,}"),
    # a JSON Web Token: base64url JSON ("eyJ" is '{"') and what follows it, dots included
    Kind("jwt", r"\beyJ[A-Za-z0-9_-]{8}[A-Za-z0-9_.-]*"),
    # -- by context: only the ``secret`` groups are replaced -----------------------------------
    Kind(
        "url_userinfo",
        r"(?i:\b[a-z][a-z0-9+.-]{0,31}://)[^\s:/@\"'<>]{0,128}:"
        r"(?P<secret>[^\s@/\"'<>]{1,256})@",
    ),
    Kind(
        "authorization_header",
        r"(?i:\bauthorization)\\?[\"']?\s{0,16}[:=]\s{0,16}\\?[\"']?"
        r"(?:(?i:bearer|basic|token|digest|bot)\s{1,16})?(?P<secret>"
        + _MASKED
        + r"|["
        + _TOKEN
        + r"]+)",
    ),
    Kind("bearer_token", r"(?i:\bbearer)\s{1,16}(?P<secret>[" + _TOKEN + r"]{8,})"),
    Kind("basic_auth", r"\bBasic\s{1,16}(?P<secret>[A-Za-z0-9+/]{2,200}={1,2})"),
    Kind(
        "cookie_header",
        r"(?i:\b(?:set-)?cookie)\s{0,16}:\s{0,16}(?P<secret>[^\r\n\"'\\]+)",
    ),
    Kind(
        "cli_secret_flag",
        r"(?:^|\s)--?(?i:[a-z0-9-]{0,32}(?:" + _FLAG_WORDS + r"))(?:=|\s{1,16})"
        r"(?:\"(?P<secret>[^\"]+)|'(?P<secret2>[^']+)|(?P<secret3>[^\s\"'-][^\s\"']*))",
    ),
    Kind(
        "cli_user_password",
        r"(?:^|\s)(?:-u|--user)\s{1,16}[\"']?[^\s:\"'-][^\s:\"']{0,64}:(?P<secret>[^\s\"']+)"
        r"|(?:^|\s)-(?:u|-user(?:name)?)[\s=]{1,16}[^\s-]\S{0,64}\s{1,16}-(?:p|-password)"
        r"(?:=|\s{1,16})?(?P<secret2>[^\s\"'-][^\s\"']*)"
        r"|\bsshpass\s{1,16}-p\s{0,16}(?P<secret3>\S+)",
    ),
    Kind(
        "key_value",
        r"(?i:" + _KEY_WORDS + r")\\?[\"']?\s{0,16}[:=]\s{0,16}"
        r"(?:\\?\"(?P<secret>[^\"\\\r\n]+)|\\?'(?P<secret2>[^'\\\r\n]+)"
        r"|(?:(?i:bearer|basic|token)\s{1,16})?(?P<secret3>" + _UNQUOTED + r"))",
    ),
)
"""The built-in kinds, specific before generic."""

SECRET_KEY: Final = (
    r"(?i)(?:.*(?:" + _KEY_WORDS + r"|secret[_-]?key|session[_-]?key|set-cookie)"
    r"|(?:.*[_.-])?auth)"
)
"""A mapping key that names a secret (matched against the whole key): its value is replaced
whatever it looks like (``api_key``, ``x-api-key``, ``SecretAccessKey``, ``db.password``,
``http.request.header.authorization``; not ``max_tokens`` or ``session.id``)."""
