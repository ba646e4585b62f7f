"""Each user's own view of LangGraph's store.

Store namespaces belong to users: an item a user puts at ("memories",) is kept
at ("users", <user_id>, "memories"), and everything that user reads, searches
or lists is confined to that prefix, which is stripped again on the way out.
The API (through `caller_of`) and a graph at run time (through its run's
owner) see the same namespaces, and neither can reach another user's.

With the project's own auth (`auth` in langgraph.json) its users have no prefix, as
on LangGraph Platform: the project's `@auth.on.store` handlers scope the namespaces
(the gateway runs them), and a graph sees the store as it would there. Waybill's own
non-admin principals (the config's users, channel owners) keep theirs, so they never
reach the project users' items: no project handler runs for them. Waybill's admins
(the API key) see the store as it is.

Whatever a project's handlers answer, a project user never reaches another user's
part of Waybill's own `users` namespace (their memory facts live there, and are
shown in their system prompts): `OutsideOwned` refuses it with 403 and leaves it
out of searches and listings.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from waybill.common.errors import forbidden
from waybill.common.identity import API_KEY_USER, LOCAL_USER
from waybill.common.settings import Settings

USERS = "users"


def owner_label(owner_id: str) -> str:
    """`owner_id` as one namespace label: LangGraph refuses "." and NUL in labels
    (and the SDK joins labels with "."), so they are %-escaped, reversibly."""
    return owner_id.replace("%", "%25").replace(".", "%2E").replace("\x00", "%00")


@dataclass(frozen=True)
class StoreAccess:
    """Who sees the store how (see the module's docstring), from the settings."""

    project_auth: bool  # the project has its own auth (`auth` in langgraph.json)
    confined: frozenset[str]  # Waybill's own non-admin users: their prefix always
    admins: frozenset[str]  # Waybill's admins: the store as it is

    @classmethod
    def from_settings(cls, settings: Settings) -> StoreAccess:
        project = settings.project()
        return cls(
            project_auth=project is not None and bool(project.section("auth")),
            confined=frozenset(_confined_principals(settings)),
            admins=frozenset(_waybill_admins(settings)),
        )


def store_of(
    inner: BaseStore, owner_id: str, access: StoreAccess, *, admin: bool | None = None
) -> BaseStore:
    """The store as `owner_id` sees it (see the module's docstring). `admin`: whether
    the caller is one of Waybill's admins (None: judged by `owner_id`)."""
    if not access.project_auth or owner_id in access.confined:
        return OwnedStore(inner, owner_id)
    if admin is None:
        admin = owner_id in access.admins
    return inner if admin else OutsideOwned(inner, owner_id)


def _confined_principals(settings: Settings) -> set[str]:
    """Waybill's own non-admin users (the config's principals, channel owners among
    them); its admins, like the project's users, see the store as it is."""
    found = {LOCAL_USER.user_id}
    for spec in settings.principals():
        if spec.role != "admin" and "admin" not in (spec.scopes or ()):
            found.add(spec.user_id)
    return found


def _waybill_admins(settings: Settings) -> set[str]:
    found = {API_KEY_USER.user_id}
    for spec in settings.principals():
        if spec.role == "admin" or "admin" in (spec.scopes or ()):
            found.add(spec.user_id)
    return found


class OutsideOwned(BaseStore):
    """The store as it is, but for the parts of the `users` namespace that are not
    the caller's own: reading or writing one is refused (403), and searches and
    listings leave them out. What the project's store handlers did to a namespace is
    done by then: this holds whatever they answered."""

    def __init__(self, inner: BaseStore, owner_id: str) -> None:
        self.inner = inner
        self.own: tuple[str, ...] = (USERS, owner_label(owner_id))
        self.ttl_config = inner.ttl_config
        self.supports_ttl = inner.supports_ttl

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = [self._allowed(op) for op in ops]
        return [self._visible(op, r) for op, r in zip(ops, self.inner.batch(ops), strict=True)]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = [self._allowed(op) for op in ops]
        results = await self.inner.abatch(ops)
        return [self._visible(op, r) for op, r in zip(ops, results, strict=True)]

    def _foreign(self, namespace: tuple[str, ...]) -> bool:
        """Under `users` and not under the caller's own part of it."""
        return namespace[:1] == (USERS,) and namespace[: len(self.own)] != self.own

    def _allowed(self, op: Op) -> Op:
        if isinstance(op, GetOp | PutOp):
            addressed = [tuple(op.namespace)]
        elif isinstance(op, SearchOp):
            addressed = [tuple(op.namespace_prefix)]
        elif isinstance(op, ListNamespacesOp):
            conditions = op.match_conditions or ()
            addressed = [tuple(c.path) for c in conditions if c.match_type == "prefix"]
        else:
            raise TypeError(f"unknown store operation {type(op).__name__}")
        # ("users",) itself is a search over everyone's: its results are filtered.
        if any(self._foreign(n) and n != (USERS,) for n in addressed):
            raise forbidden("This namespace belongs to another user.")
        if isinstance(op, GetOp | PutOp) and tuple(op.namespace) == (USERS,):
            raise forbidden("This namespace belongs to another user.")
        return op

    def _visible(self, op: Op, result: Result) -> Result:
        found: Any = result
        if isinstance(op, SearchOp):
            return [item for item in found or [] if not self._foreign(tuple(item.namespace))]
        if isinstance(op, ListNamespacesOp):
            return [n for n in found or [] if not self._foreign(tuple(n))]
        return result


class OwnedStore(BaseStore):
    def __init__(self, inner: BaseStore, owner_id: str) -> None:
        self.inner = inner
        self.prefix: tuple[str, ...] = (USERS, owner_label(owner_id))
        # The inner store's expiry settings: BaseStore reads them for a put's
        # default TTL and a read's refresh, and refuses `ttl=` without them.
        self.ttl_config = inner.ttl_config
        self.supports_ttl = inner.supports_ttl

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        return self._results(ops, self.inner.batch([self._confine(op) for op in ops]))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        return self._results(ops, await self.inner.abatch([self._confine(op) for op in ops]))

    # ---- into the owner's prefix ----------------------------------------------------

    def _confine(self, op: Op) -> Op:
        if isinstance(op, GetOp):
            return GetOp(self.prefix + op.namespace, op.key, op.refresh_ttl)
        if isinstance(op, PutOp):
            return PutOp(self.prefix + op.namespace, op.key, op.value, op.index, op.ttl)
        if isinstance(op, SearchOp):
            return SearchOp(
                self.prefix + op.namespace_prefix,
                op.filter,
                op.limit,
                op.offset,
                op.query,
                op.refresh_ttl,
            )
        if isinstance(op, ListNamespacesOp):
            return ListNamespacesOp(
                self._conditions(op.match_conditions),
                None if op.max_depth is None else op.max_depth + len(self.prefix),
                op.limit,
                op.offset,
            )
        raise TypeError(f"unknown store operation {type(op).__name__}")

    def _conditions(
        self, conditions: tuple[MatchCondition, ...] | None
    ) -> tuple[MatchCondition, ...]:
        """A user's prefix condition starts at their own root; suffixes stay as they are."""
        given = list(conditions or ())
        prefixes = [c for c in given if c.match_type == "prefix"]
        others = [c for c in given if c.match_type != "prefix"]
        if not prefixes:
            prefixes = [MatchCondition("prefix", ())]
        confined = [MatchCondition("prefix", self.prefix + tuple(c.path)) for c in prefixes]
        return tuple(confined + others)

    # ---- and back out of it -----------------------------------------------------------

    def _strip(self, namespace: tuple[str, ...]) -> tuple[str, ...]:
        return namespace[len(self.prefix) :]

    def _item(self, item: Any) -> Any:
        if isinstance(item, SearchItem):
            return SearchItem(
                self._strip(item.namespace),
                item.key,
                item.value,
                item.created_at,
                item.updated_at,
                item.score,
            )
        if isinstance(item, Item):
            return Item(
                value=item.value,
                key=item.key,
                namespace=self._strip(item.namespace),
                created_at=item.created_at,
                updated_at=item.updated_at,
            )
        return item

    def _results(self, ops: list[Op], results: list[Result]) -> list[Result]:
        out: list[Result] = []
        for op, result in zip(ops, results, strict=True):
            found: Any = result
            if isinstance(op, SearchOp):
                out.append([self._item(item) for item in found or []])
            elif isinstance(op, ListNamespacesOp):
                out.append([self._strip(tuple(n)) for n in found or []])
            else:
                out.append(self._item(found))
        return out
