"""The "resource owner" example from LangGraph's docs: each user sees only what
they created; the store is kept to namespaces that start with the user's id."""

from langgraph_sdk import Auth

auth = Auth()

TOKENS = {"token-alice": "alice", "token-bob": "bob"}


@auth.authenticate
async def authenticate(authorization: str | None) -> Auth.types.MinimalUserDict:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or token not in TOKENS:
        raise Auth.exceptions.HTTPException(status_code=401, detail="Invalid token")
    return {"identity": TOKENS[token], "display_name": TOKENS[token].title()}


@auth.on
async def owner_only(ctx: Auth.types.AuthContext, value: dict):
    filters = {"owner": ctx.user.identity}
    metadata = value.setdefault("metadata", {})
    metadata.update(filters)
    return filters


@auth.on.store()
async def own_namespace_only(ctx: Auth.types.AuthContext, value: dict):
    namespace = tuple(value.get("namespace") or value.get("namespace_prefix") or ())
    assert namespace[:1] == (ctx.user.identity,), "Not authorized"
