"""/quotas: a principal's limits (the YAML `quotas` section) and their use now.
`/quotas/me` is the caller's; `/quotas/{principal}` anyone's, for admins."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path
from starlette.requests import Request

from waybill.common import codec
from waybill.gateway.peers import call
from waybill.gateway.response_schemas import error_responses
from waybill.gateway.routes.threads import peers_of
from waybill.v1 import admission_pb2

router = APIRouter(tags=["quotas"], responses=error_responses())

PrincipalId = Annotated[str, Path(min_length=1, max_length=255)]


async def _report(request: Request, principal_id: str) -> dict[str, Any]:
    asked = admission_pb2.GetQuotaRequest(principal_id=principal_id)
    reply = await call(peers_of(request).admission.GetQuota(asked))
    report: dict[str, Any] = codec.loads(reply.report_json)
    return report


@router.get("/quotas/me")
async def my_quota(request: Request) -> dict[str, Any]:
    """The caller's limits, their use now, and when the day's spend resets."""
    return await _report(request, "")


@router.get("/quotas/{principal}")
async def principal_quota(principal: PrincipalId, request: Request) -> dict[str, Any]:
    """Another principal's limits and use (admins only)."""
    return await _report(request, principal)
