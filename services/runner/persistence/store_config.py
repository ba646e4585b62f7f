"""The project's `store` key (langgraph.json), checked once at start.

`store.index` turns on semantic search: `embed` (a `./file.py:function` or a
LangChain provider string such as `openai:text-embedding-3-small`), `dims`, and
`fields` (the JSON paths embedded, `["$"]`: the whole value). `store.ttl` makes
items expire. Anything wrong stops start-up with a `ProjectError` naming the key.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import Any

from langchain_core.embeddings import Embeddings
from langgraph.store.base import IndexConfig, TTLConfig, ensure_embeddings

from waybill.common.project import Project, ProjectError, load_attribute
from waybill.common.settings import Settings

TTL_KEYS = {"refresh_on_read", "default_ttl", "sweep_interval_minutes"}


@dataclass(frozen=True)
class StoreConfig:
    index: IndexConfig | None = None  # with `embed` resolved to an Embeddings
    ttl: TTLConfig | None = None


def store_config(settings: Settings) -> StoreConfig:
    project = settings.project()
    if project is None:
        return StoreConfig()
    section = project.section("store")
    if section is None:
        return StoreConfig()
    if not isinstance(section, dict):
        raise ProjectError("store: must be an object with `index` and/or `ttl`")
    index = section.get("index")
    ttl = section.get("ttl")
    return StoreConfig(
        index=None if index is None else index_config(index, project),
        ttl=None if ttl is None else ttl_config(ttl, "store.ttl"),
    )


def index_config(raw: Any, project: Project) -> IndexConfig:
    if not isinstance(raw, dict):
        raise ProjectError("store.index: must be an object {embed, dims, fields}")
    dims = raw.get("dims")
    if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
        raise ProjectError(f"store.index.dims: a positive integer is required (got {dims!r})")
    fields = raw.get("fields", ["$"])
    if not isinstance(fields, list) or not all(isinstance(f, str) and f for f in fields):
        raise ProjectError(f"store.index.fields: a list of JSON paths is required (got {fields!r})")
    embed = raw.get("embed")
    if not isinstance(embed, str) or ":" not in embed:
        raise ProjectError(
            "store.index.embed: `./file.py:function` or `provider:model` is required "
            f"(got {embed!r})"
        )
    return IndexConfig(dims=dims, fields=fields or ["$"], embed=resolve_embeddings(embed, project))


def resolve_embeddings(embed: str, project: Project) -> Embeddings:
    """As LangGraph Platform reads `embed`: a path containing `.py:` is a file's
    function (sync or async, list[str] -> list[list[float]]); anything else is a
    provider string for LangChain's `init_embeddings`."""
    if ".py:" in embed:
        return ensure_embeddings(_function_of(project.resolve(embed), embed))
    return _provider_embeddings(embed)


def _function_of(location: str, given: str) -> Any:
    try:
        function = load_attribute(location)
    except Exception as error:  # the user's module may raise anything as it imports
        raise ProjectError(f"store.index.embed {given!r}: cannot be loaded ({error})") from error
    if not callable(function):
        raise ProjectError(f"store.index.embed {given!r}: is not a function")
    return function


def _provider_embeddings(embed: str) -> Embeddings:
    provider, _, model = embed.partition(":")
    if provider == "openai" and model:
        return _openai_embeddings(embed, model)
    if importlib.util.find_spec("langchain") is not None:
        from langchain.embeddings import init_embeddings

        try:
            return init_embeddings(embed)
        except Exception as error:  # its errors name the missing package or provider
            raise ProjectError(f"store.index.embed {embed!r}: {error}") from error
    raise ProjectError(
        f"store.index.embed {embed!r}: provider strings other than `openai:` need LangChain's "
        "init_embeddings: `pip install langchain` (and the provider's package), or give "
        "`./file.py:function`"
    )


def _openai_embeddings(embed: str, model: str) -> Embeddings:
    """`openai:<model>` through the bundled langchain-openai, with or without `langchain`."""
    from langchain_openai import OpenAIEmbeddings

    try:
        # An OpenAI-compatible server (OPENAI_BASE_URL) takes texts, not tiktoken ids
        # (whose tables tiktoken would otherwise download from the internet).
        compatible = bool(os.environ.get("OPENAI_BASE_URL"))
        return OpenAIEmbeddings(model=model, check_embedding_ctx_length=not compatible)
    except Exception as error:  # e.g. no OPENAI_API_KEY
        raise ProjectError(f"store.index.embed {embed!r}: {error}") from error


def ttl_config(raw: Any, where: str) -> TTLConfig:
    if not isinstance(raw, dict):
        raise ProjectError(f"{where}: must be an object")
    unknown = set(raw) - TTL_KEYS
    if unknown:
        raise ProjectError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(TTL_KEYS)})")
    refresh = raw.get("refresh_on_read", True)
    if not isinstance(refresh, bool):
        raise ProjectError(f"{where}.refresh_on_read: true or false")
    config = TTLConfig(refresh_on_read=refresh)
    for key in ("default_ttl", "sweep_interval_minutes"):
        value = raw.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ProjectError(f"{where}.{key}: a positive number of minutes (got {value!r})")
        config[key] = value  # type: ignore[literal-required]
    return config
