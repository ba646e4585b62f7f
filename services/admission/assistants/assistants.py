"""Assistants: a graph with default config and context, versioned.

Every registered graph has a system assistant with LangGraph's stable id
(uuid5 of the graph id), `metadata.created_by = "system"` and version 1; it is
read-only, and a run by graph name uses it. Other assistants are created,
patched (each patch a new version) and deleted through the API.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import grpc

from waybill.common import codec
from waybill.common.errors import ServiceError, conflict, invalid, not_found, refused
from waybill.common.secret_scan import refuse_secrets
from waybill.services.admission.assistants.assistant_store import AssistantFilter, AssistantStore
from waybill.services.admission.rows import LOCAL_OWNER, AssistantRow

SYSTEM_CREATED_AT = datetime(2026, 1, 1, tzinfo=UTC)

BOTH_CONFIGURABLE_AND_CONTEXT = (
    "Cannot specify both configurable and context. Prefer setting context alone. "
    "Context was introduced in LangGraph 0.6.0 and is the long term planned "
    "replacement for configurable."
)


# The project's auth filter on assistants' metadata; None: no filter.
Filter = dict[str, Any] | None
# The owner a caller is confined to (identity.owner_filter); None: every owner's.
Owner = str | None


def read_only(assistant: AssistantRow) -> ServiceError:
    return ServiceError(
        grpc.StatusCode.ABORTED,
        f"Assistant {assistant.assistant_id} is the system assistant of graph "
        f"'{assistant.graph_id}' and cannot be changed or deleted; create an assistant "
        f"with graph_id '{assistant.graph_id}' to give the graph other defaults.",
    )


def system_assistant(graph_id: str, description: str | None = None) -> AssistantRow:
    """A graph's own assistant; its description is the graph's in `langgraph.json`."""
    return AssistantRow(
        assistant_id=codec.system_assistant_id(graph_id),
        graph_id=graph_id,
        name=graph_id,
        description=description,
        config={"configurable": {}},
        context={},
        metadata={"created_by": "system"},
        version=1,
        created_at=SYSTEM_CREATED_AT,
        updated_at=SYSTEM_CREATED_AT,
    )


def mirrored(
    config: dict[str, Any], context: dict[str, Any] | None
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """`config.configurable` and `context` mirror each other, as LangGraph Platform
    keeps them; giving both is refused."""
    config = dict(config)
    configurable = config.get("configurable")
    if configurable is not None and not isinstance(configurable, dict):
        raise invalid("config.configurable must be a JSON object.")
    if configurable and context:
        raise refused(BOTH_CONFIGURABLE_AND_CONTEXT)
    if configurable:
        return config, dict(configurable)
    if context:
        config["configurable"] = dict(context)
    return config, context


def with_assistant_defaults(kwargs: dict[str, Any], assistant: AssistantRow) -> dict[str, Any]:
    """A run's kwargs over its assistant's defaults, merged as LangGraph Platform
    merges them: config, its `configurable` and `context` key by key; the run wins."""
    if not assistant.context and not any(assistant.config.values()):
        return kwargs  # no defaults (a system assistant): the kwargs are kept as they came
    config = kwargs.get("config") or {}
    context = kwargs.get("context") or {}
    if not isinstance(config, dict) or not isinstance(context, dict):
        raise invalid("config and context must be JSON objects.")
    configurable = config.get("configurable") or {}
    if not isinstance(configurable, dict):
        raise invalid("config.configurable must be a JSON object.")
    return {
        **kwargs,
        "config": {
            **assistant.config,
            **config,
            "configurable": {**(assistant.config.get("configurable") or {}), **configurable},
        },
        "context": {**assistant.context, **context},
    }


def thread_config(
    assistant: AssistantRow, thread: dict[str, Any], sent: dict[str, Any]
) -> dict[str, Any]:
    """The config a run leaves on its thread, as LangGraph Platform merges it: the
    assistant's, the thread's, then the run's as sent, key by key; `configurable`
    only the assistant's and the thread's (a run's own stays with the run)."""
    return {
        **assistant.config,
        **thread,
        **sent,
        "configurable": {
            **(assistant.config.get("configurable") or {}),
            **(thread.get("configurable") or {}),
        },
    }


@dataclass
class AssistantDraft:
    """What a create request asks for."""

    graph_id: str
    config: dict[str, Any]
    context: dict[str, Any]
    metadata: dict[str, Any]
    assistant_id: str = ""
    name: str = ""
    description: str = ""
    if_exists: str = "raise"
    owner_id: str = LOCAL_OWNER  # the caller's user


@dataclass
class AssistantChanges:
    """What a patch request asks for; None (or an empty config) keeps the value."""

    graph_id: str | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    name: str | None = None
    description: str | None = None

    def apply(self, current: AssistantRow) -> AssistantRow:
        config, context = mirrored(self.config or {}, self.context)
        return replace(
            current,
            graph_id=self.graph_id or current.graph_id,
            config=config or current.config,
            context=context if context is not None else current.context,
            metadata={**current.metadata, **(self.metadata or {})},
            name=self.name if self.name is not None else current.name,
            description=self.description if self.description is not None else current.description,
        )


class AssistantCatalog:
    def __init__(self, graphs: dict[str, str | None], store: AssistantStore) -> None:
        """`graphs`: each served graph's id and description."""
        self.graph_ids = list(graphs)
        self.store = store
        self.system = {
            codec.system_assistant_id(graph_id): system_assistant(graph_id, description)
            for graph_id, description in graphs.items()
        }

    async def start(self) -> None:
        """Store the system assistants (an existing row is left as it is)."""
        await self.store.ensure(list(self.system.values()))

    def _known_graphs(self) -> str:
        return ", ".join(self.graph_ids)

    def check_graph(self, graph_id: str) -> None:
        if graph_id not in self.graph_ids:
            raise invalid(
                f"graph_id '{graph_id}' names no graph; known graphs: {self._known_graphs()}."
            )

    def graph_for(self, assistant_id: str) -> str | None:
        """Accept the assistant UUID or the graph name, as LangGraph Platform does."""
        if assistant_id in self.graph_ids:
            return assistant_id
        found = self.system.get(assistant_id)
        return found.graph_id if found else None

    async def find(self, assistant_id: str) -> AssistantRow | None:
        """The assistant by UUID (or a graph's system assistant by graph name).
        System assistants are answered from memory: a run by graph name costs no query."""
        graph_id = self.graph_for(assistant_id)
        if graph_id is not None:
            return self.system[codec.system_assistant_id(graph_id)]
        if not codec.is_uuid(assistant_id):
            return None
        found = await self.store.get(str(uuid.UUID(assistant_id)))
        if found is None or found.graph_id not in self.graph_ids:
            return None  # an assistant of a graph this server does not serve is hidden
        return found

    async def resolve_for_run(
        self, assistant_id: str, auth: Filter = None, owner: Owner = None
    ) -> AssistantRow:
        """The run's assistant. The project's auth filter and the owner apply to
        assistants users made, not to the graphs' system assistants (as on LangGraph
        Platform)."""
        found = await self.find(assistant_id)
        hidden = found is not None and not self._visible_to(found, owner)
        if hidden or (found is not None and await self._hidden_from_runs(found, auth)):
            raise not_found(f"Assistant {assistant_id} not found.")
        if found is None:
            raise self._unknown(assistant_id)
        return found

    def _unknown(self, assistant_id: str) -> ServiceError:
        """As on LangGraph Platform: a UUID naming nothing is a missing assistant (404);
        any other text was meant as a graph's name, and is malformed (422)."""
        if codec.is_uuid(assistant_id):
            return not_found(f"Assistant '{assistant_id}' not found.")
        return invalid(
            f"assistant_id '{assistant_id}' names no assistant or graph; "
            f"known graphs: {self._known_graphs()}."
        )

    async def _hidden_from_runs(self, found: AssistantRow, auth: Filter) -> bool:
        if not auth or found.assistant_id in self.system:
            return False
        return not await self.store.passes(found.assistant_id, auth)

    def _visible_to(self, found: AssistantRow, owner: Owner) -> bool:
        """Another user's assistant is hidden; a graph's system assistant is everyone's."""
        return owner is None or found.owner_id == owner or found.assistant_id in self.system

    async def _seen(self, found: AssistantRow, auth: Filter, owner: Owner) -> bool:
        if not self._visible_to(found, owner):
            return False
        return not auth or await self.store.passes(found.assistant_id, auth)

    async def get(
        self, assistant_id: str, auth: Filter = None, owner: Owner = None
    ) -> AssistantRow:
        """The assistant, if it exists, is the caller's (or a system assistant) and
        passes the project's auth filter; otherwise 404, as for a missing one."""
        found = await self.find(assistant_id)
        if found is None or not await self._seen(found, auth, owner):
            raise not_found(f"Assistant {assistant_id} not found.")
        return found

    async def _custom(
        self, assistant_id: str, auth: Filter = None, owner: Owner = None
    ) -> AssistantRow:
        """An assistant that may be changed: found, and not a system assistant."""
        found = await self.get(assistant_id, auth, owner)
        if found.assistant_id in self.system:
            raise read_only(found)
        return found

    # ---- writes ------------------------------------------------------------------

    async def create(
        self, draft: AssistantDraft, auth: Filter = None, owner: Owner = None
    ) -> AssistantRow:
        """A new assistant owned by `draft.owner_id`. A taken id is a conflict, or
        (with if_exists "do_nothing") answers with the assistant there, when the
        caller may see it; someone else's is never handed out."""
        assistant_id = draft.assistant_id or str(uuid.uuid4())
        if not codec.is_uuid(assistant_id):
            raise invalid(f"assistant_id '{assistant_id}' is not a UUID.")
        self.check_graph(draft.graph_id)
        config, context = mirrored(draft.config, draft.context)
        refuse_secrets(draft.metadata, config)  # every run of it would inherit them
        now = codec.now_utc()
        record = AssistantRow(
            assistant_id=str(uuid.UUID(assistant_id)),
            graph_id=draft.graph_id,
            name=draft.name or "Untitled",
            description=draft.description or None,
            config=config,
            context=context or {},
            metadata=draft.metadata,
            version=1,
            created_at=now,
            updated_at=now,
            owner_id=draft.owner_id,
        )
        created = await self.store.create(record)
        if created is not None:
            return created
        existing = await self.store.get(record.assistant_id)
        if draft.if_exists == "do_nothing" and existing and await self._seen(existing, auth, owner):
            return existing
        raise conflict(f"Assistant {record.assistant_id} already exists.")

    async def patch(
        self, assistant_id: str, changes: AssistantChanges, auth: Filter = None, owner: Owner = None
    ) -> AssistantRow:
        if changes.graph_id:
            self.check_graph(changes.graph_id)
        config, _ = mirrored(changes.config or {}, changes.context)  # refused before any read
        refuse_secrets(changes.metadata or {}, config)
        current = await self._custom(assistant_id, auth, owner)
        return await self.store.revise(current.assistant_id, changes.apply)

    async def delete(self, assistant_id: str, auth: Filter = None, owner: Owner = None) -> None:
        current = await self._custom(assistant_id, auth, owner)
        await self.store.delete(current.assistant_id)

    async def set_latest(
        self, assistant_id: str, version: int, auth: Filter = None, owner: Owner = None
    ) -> AssistantRow:
        current = await self._custom(assistant_id, auth, owner)
        return await self.store.set_latest(current.assistant_id, version)

    # ---- reads -------------------------------------------------------------------

    def filter(
        self,
        graph_id: str,
        metadata: dict[str, Any],
        name: str,
        auth: Filter = None,
        owner: Owner = None,
    ) -> AssistantFilter:
        shared = list(self.system)
        return AssistantFilter(self.graph_ids, graph_id, metadata, name, auth, owner, shared)

    async def search(
        self, wanted: AssistantFilter, limit: int, offset: int, sort_by: str, sort_order: str
    ) -> tuple[list[AssistantRow], bool]:
        return await self.store.search(wanted, limit, offset, sort_by, sort_order)

    async def count(self, wanted: AssistantFilter) -> int:
        return await self.store.count(wanted)

    async def versions(
        self,
        assistant_id: str,
        metadata: dict[str, Any],
        limit: int,
        offset: int,
        auth: Filter = None,
        owner: Owner = None,
    ) -> list[AssistantRow]:
        current = await self.get(assistant_id, auth, owner)
        return await self.store.versions(current.assistant_id, metadata, limit, offset)
