"""`GET /channels`: the chat channels of the YAML config and who they act for.

The console's operations page lists them. Only what says where a channel is
bound is shown (name, platform, owner, assistant, thread and busy policies, the
inbound path); never a secret, nor where one is read from. A user sees the
channels bound to them; an admin sees all.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from waybill.common.identity import LOCAL_USER
from waybill.gateway.response_schemas import error_responses

router = APIRouter(tags=["channels"], responses=error_responses())

SHOWN_FIELDS = ("name", "platform", "owner", "assistant_id", "threads", "busy", "mode")
# Where a platform posts its events (a polling channel has no such path).
INBOUND_PATHS = {
    "telegram": "/channels/telegram/{name}/webhook",
    "webhook": "/channels/webhook/{name}",
}
EVENTS_PATH = "/channels/{platform}/{name}/events"  # every other platform


def binding(entry: dict[str, Any]) -> dict[str, Any]:
    shown = {field: entry[field] for field in SHOWN_FIELDS if field in entry}
    shown.setdefault("owner", LOCAL_USER.user_id)
    platform = str(entry.get("platform", ""))
    if entry.get("mode") != "polling":
        path = INBOUND_PATHS.get(platform, EVENTS_PATH)
        shown["inbound_path"] = path.format(platform=platform, name=entry.get("name", ""))
    return shown


@router.get("/channels")
async def list_channels(request: Request) -> list[dict[str, Any]]:
    principal = request.state.principal
    entries = request.app.state.settings.config_file().channels
    bindings = [binding(entry) for entry in entries]
    if principal.allows("admin"):
        return bindings
    return [entry for entry in bindings if entry["owner"] == principal.user_id]
