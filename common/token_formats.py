"""Known credential formats: published prefixes and structures a string may hold
(`sk-ant-`, `AKIA`, `ghp_`, a PEM private-key header, a JWT whose header decodes
to JSON with `alg`, an HTTP `Basic` credential that decodes to `user:password`,
a URL with `user:password@`). Used by secret_scan.py on every string it walks."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable
from dataclasses import dataclass


def _b64decode(text: str, *, urlsafe: bool) -> bytes | None:
    padded = text + "=" * (-len(text) % 4)
    try:
        if urlsafe:
            return base64.urlsafe_b64decode(padded)
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        return None


def _is_basic_credential(token: str) -> bool:
    """`Basic` is followed by base64 of `user:password`, not by a word of prose."""
    raw = _b64decode(token, urlsafe=False)
    if raw is None:
        return False
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return ":" in text and text.isprintable()


def _is_jwt(token: str) -> bool:
    """A JWT's first segment is base64url JSON naming its signing algorithm."""
    raw = _b64decode(token.split(".", 1)[0], urlsafe=True)
    if raw is None:
        return False
    try:
        header = json.loads(raw)
    except ValueError:
        return False
    return isinstance(header, dict) and "alg" in header


@dataclass(frozen=True)
class TokenFormat:
    """A published credential shape.

    `clues` are lowercase pieces every match contains: most strings hold none, and
    then the regex is skipped. `confirm` checks a match's structure.
    """

    label: str
    clues: tuple[str, ...]
    pattern: re.Pattern[str]
    confirm: Callable[[str], bool] | None = None

    def found_in(self, text: str, lowered: str) -> bool:
        if not any(clue in lowered for clue in self.clues):
            return False
        for match in self.pattern.finditer(text):
            token = match.group("token") if "token" in self.pattern.groupindex else match[0]
            if self.confirm is None or self.confirm(token):
                return True
        return False


# Lookbehinds keep a token from starting mid-word. Each pattern either starts once
# per run of its body's characters or stops at a bounded length, so scanning stays
# linear in the length of the string (tests/e2e/test_secret_scan.py times the worst cases).
_NOT_AFTER_ALNUM = r"(?<![A-Za-z0-9])"
_NOT_AFTER_WORD = r"(?<![A-Za-z0-9_])"

TOKEN_FORMATS: tuple[TokenFormat, ...] = (
    TokenFormat(
        "a PEM private key block (-----BEGIN … PRIVATE KEY-----)",
        ("-----begin",),
        re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
    ),
    TokenFormat(
        "an Anthropic API key (sk-ant-…)",
        ("sk-ant-",),
        re.compile(_NOT_AFTER_ALNUM + r"sk-ant-[A-Za-z0-9_-]{20,}"),
    ),
    TokenFormat(
        "an OpenAI-style API key (sk-…)",
        ("sk-",),
        re.compile(
            _NOT_AFTER_ALNUM
            + r"sk-(?:(?:proj|svcacct|admin|None|or-v1)-[A-Za-z0-9_-]{20,}|[A-Za-z0-9]{32,})"
        ),
    ),
    TokenFormat(
        "a Stripe secret key (sk_live_…)",
        ("k_live_", "k_test_"),
        re.compile(_NOT_AFTER_ALNUM + r"[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"),
    ),
    TokenFormat(
        "an AWS access key id (AKIA…/ASIA…)",
        ("akia", "asia"),
        re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])"),
    ),
    TokenFormat(
        "a Google API key (AIza…)",
        ("aiza",),
        re.compile(_NOT_AFTER_WORD + r"AIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])"),
    ),
    TokenFormat(
        "a GitHub token (ghp_…/github_pat_…)",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        re.compile(
            _NOT_AFTER_WORD + r"(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"
        ),
    ),
    TokenFormat(
        "a Slack token (xox…-)",
        ("xox",),
        re.compile(_NOT_AFTER_ALNUM + r"xox[abposr]-[A-Za-z0-9-]{10,}"),
    ),
    TokenFormat(
        "a Hugging Face token (hf_…)",
        ("hf_",),
        re.compile(_NOT_AFTER_WORD + r"hf_[A-Za-z]{34}(?![A-Za-z0-9_])"),
    ),
    TokenFormat(
        "a LangSmith API key (lsv2_…)",
        ("lsv2_",),
        re.compile(_NOT_AFTER_WORD + r"lsv2_(?:pt|sk)_[0-9a-f]{32}_[0-9a-f]{10}"),
    ),
    TokenFormat(
        "a JSON Web Token (eyJ….eyJ….…)",
        ("eyj",),
        re.compile(
            r"(?<![A-Za-z0-9_-])(?P<token>eyJ[A-Za-z0-9_-]+\.eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*)"
        ),
        _is_jwt,
    ),
    TokenFormat(
        # A digit in the token keeps prose ("bearer instruments") out.
        "an HTTP Bearer credential (Bearer …)",
        ("bearer",),
        re.compile(r"(?i)\bbearer\s+(?=[A-Za-z0-9._~+/-]*[0-9])[A-Za-z0-9._~+/-]{16,}=*"),
    ),
    TokenFormat(
        "an HTTP Basic credential (Basic …)",
        ("basic",),
        re.compile(r"(?i)\bbasic\s+(?P<token>[A-Za-z0-9+/]{4,}={0,2})(?![A-Za-z0-9+/=])"),
        _is_basic_credential,
    ),
    TokenFormat(
        "a URL with embedded credentials (scheme://user:password@host)",
        ("://",),
        # RFC 3986 userinfo characters, so `host:8443?next=a@b` is not a password.
        re.compile(r"(?i)\b[a-z][a-z0-9+.-]{0,31}://[\w.~%!$&'()*+,;=-]+:[\w.~%!$&'()*+,;=:-]+@"),
    ),
)


_ALL_CLUES = tuple(clue for token_format in TOKEN_FORMATS for clue in token_format.clues)


def token_format_in(text: str) -> str | None:
    """The label of the first known credential format found in `text`."""
    lowered = text.lower()
    # Almost every string holds no clue at all; one loop settles those.
    if not any(clue in lowered for clue in _ALL_CLUES):
        return None
    for token_format in TOKEN_FORMATS:
        if token_format.found_in(text, lowered):
            return token_format.label
    return None
