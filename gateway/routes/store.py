"""/store: LangGraph's long-term memory, served by the runners that own it."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from waybill.common import codec
from waybill.gateway.peers import call
from waybill.gateway.routes.threads import peers_of
from waybill.gateway.schemas import StoreItemDelete, StoreItemPut, StoreNamespaces, StoreSearch
from waybill.v1 import runner_pb2

router = APIRouter(tags=["store"])


def _json(reply: runner_pb2.JsonReply) -> Response:
    return Response(reply.json, media_type="application/json")


@router.put("/store/items", status_code=204)
async def put_item(body: StoreItemPut, request: Request) -> Response:
    await call(
        peers_of(request).runner.StorePut(
            runner_pb2.StorePutRequest(
                item=runner_pb2.StoreKey(namespace=body.namespace, key=body.key),
                value_json=codec.dumps(body.value),
                index_json=b"" if body.index is None else codec.dumps(body.index),
                ttl_minutes=body.ttl,
            )
        )
    )
    return Response(status_code=204)


@router.get("/store/items")
async def get_item(
    namespace: str, key: str, request: Request, refresh_ttl: bool | None = None
) -> Response:
    labels = [label for label in namespace.split(".") if label]
    item = runner_pb2.StoreKey(namespace=labels, key=key, refresh_ttl=refresh_ttl)
    return _json(await call(peers_of(request).runner.StoreGet(item)))


@router.delete("/store/items", status_code=204)
async def delete_item(body: StoreItemDelete, request: Request) -> Response:
    await call(
        peers_of(request).runner.StoreDelete(
            runner_pb2.StoreKey(namespace=body.namespace, key=body.key)
        )
    )
    return Response(status_code=204)


@router.post("/store/items/search")
async def search_items(body: StoreSearch, request: Request) -> Response:
    return _json(
        await call(
            peers_of(request).runner.StoreSearch(
                runner_pb2.StoreSearchRequest(
                    namespace_prefix=body.namespace_prefix,
                    filter_json=codec.dumps(body.filter) if body.filter else b"",
                    limit=body.limit,
                    offset=body.offset,
                    query=body.query or "",
                    refresh_ttl=body.refresh_ttl,
                )
            )
        )
    )


@router.post("/store/namespaces")
async def list_namespaces(body: StoreNamespaces, request: Request) -> Response:
    return _json(
        await call(
            peers_of(request).runner.StoreListNamespaces(
                runner_pb2.StoreListNamespacesRequest(
                    prefix=body.prefix or [],
                    suffix=body.suffix or [],
                    max_depth=body.max_depth or 0,
                    limit=body.limit,
                    offset=body.offset,
                )
            )
        )
    )
