"""The project's own HTTP routes, served beside the LangGraph API."""

from common.text import shout
from fastapi import FastAPI

app = FastAPI()


@app.get("/hello")
async def hello() -> dict[str, str]:
    return {"hello": shout("from the project")}
