"""A `create_agent` graph with a tool and a dataclass context, built by a factory
that takes the server runtime, as LangGraph Platform calls it."""

import os
from dataclasses import dataclass

from common.text import shout
from langchain.agents import create_agent
from langchain.tools import ToolRuntime, tool
from langchain_openai import ChatOpenAI
from langgraph_sdk.runtime import ServerRuntime
from services.weather import forecast


@dataclass
class Context:
    city: str = "Paris"


@tool
def get_weather(runtime: ToolRuntime[Context]) -> str:
    """The weather in the caller's city."""
    return shout(forecast(runtime.context.city))


def model() -> ChatOpenAI:
    # OPENAI_BASE_URL and OPENAI_API_KEY come from the project's `.env`.
    return ChatOpenAI(model="gpt-stub", base_url=os.environ["OPENAI_BASE_URL"])


async def make_graph(runtime: ServerRuntime[Context]):
    who = runtime.user.identity if runtime.user is not None else "someone"
    return create_agent(
        model(),
        tools=[get_weather],
        context_schema=Context,
        system_prompt=f"You help {who} with the weather.",
    )
