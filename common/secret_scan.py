"""Find credentials in a run's `metadata` and `config` (an assistant's, a thread's
metadata, a store item's value) before anything is stored.

All are persisted in clear and shown in every read, so a credential there leaks.
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

Known token formats, anywhere in any string (keys included): see token_formats.py.
Each is a published prefix or structure (`sk-ant-`, `AKIA`, `ghp_`, a PEM
private-key header, a JWT whose header decodes to JSON with `alg`, an HTTP
`Basic` credential that decodes to `user:password`, a URL with `user:password@`).

A finding names the path and the reason, never the value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from waybill.common.errors import invalid
from waybill.common.token_formats import token_format_in

SANCTIONED_PLACE = "context.secrets"
RUN_ADVICE = f"pass request-scoped secrets in {SANCTIONED_PLACE}"
STORE_ADVICE = "store values are kept in clear and read back as stored: keep credentials out"

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


# --- walking ---------------------------------------------------------------------


@dataclass(frozen=True)
class SecretFinding:
    """Where a credential was found and why; never the credential itself."""

    path: str
    kind: Literal["key_name", "token_format"]
    reason: str

    def message(self, advice: str = RUN_ADVICE) -> str:
        """The 422 `detail`, e.g. `metadata.api_key: credential-like key name; ...`."""
        return f"{self.path}: {self.reason}; {advice}"


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


def refuse_stored_secrets(value: Any) -> None:
    """A 422 naming the path of the first credential in a store item's `value`."""
    finding = find_secret(value, "value")
    if finding is not None:
        raise invalid(finding.message(STORE_ADVICE))
