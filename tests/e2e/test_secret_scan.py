"""The secret scan refuses credentials in metadata/config and lets ordinary data pass.

Pure functions, so these tests need no stack. Fake credentials are assembled from
pieces so the source itself carries no realistic token.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import time
import uuid
from typing import Any

import pytest

from waybill.common.secret_scan import (
    find_secret,
    is_credential_key,
    iter_secrets,
    key_words,
)
from waybill.common.token_formats import TOKEN_FORMATS, token_format_in


def b64url(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


ALNUM = "aB3dE5gH7jK9mN1pQ2rS4tU6vW8xY0zC"  # 32 mixed characters, reused below
JWT = ".".join(
    [b64url({"alg": "HS256", "typ": "JWT"}), b64url({"sub": "1234567890"}), "dBjftJeZ4CVPmB92K27u"]
)
PEM_HEAD = "-----BEGIN " + "RSA PRIVATE KEY-----"

# --- key names --------------------------------------------------------------------

CREDENTIAL_KEYS = [
    "api_key",
    "apiKey",
    "APIKey",
    "API-KEY",
    "apikey",
    "x_api_key",
    "x-api-key",
    "openai_api_key",
    "OPENAI_API_KEY",
    "openaiApiKey",
    "client_secret",
    "clientSecret",
    "secret",
    "webhook_secret",
    "access_token",
    "accessToken",
    "refresh_token",
    "auth_token",
    "X-Auth-Token",
    "session_token",
    "id_token",
    "token",
    "hf_token",
    "GITHUB_TOKEN",
    "x-amz-security-token",
    "OAuth2Token",
    "password",
    "Password",
    "db_password",
    "password2",
    "passwd",
    "passphrase",
    "private_key",
    "privateKey",
    "ssh_private_key",
    "secret_key",
    "aws_secret_access_key",
    "authorization",
    "Authorization",
    "Proxy-Authorization",
    "credentials",
    "gcp_credentials",
    "credential",
    "bearer",
    "cookie",
    "Set-Cookie",
    "secrets",
    "api_keys",
    "access_tokens",
    "signing_key",
    "encryption_key",
]

ORDINARY_KEYS = [
    "token_count",
    "max_tokens",
    "tokens",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "completion_tokens",
    "secretary",
    "author",
    "authors",
    "keyboard",
    "key",
    "keys",
    "sort_key",
    "cache_key",
    "input_key",
    "output_key",
    "primary_key",
    "public_key",
    "idempotency_key",
    "thread_id",
    "passage",
    "secret_name",
    "password_policy",
    "password_hash",
    "credentials_path",
    "private_key_id",
    "aws_access_key_id",
    "token_type",
    "eos_token",
    "pad_token_id",
    "next_token",
    "page_token",
    "stop_token",
    "cookie_consent",
    "session_id",
    "user_id",
    "model_name",
    "temperature",
    "",
    "123",
]


@pytest.mark.parametrize("key", CREDENTIAL_KEYS)
def test_credential_key_names_are_refused(key: str) -> None:
    assert is_credential_key(key)
    finding = find_secret({key: "hunter2"}, "metadata")
    assert finding is not None
    assert finding.kind == "key_name"
    assert finding.reason == "credential-like key name"


@pytest.mark.parametrize("key", ORDINARY_KEYS)
def test_ordinary_key_names_pass(key: str) -> None:
    assert not is_credential_key(key)
    assert find_secret({key: "plain value 42"}, "metadata") is None


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("openaiApiKey", ["openai", "api", "key"]),
        ("OPENAI-API-KEY", ["openai", "api", "key"]),
        ("APIKey", ["api", "key"]),
        ("x.api key", ["x", "api", "key"]),
        ("apikey", ["api", "key"]),
        ("api_key_2", ["api", "key"]),
        ("secretary", ["secretary"]),
    ],
)
def test_key_words_split_case_separators_and_fused_spellings(key: str, words: list[str]) -> None:
    assert key_words(key) == words


@pytest.mark.parametrize("value", [None, True, False, "", "   ", [], {}, [None, ""], {"a": None}])
def test_credential_key_holding_nothing_passes(value: Any) -> None:
    assert find_secret({"api_key": value, "has_password": True}, "config") is None


@pytest.mark.parametrize("value", ["x", 1234, 0, 1.5, ["x"], {"openai": "hunter2"}, [[{"a": 1}]]])
def test_credential_key_holding_something_is_refused(value: Any) -> None:
    finding = find_secret({"secrets": value}, "config")
    assert finding is not None
    assert finding.path == "config.secrets"


# --- token formats ----------------------------------------------------------------

SECRET_VALUES = {
    "openai legacy": "sk-" + ALNUM + "abcd",
    "openai project": "sk-" + "proj-" + ALNUM + "_-xyz",
    "openai service account": "sk-" + "svcacct-" + ALNUM,
    "anthropic": "sk-" + "ant-" + "api03-" + ALNUM + "AA",
    "openrouter": "sk-" + "or-v1-" + "0123456789abcdef" * 4,
    "openai in prose": "use key sk-" + ALNUM + " for the demo",
    "stripe": "sk_" + "live_" + ALNUM[:24],
    "bearer header": "Bearer " + ALNUM,
    "bearer lower case": "authorization: bearer " + ALNUM[:20],
    "bearer jwt": "Bearer " + JWT,
    "basic header": "Basic " + base64.b64encode(b"alice:wonderland").decode(),
    "pem rsa": PEM_HEAD + "\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
    "pem pkcs8": "-----BEGIN " + "PRIVATE KEY-----\nMIIE",
    "pem encrypted": "-----BEGIN " + "ENCRYPTED PRIVATE KEY-----",
    "pem openssh": "-----BEGIN " + "OPENSSH PRIVATE KEY-----",
    "pem pgp": "-----BEGIN " + "PGP PRIVATE KEY BLOCK-----",
    "aws key id": "AKIA" + "IOSFODNN7EXAMPLE",
    "aws session key id": "ASIA" + "Y34FZKBOKMUTVV7A",
    "aws in config line": "aws_access_key_id=" + "AKIA" + "IOSFODNN7EXAMPLE",
    "google api key": "AIza" + "SyA-" + ALNUM[:31],
    "github classic": "ghp_" + ALNUM + "wxyz",
    "github oauth": "gho_" + ALNUM + "wxyz",
    "github server": "ghs_" + ALNUM + "wxyz",
    "github fine grained": "github_pat_" + "11ABCDEFG0" + ALNUM + "_" + ALNUM,
    "slack bot": "xoxb-" + "1234567890-" + "0987654321-" + ALNUM[:24],
    "slack user": "xoxp-" + "1234567890-" + ALNUM[:12],
    "hugging face": "hf_" + "abcdefghijklmnopqrstuvwxyzABCDEFGH",
    "langsmith": "lsv2_" + "pt_" + "0123456789abcdef" * 2 + "_" + "0123456789",
    "jwt": JWT,
    "jwt unsigned": JWT.rsplit(".", 1)[0] + ".",
    "url with password": "postgresql://" + "app:s3cr3t" + "@db.internal:5432/app",
    "redis url with password": "redis://" + "default:pa55" + "@cache:6379/0",
    "https url with password": "see https://" + "bob:builder" + "@example.com/x",
}

ORDINARY_VALUES = {
    "uuid": str(uuid.uuid4()),
    "uuid hex": uuid.uuid4().hex,
    "sha256": hashlib.sha256(b"x").hexdigest(),
    "md5": hashlib.md5(b"x").hexdigest(),
    "git sha": "4a71a9412b5c0d3e8f9a6b7c1d2e3f4a5b6c7d8e",
    "ulid": "01ARZ3NDEKTSV4RRFFQ69G5FAV",
    "base64 of text": base64.b64encode(b"Hello, world! This is ordinary text.").decode(),
    "data url": "data:image/png;base64," + base64.b64encode(bytes(range(64))).decode(),
    "plain url": "https://example.com/path?x=1&y=two#frag",
    "url with user only": "postgres://app@db.internal/app",
    "url with port": "http://localhost:8080/a@b",
    "url with port and query": "https://host:8443?next=a@b",
    "email": "bob@example.com",
    "mailto": "mailto:bob@example.com",
    "ask prose": "ask-me anything about risk-assessment-frameworks-and-tasks",
    "task id": "task-" + "0123456789abcdef" * 2,
    "sk prefix short": "sk-learn",
    "sk slug": "sk-this-is-a-long-hyphenated-article-slug-2024",
    "bearer prose": "The bearer instruments were redeemed by the bearer of this note.",
    "bearer long word": "paid to the bearer counterproductively, under-the-table.",
    "bearer short": "Bearer abc",
    "basic prose": "Basic information about the plan: see below.",
    "basic base64 without colon": "Basic " + base64.b64encode(b"justaword").decode(),
    "pem public key": "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkq",
    "pem certificate": "-----BEGIN CERTIFICATE-----\nMIID",
    "akia too short": "AKIA12345",
    "akia lower case": "akia" + "iosfodnn7example",
    "akia inside longer id": "XAKIA" + "IOSFODNN7EXAMPLEX",
    "aiza too short": "AIzaShort",
    "ghp short": "ghp_short",
    "github_pat alone": "github_pat",
    "xoxo": "xoxo-hugs and kisses",
    "hf identifier": "hf_hub_download",
    "stripe short": "sk_test_123",
    "eyJ alone": "eyJhbGciOiJIUzI1NiJ9",
    "dotted triple not jwt": b64url({"a": 1}) + "." + b64url({"b": 2}) + ".sig",
    "version": "1.2.3",
    "timestamp": "2024-05-01T12:00:00+00:00",
    "prose": "Summarise the secret garden; the password policy lives in the wiki.",
}


@pytest.mark.parametrize("value", SECRET_VALUES.values(), ids=SECRET_VALUES.keys())
def test_known_token_formats_are_refused(value: str) -> None:
    label = token_format_in(value)
    assert label in {token_format.label for token_format in TOKEN_FORMATS}
    finding = find_secret({"note": value}, "metadata")
    assert finding is not None
    assert (finding.kind, finding.path) == ("token_format", "metadata.note")
    assert finding.reason == f"value looks like {label}"
    assert finding.reason.startswith("value looks like ")


@pytest.mark.parametrize("value", ORDINARY_VALUES.values(), ids=ORDINARY_VALUES.keys())
def test_ordinary_values_pass(value: str) -> None:
    assert token_format_in(value) is None
    assert find_secret({"note": value, "items": [value]}, "metadata") is None


@pytest.mark.parametrize(
    ("value", "named"),
    [
        (SECRET_VALUES["anthropic"], "Anthropic API key (sk-ant-…)"),
        (SECRET_VALUES["openai project"], "OpenAI-style API key (sk-…)"),
        (SECRET_VALUES["aws key id"], "AWS access key id"),
        (SECRET_VALUES["pem rsa"], "PEM private key"),
        (SECRET_VALUES["github classic"], "GitHub token"),
        (SECRET_VALUES["jwt"], "JSON Web Token"),
        (SECRET_VALUES["url with password"], "URL with embedded credentials"),
    ],
)
def test_reason_names_the_format(value: str, named: str) -> None:
    finding = find_secret(value, "config")
    assert finding is not None
    assert named in finding.reason


def test_a_key_that_is_itself_a_token_is_refused_at_its_parent() -> None:
    token = SECRET_VALUES["github classic"]
    finding = find_secret({"tags": {token: 1}}, "metadata")
    assert finding is not None
    assert finding.path == "metadata.tags"
    assert finding.reason.startswith("a key looks like a GitHub token")
    assert token not in finding.message()


# --- paths and messages -----------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "root", "path"),
    [
        ({"configurable": {"openai_api_key": "x"}}, "config", "config.configurable.openai_api_key"),
        (
            {"items": [{}, {"a": 1}, {"auth_token": "x"}]},
            "metadata",
            "metadata.items[2].auth_token",
        ),
        ({"items": [["ok", SECRET_VALUES["jwt"]]]}, "metadata", "metadata.items[0][1]"),
        ({"x-api-key": "x"}, "metadata", 'metadata["x-api-key"]'),
        ({"headers": {"Authorization": "x"}}, "config", "config.headers.Authorization"),
        ({"odd key": {"password": "x"}}, "metadata", 'metadata["odd key"].password'),
        ([{"note": SECRET_VALUES["aws key id"]}], "metadata", "metadata[0].note"),
        (SECRET_VALUES["slack bot"], "metadata", "metadata"),
    ],
)
def test_path_names_where_the_secret_is(value: Any, root: str, path: str) -> None:
    finding = find_secret(value, root)
    assert finding is not None
    assert finding.path == path


def test_first_finding_is_in_document_order() -> None:
    value = {"a": {"b": [SECRET_VALUES["jwt"]]}, "password": "x", "c": SECRET_VALUES["aws key id"]}
    assert [f.path for f in iter_secrets(value, "metadata")] == [
        "metadata.a.b[0]",
        "metadata.password",
        "metadata.c",
    ]
    first = find_secret(value, "metadata")
    assert first is not None and first.path == "metadata.a.b[0]"


def test_scan_stops_at_a_credential_key_and_reports_it_once() -> None:
    value = {"credentials": {"openai": SECRET_VALUES["openai legacy"]}}
    assert [f.path for f in iter_secrets(value, "config")] == ["config.credentials"]


def test_message_is_the_422_detail() -> None:
    finding = find_secret({"api_key": "hunter2"}, "metadata")
    assert finding is not None
    assert finding.message() == (
        "metadata.api_key: credential-like key name; pass request-scoped secrets in context.secrets"
    )
    token_finding = find_secret({"configurable": {"k": SECRET_VALUES["anthropic"]}}, "config")
    assert token_finding is not None
    assert token_finding.message() == (
        "config.configurable.k: value looks like an Anthropic API key (sk-ant-…); "
        "pass request-scoped secrets in context.secrets"
    )


FIXED_REASONS = {"credential-like key name"} | {
    f"{lead} {token_format.label}"
    for token_format in TOKEN_FORMATS
    for lead in ("value looks like", "a key looks like")
}


@pytest.mark.parametrize("value", SECRET_VALUES.values(), ids=SECRET_VALUES.keys())
def test_message_never_echoes_the_secret(value: str) -> None:
    for wrapped in ({"note": value}, {"password": value}, {"k": [value]}, {value: "v"}):
        finding = find_secret(wrapped, "metadata")
        assert finding is not None
        assert value not in finding.message()
        # The reason is one of a fixed set of texts, so only the path could leak,
        # and it holds no piece of the value.
        assert finding.reason in FIXED_REASONS
        for i in range(len(value) - 8):
            assert value[i : i + 8] not in finding.path


def test_long_odd_keys_are_shortened_in_paths() -> None:
    key = "k " * 100
    finding = find_secret({key: {"password": "x"}}, "metadata")
    assert finding is not None
    assert len(finding.path) < 100
    assert finding.path.endswith('…"].password')


def test_scalars_and_empty_roots_pass() -> None:
    for value in (None, 1, 2.5, True, "", {}, [], "hello"):
        assert find_secret(value, "metadata") is None


def test_deep_nesting_does_not_hit_the_recursion_limit() -> None:
    value: Any = {"token": "x"}
    for _ in range(5000):
        value = {"a": [value]}
    finding = find_secret(value, "metadata")
    assert finding is not None
    assert finding.path.endswith(".a[0].token")


ADVERSARIAL = {
    "dotted words before a scheme": "a." * 50_000 + "://",
    "sk runs": "sk-a" * 25_000,
    "jwt starts": "eyJ-" * 25_000,
    "jwt segments": "eyJa." * 20_000,
    "google starts": "AIza-" * 20_000,
    "url userinfo": "x://" + "a:" * 50_000,
    "pem words": "-----BEGIN " + "A " * 50_000,
    "bearer spaces": "bearer " + " " * 100_000,
    "basic headers": "Basic QUJD " * 9_000,
}


@pytest.mark.parametrize("value", ADVERSARIAL.values(), ids=ADVERSARIAL.keys())
def test_scanning_stays_linear_on_adversarial_strings(value: str) -> None:
    # Linear scans take tens of milliseconds here; a quadratic pattern took 20-50 s.
    started = time.perf_counter()
    assert find_secret({"note": value}, "metadata") is None
    assert time.perf_counter() - started < 3.0


def test_scan_does_not_mutate_its_input() -> None:
    value = {"items": [{"password": "x"}, {"note": SECRET_VALUES["jwt"]}]}
    before = copy.deepcopy(value)
    list(iter_secrets(value, "metadata"))
    assert value == before
