"""Token usage over the wire: a finished run's counts in, sums per thread or owner out."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc

from waybill.common import codec
from waybill.common.errors import ServiceError, invalid
from waybill.common.identity import Principal
from waybill.common.usage import KNOWN_SOURCES, TokenCount
from waybill.services.admission.threads.thread_store import ThreadStore
from waybill.services.admission.usage.usage_ledger import summed_usage
from waybill.v1 import admission_pb2


def token_counts_of(counts: Iterable[admission_pb2.TokenCount]) -> list[TokenCount]:
    """A runner's report, checked: known sources, one entry per (model, source)."""
    found: dict[tuple[str, str], TokenCount] = {}
    for one in counts:
        if one.source not in KNOWN_SOURCES:
            known = ", ".join(KNOWN_SOURCES)
            raise invalid(f"token_counts: source '{one.source}' is not one of {known}")
        if not one.model:
            raise invalid("token_counts: every entry needs a model")
        if (one.model, one.source) in found:
            raise invalid(f"token_counts: ({one.model}, {one.source}) is listed twice")
        found[(one.model, one.source)] = TokenCount(
            model=one.model,
            source=one.source,
            input_tokens=max(one.input_tokens, 0),
            output_tokens=max(one.output_tokens, 0),
            total_tokens=max(one.total_tokens, 0),
            cache_read_tokens=max(one.cache_read_tokens, 0),
            llm_calls=max(one.llm_calls, 0),
            cost=one.cost if one.HasField("cost") else None,
        )
    return list(found.values())


def _owner_asked(request: admission_pb2.GetTokenUsageRequest, caller: Principal | None) -> str:
    if caller is None:  # another service: it must say whose
        if not request.owner_id:
            raise invalid("owner_id: say whose token usage to sum.")
        return request.owner_id
    if request.owner_id and request.owner_id != caller.user_id and not caller.is_admin:
        raise ServiceError(
            grpc.StatusCode.PERMISSION_DENIED,
            "Only admins may read another user's token usage; leave owner_id out for yours.",
        )
    return request.owner_id or caller.user_id


async def token_usage(
    store: ThreadStore,
    request: admission_pb2.GetTokenUsageRequest,
    caller: Principal | None,
    auth: dict[str, Any] | None = None,
) -> admission_pb2.TokenUsage:
    if request.thread_id:
        if not codec.is_uuid(request.thread_id):
            raise invalid(f"thread_id: '{request.thread_id}' is not a UUID.")
        owner = caller.owner_filter if caller else None
        thread = await store.get_thread(request.thread_id, owner, auth)  # 404 for someone else's
        usage, runs = await summed_usage(
            store.engine, thread.owner_id, thread.thread_id, thread.created_at
        )
    else:
        usage, runs = await summed_usage(store.engine, _owner_asked(request, caller), None, None)
    return admission_pb2.TokenUsage(usage_json=codec.dumps(usage), runs=runs)
