"""Semantic search on a Postgres without pgvector.

LangGraph's Postgres store keeps its vectors in pgvector columns; where the
server lacks the extension, `SimilarityStore` wraps the plain store instead: each
put's embedded fields go to a table of our own beside LangGraph's `store` (one
row per field, the vector as `real[]`, deleted with its item by a foreign key),
and a search with `query` reads every item under the namespace prefix that
matches the filter, ranks them by cosine similarity in Python, then pages.

Cost: a query search reads all candidate items and their vectors (O(items under
the prefix) rows and `dims` floats each) on every call; fine for thousands of
items per user, not for millions. Install pgvector to search in the database.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
)

TABLE = "waybill_store_embeddings"
ALL = 2**62  # "no limit" for the candidate read (Postgres LIMIT takes a bigint)

CREATE = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    prefix text NOT NULL,
    key text NOT NULL,
    field_name text NOT NULL,
    embedding real[] NOT NULL,
    PRIMARY KEY (prefix, key, field_name),
    FOREIGN KEY (prefix, key) REFERENCES store (prefix, key) ON DELETE CASCADE
)"""


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def _prefix_text(namespace: tuple[str, ...]) -> str:
    return ".".join(namespace)  # as LangGraph's Postgres store writes `prefix`


class SimilarityStore(BaseStore):
    """A LangGraph `AsyncPostgresStore` (without index) plus our embeddings table."""

    supports_ttl = True

    def __init__(self, inner: Any, index: IndexConfig) -> None:
        self.inner = inner
        self.index_config = index
        self.dims = int(index["dims"])
        self.embeddings: Embeddings = ensure_embeddings(index["embed"])
        fields = index.get("fields") or ["$"]
        self.fields = [(f, tokenize_path(f) if f != "$" else "$") for f in fields]
        self.ttl_config = inner.ttl_config

    # ---- what the runner calls on its store -------------------------------------

    async def setup(self) -> None:
        await self.inner.setup()
        async with self.inner._cursor() as cur:  # the store's own connection and lock
            await cur.execute(CREATE)

    async def check(self) -> bool:
        """Whether our table exists (the migration step creates it)."""
        async with self.inner._cursor() as cur:
            await cur.execute("SELECT to_regclass(%s) AS t", (TABLE,))
            row = await cur.fetchone()
        return row is not None and row["t"] is not None

    async def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> Any:
        return await self.inner.start_ttl_sweeper(sweep_interval_minutes)

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109 (LangGraph's signature)
        stopped: bool = await self.inner.stop_ttl_sweeper(timeout)
        return stopped

    # ---- BaseStore ----------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        raise NotImplementedError("the runner uses the store asynchronously")

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        plain = [i for i, op in enumerate(ops) if not (isinstance(op, SearchOp) and op.query)]
        results: list[Result] = [None] * len(ops)
        for i, result in zip(plain, await self.inner.abatch([ops[i] for i in plain]), strict=True):
            results[i] = result
        await self._index([op for op in ops if isinstance(op, PutOp) and op.value is not None])
        for i, op in enumerate(ops):
            if isinstance(op, SearchOp) and op.query:
                results[i] = await self._ranked(op)
        return results

    # ---- puts: embed the fields ------------------------------------------------------

    async def _index(self, puts: list[PutOp]) -> None:
        if not puts:
            return
        texts: list[tuple[str, str, str, str]] = []  # prefix, key, field, text
        for op in puts:
            if op.index is False:
                continue
            fields = self.fields if op.index is None else [(f, tokenize_path(f)) for f in op.index]
            for name, path in fields:
                found = get_text_at_path(op.value, path)
                for n, text in enumerate(found):
                    field = f"{name}.{n}" if len(found) > 1 else name
                    texts.append((_prefix_text(op.namespace), op.key, field, text))
        vectors = await self._embed([t[3] for t in texts]) if texts else []
        async with self.inner._cursor() as cur:
            # A put replaces the item's vectors (index=False: leaves it with none).
            for op in puts:
                await cur.execute(
                    f"DELETE FROM {TABLE} WHERE prefix = %s AND key = %s",
                    (_prefix_text(op.namespace), op.key),
                )
            for (prefix, key, field, _), vector in zip(texts, vectors, strict=True):
                await cur.execute(
                    f"INSERT INTO {TABLE} (prefix, key, field_name, embedding) "
                    "VALUES (%s, %s, %s, %s) ON CONFLICT (prefix, key, field_name) "
                    "DO UPDATE SET embedding = EXCLUDED.embedding",
                    (prefix, key, field, vector),
                )

    async def _embed(self, texts: list[str]) -> list[list[float]]:
        vectors = await self.embeddings.aembed_documents(texts)
        for vector in vectors:
            if len(vector) != self.dims:
                raise ValueError(
                    f"store.index: the embedding has {len(vector)} dimensions, dims is {self.dims}"
                )
        return vectors

    # ---- searches with a query: rank the candidates ----------------------------------

    async def _ranked(self, op: SearchOp) -> list[SearchItem]:
        assert op.query is not None
        query_vector, candidates = await asyncio.gather(
            self.embeddings.aembed_query(op.query),
            self.inner.asearch(op.namespace_prefix, filter=op.filter, limit=ALL, refresh_ttl=False),
        )
        vectors = await self._vectors_of(candidates)
        scored = []
        for item in candidates:
            found = vectors.get((_prefix_text(item.namespace), item.key))
            if found:  # an item put with index=False has none: a query never finds it
                scored.append((max(cosine(query_vector, v) for v in found), item))
        scored.sort(key=lambda pair: pair[0], reverse=True)
        page = scored[op.offset : op.offset + op.limit]
        if op.refresh_ttl:
            await self.inner.abatch([GetOp(i.namespace, i.key, True) for _, i in page])
        return [
            SearchItem(i.namespace, i.key, i.value, i.created_at, i.updated_at, score)
            for score, i in page
        ]

    async def _vectors_of(self, items: list[Any]) -> dict[tuple[str, str], list[list[float]]]:
        if not items:
            return {}
        prefixes = [_prefix_text(i.namespace) for i in items]
        keys = [i.key for i in items]
        found: dict[tuple[str, str], list[list[float]]] = {}
        async with self.inner._cursor() as cur:
            await cur.execute(
                f"SELECT e.prefix, e.key, e.embedding FROM {TABLE} e "
                "JOIN unnest(%s::text[], %s::text[]) AS c(prefix, key) "
                "ON e.prefix = c.prefix AND e.key = c.key",
                (prefixes, keys),
            )
            for row in await cur.fetchall():
                found.setdefault((row["prefix"], row["key"]), []).append(row["embedding"])
        return found
