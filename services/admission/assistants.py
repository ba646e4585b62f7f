"""Assistants: one system assistant per registered graph, with LangGraph's stable id."""

from __future__ import annotations

from datetime import UTC, datetime

from common import codec
from common.errors import invalid, not_found
from waybill.v1 import admission_pb2

SYSTEM_CREATED_AT = datetime(2026, 1, 1, tzinfo=UTC)


class AssistantCatalog:
    def __init__(self, graph_ids: list[str]) -> None:
        self.graph_ids = list(graph_ids)
        self.by_id = {codec.system_assistant_id(graph_id): graph_id for graph_id in graph_ids}

    def graph_for(self, assistant_id: str) -> str | None:
        """Accept the assistant UUID or the graph name, as LangGraph Platform does."""
        if assistant_id in self.graph_ids:
            return assistant_id
        return self.by_id.get(assistant_id)

    def resolve_for_run(self, assistant_id: str) -> tuple[str, str]:
        graph_id = self.graph_for(assistant_id)
        if graph_id is None:
            raise invalid(
                f"assistant_id '{assistant_id}' names no assistant or graph; "
                f"known graphs: {', '.join(self.graph_ids)}."
            )
        return codec.system_assistant_id(graph_id), graph_id

    def get(self, assistant_id: str) -> admission_pb2.Assistant:
        graph_id = self.graph_for(assistant_id)
        if graph_id is None:
            raise not_found(f"Assistant {assistant_id} not found.")
        return self._assistant(graph_id)

    def search(self, graph_id: str, limit: int, offset: int) -> list[admission_pb2.Assistant]:
        chosen = [g for g in self.graph_ids if not graph_id or g == graph_id]
        return [self._assistant(g) for g in chosen[offset : offset + limit]]

    @staticmethod
    def _assistant(graph_id: str) -> admission_pb2.Assistant:
        stamp = codec.iso(SYSTEM_CREATED_AT)
        return admission_pb2.Assistant(
            assistant_id=codec.system_assistant_id(graph_id),
            graph_id=graph_id,
            name=graph_id,
            config_json=codec.dumps({"configurable": {}}),
            metadata_json=codec.dumps({"created_by": "system"}),
            created_at=stamp,
            updated_at=stamp,
            version=1,
        )
