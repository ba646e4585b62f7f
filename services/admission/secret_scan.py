"""Find credentials in a run's `metadata` and `config` before anything is stored.

Both are persisted in clear and shown in every read, so a credential there leaks.
Request-scoped secrets have one sanctioned place, `context.secrets`, which is a
different root: callers scan `metadata` and `config` with `find_secret` (reads hide
`context.secrets` through common/sealed.py). Pure functions over JSON-like data, no I/O.

Two rules, and no entropy guessing, so ordinary ids and hashes always pass:

Key names. A key is split into lowercase words at `_`, `-`, `.`, spaces and
camelCase (`openaiApiKey`, `OPENAI-API-KEY` -> openai, api, key); pure numbers
are dropped (`password2`) and a few fused spellings are split (`apikey`,
`accesstoken`). The last word says what the value *is* (`secret_name` is a name,
`token_count` a count), so the rule looks at that head word and the word before:

- head is password(s), passwd, passphrase, secret(s), credential(s),
  authorization, bearer or cookie(s): credential-like;
- head is `token`: credential-like unless the word before marks a vocabulary or
  paging token (`eos_token`, `next_token`; see BENIGN_TOKEN_MODIFIERS), so
  `token`, `access_token` and `hf_token` are refused;
- head is `key`, `keys` or `tokens`: credential-like only after a credential
  qualifier (`api_key`, `private_key`, `secret_key`, `access_tokens`; see
  CREDENTIAL_QUALIFIERS), so `key`, `sort_key`, `max_tokens` and `input_tokens` pass.

A credential-like key is refused only when it holds something: a non-empty
string, a number, or a list/object containing one. `null`, booleans and empty
strings name no secret (`"api_key": null`, `"has_password": true`).

Known token formats, anywhere in any string (keys included): see TOKEN_FORMATS.
Each is a published prefix or structure (`sk-ant-`, `AKIA`, `ghp_`, a PEM
private-key header, a JWT whose header decodes to JSON with `alg`, an HTTP
`Basic` credential that decodes to `user:password`, a URL with `user:password@`).

A finding names the path and the reason, never the value.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from waybill.common.errors import invalid

SANCTIONED_PLACE = "context.secrets"

# Head words that name a credential whatever comes before them.
CREDENTIAL_HEADS = frozenset(
    {
        "password",
        "passwords",
        "passwd",
        "passphrase",
        "secret",
        "secrets",
        "credential",
        "credentials",
        "authorization",
        "bearer",
        "cookie",
        "cookies",
    }
)
# `key`, `keys` and `tokens` name a credential only after one of these.
QUALIFIED_HEADS = frozenset({"key", "keys", "tokens"})
CREDENTIAL_QUALIFIERS = frozenset(
    {
        "api",
        "access",
        "refresh",
        "auth",
        "secret",
        "private",
        "session",
        "signing",
        "encryption",
        "master",
        "client",
        "bearer",
        "oauth",
        "ssh",
        "hmac",
        "subscription",
    }
)
# A singular `token` is a credential unless it is a model-vocabulary or paging token.
BENIGN_TOKEN_MODIFIERS = frozenset(
    {
        "eos",
        "bos",
        "pad",
        "unk",
        "sep",
        "cls",
        "mask",
        "special",
        "start",
        "end",
        "stop",
        "image",
        "audio",
        "video",
        "first",
        "last",
        "max",
        "min",
        "next",
        "page",
        "pagination",
        "continuation",
        "cursor",
        "sync",
        "resume",
        "idempotency",
        "cancel",
        "cancellation",
    }
)
FUSED_WORDS: dict[str, tuple[str, ...]] = {
    "apikey": ("api", "key"),
    "apikeys": ("api", "keys"),
    "apitoken": ("api", "token"),
    "accesskey": ("access", "key"),
    "accesstoken": ("access", "token"),
    "authtoken": ("auth", "token"),
    "refreshtoken": ("refresh", "token"),
    "sessiontoken": ("session", "token"),
    "idtoken": ("id", "token"),
    "bearertoken": ("bearer", "token"),
    "privatekey": ("private", "key"),
    "secretkey": ("secret", "key"),
    "clientsecret": ("client", "secret"),
}

_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_KEY_SHOWN = 64


def key_words(key: str) -> list[str]:
    """The lowercase words of a key, numbers dropped, fused spellings split."""
    words: list[str] = []
    for word in _WORD.findall(key):
        if word.isdigit():
            continue
        lowered = word.lower()
        words.extend(FUSED_WORDS.get(lowered, (lowered,)))
    return words


def is_credential_key(key: str) -> bool:
    """Whether a key name says its value is a credential (see the module rules)."""
    words = key_words(key)
    if not words:
        return False
    head = words[-1]
    modifier = words[-2] if len(words) > 1 else None
    if head in CREDENTIAL_HEADS:
        return True
    if head == "token":
        return modifier not in BENIGN_TOKEN_MODIFIERS
    return head in QUALIFIED_HEADS and modifier in CREDENTIAL_QUALIFIERS


# --- token formats ---------------------------------------------------------------


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
# linear in the length of the string (tests/test_secret_scan.py times the worst cases).
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


# --- walking ---------------------------------------------------------------------


@dataclass(frozen=True)
class SecretFinding:
    """Where a credential was found and why; never the credential itself."""

    path: str
    kind: Literal["key_name", "token_format"]
    reason: str

    def message(self) -> str:
        """The 422 `detail`, e.g. `metadata.api_key: credential-like key name; ...`."""
        return f"{self.path}: {self.reason}; pass request-scoped secrets in {SANCTIONED_PLACE}"


def _child_path(path: str, key: Any) -> str:
    text = str(key)
    if _IDENTIFIER.fullmatch(text):
        return f"{path}.{text}"
    if len(text) > _MAX_KEY_SHOWN:
        text = text[:_MAX_KEY_SHOWN] + "…"
    return f"{path}[{json.dumps(text, ensure_ascii=False)}]"


def _holds_something(value: Any) -> bool:
    """A non-empty string or a number, possibly inside lists and objects."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, bool) or item is None:
            continue
        if isinstance(item, str):
            if item.strip():
                return True
        elif isinstance(item, int | float):
            return True
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


def iter_secrets(value: Any, root: str) -> Iterator[SecretFinding]:
    """Every finding under `value`, depth first in document order.

    Does not descend below a finding, so a reported path never passes through a
    key that is itself a credential.
    """
    # Work items: (path, value) to scan, or (parent path, key, value) for an entry.
    stack: list[tuple[str, Any] | tuple[str, Any, Any]] = [(root, value)]
    while stack:
        work = stack.pop()
        if len(work) == 3:
            path, key, child = work
            finding = _check_entry(path, key, child)
            if finding is not None:
                yield finding
            else:
                stack.append((_child_path(path, key), child))
            continue
        path, item = work
        if isinstance(item, str):
            label = token_format_in(item)
            if label is not None:
                yield SecretFinding(path, "token_format", f"value looks like {label}")
        elif isinstance(item, dict):
            stack.extend((path, key, child) for key, child in reversed(item.items()))
        elif isinstance(item, list | tuple):
            stack.extend((f"{path}[{i}]", child) for i, child in reversed(list(enumerate(item))))


def _check_entry(path: str, key: Any, child: Any) -> SecretFinding | None:
    if isinstance(key, str):
        label = token_format_in(key)
        if label is not None:
            return SecretFinding(path, "token_format", f"a key looks like {label}")
        if is_credential_key(key) and _holds_something(child):
            return SecretFinding(_child_path(path, key), "key_name", "credential-like key name")
    return None


def find_secret(value: Any, root: str) -> SecretFinding | None:
    """The first credential under `value` (e.g. a run's `metadata`), or None."""
    return next(iter_secrets(value, root), None)


def refuse_secrets(metadata: Any, config: Any) -> None:
    """A 422 naming the path of the first credential in `metadata` or `config`
    (a run's, or an assistant's, whose config every run of it inherits)."""
    for root, value in (("metadata", metadata), ("config", config)):
        finding = find_secret(value, root)
        if finding is not None:
            raise invalid(finding.message())
