"""A prebuilt ReAct agent with one tool and a fake model."""

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.prebuilt import create_react_agent


class ToolFake(FakeMessagesListChatModel):
    def bind_tools(self, tools, **kwargs):
        return self


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


graph = create_react_agent(ToolFake(responses=[AIMessage(content="done")]), [add])
