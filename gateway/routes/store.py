"""/store: LangGraph's long-term memory, served by the runners that own it.

With the project's own auth, its `@auth.on.store` handler sees each operation
first, as on LangGraph Platform: it may rewrite `value["namespace"]` (the runner
is asked for the namespace it leaves), refuse, or, for a search, return a filter
on the items' values that is added to the search's own.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, Response

from waybill.common import codec
from waybill.gateway.peers import call
from waybill.gateway.project_auth import authorize
from waybill.gateway.response_schemas import error_responses
from waybill.gateway.routes.threads import peers_of
from waybill.gateway.schemas import StoreItemDelete, StoreItemPut, StoreNamespaces, StoreSearch
from waybill.v1 import runner_pb2

# A namespace is its labels dot-joined; LangGraph's stores refuse NUL in a label.
NO_NUL = r"^[^\x00]*$"

router = APIRouter(tags=["store"], responses=error_responses())


def _json(reply: runner_pb2.JsonReply) -> Response:
    return Response(reply.json, media_type="application/json")


async def _authorized(
    request: Request, action: str, value: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The operation as the project's store handler left it, and its filter."""
    found = await authorize(request, "store", action, value)
    value["namespace"] = _labels(value.get("namespace"), optional=action == "list_namespaces")
    return value, found


def _labels(namespace: Any, optional: bool = False) -> list[str]:
    if namespace is None and optional:
        return []
    if not isinstance(namespace, list | tuple) or not all(
        isinstance(label, str) and label and "." not in label for label in namespace
    ):
        raise HTTPException(500, "The store auth handler left an invalid namespace.")
    return list(namespace)


@router.put("/store/items", status_code=204)
async def put_item(body: StoreItemPut, request: Request) -> Response:
    value, _ = await _authorized(
        request,
        "put",
        {
            "namespace": tuple(body.namespace),
            "key": body.key,
            "value": body.value,
            "index": body.index,
            "ttl": body.ttl,
        },
    )
    await call(
        peers_of(request).runner.StorePut(
            runner_pb2.StorePutRequest(
                item=runner_pb2.StoreKey(namespace=value["namespace"], key=value["key"]),
                value_json=codec.dumps(value["value"]),
                index_json=b"" if value["index"] is None else codec.dumps(value["index"]),
                ttl_minutes=value["ttl"],
            )
        )
    )
    return Response(status_code=204)


@router.get("/store/items")
async def get_item(
    namespace: Annotated[str, Query(pattern=NO_NUL)],
    key: str,
    request: Request,
    refresh_ttl: bool | None = None,
) -> Response:
    labels = tuple(label for label in namespace.split(".") if label)
    value, _ = await _authorized(
        request, "get", {"namespace": labels, "key": key, "refresh_ttl": refresh_ttl}
    )
    item = runner_pb2.StoreKey(
        namespace=value["namespace"], key=value["key"], refresh_ttl=value["refresh_ttl"]
    )
    return _json(await call(peers_of(request).runner.StoreGet(item)))


@router.delete("/store/items", status_code=204)
async def delete_item(body: StoreItemDelete, request: Request) -> Response:
    value, _ = await _authorized(
        request, "delete", {"namespace": tuple(body.namespace), "key": body.key}
    )
    await call(
        peers_of(request).runner.StoreDelete(
            runner_pb2.StoreKey(namespace=value["namespace"], key=value["key"])
        )
    )
    return Response(status_code=204)


@router.post("/store/items/search")
async def search_items(body: StoreSearch, request: Request) -> Response:
    value, found = await _authorized(
        request,
        "search",
        {
            "namespace": tuple(body.namespace_prefix),
            "filter": body.filter,
            "limit": body.limit,
            "offset": body.offset,
            "query": body.query,
            "refresh_ttl": body.refresh_ttl,
        },
    )
    # The handler's filter narrows the search: on a shared key it wins.
    wanted = {**(value.get("filter") or {}), **(found or {})}
    return _json(
        await call(
            peers_of(request).runner.StoreSearch(
                runner_pb2.StoreSearchRequest(
                    namespace_prefix=value["namespace"],
                    filter_json=codec.dumps(wanted) if wanted else b"",
                    limit=value["limit"],
                    offset=value["offset"],
                    query=value["query"] or "",
                    refresh_ttl=value["refresh_ttl"],
                )
            )
        )
    )


@router.post("/store/namespaces")
async def list_namespaces(body: StoreNamespaces, request: Request) -> Response:
    value, _ = await _authorized(
        request,
        "list_namespaces",
        {
            "namespace": tuple(body.prefix) if body.prefix else None,
            "suffix": tuple(body.suffix) if body.suffix else None,
            "max_depth": body.max_depth,
            "limit": body.limit,
            "offset": body.offset,
        },
    )
    return _json(
        await call(
            peers_of(request).runner.StoreListNamespaces(
                runner_pb2.StoreListNamespacesRequest(
                    prefix=value["namespace"],
                    suffix=list(value.get("suffix") or []),
                    max_depth=value.get("max_depth") or 0,
                    limit=value["limit"],
                    offset=value["offset"],
                )
            )
        )
    )
