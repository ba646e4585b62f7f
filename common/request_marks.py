"""What LangGraph Platform stamps into every run's `configurable` about the request
that made it: its id and its start time. They differ between two sends of the same
request, so an idempotency key's digest leaves them out."""

from __future__ import annotations

from typing import Any

REQUEST_ID_KEY = "langgraph_request_id"
REQUEST_START_KEY = "__request_start_time_ms__"
REQUEST_MARKS = (REQUEST_ID_KEY, REQUEST_START_KEY)


def without_request_marks(kwargs: Any) -> Any:
    """`kwargs` with the request's marks taken out of its `configurable`."""
    config = kwargs.get("config") if isinstance(kwargs, dict) else None
    if not isinstance(config, dict) or not isinstance(config.get("configurable"), dict):
        return kwargs
    configurable: dict[str, Any] = config["configurable"]
    kept = {key: value for key, value in configurable.items() if key not in REQUEST_MARKS}
    return {**kwargs, "config": {**config, "configurable": kept}}
