"""Distinct input/output/state schemas and a context_schema."""

from dataclasses import dataclass
from typing import Annotated, Literal

from langchain_core.messages import AnyMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.runtime import Runtime
from typing_extensions import TypedDict


@dataclass
class Settings:
    """Who asks and how."""

    user_name: str
    tone: Literal["plain", "warm"] = "plain"


class Question(TypedDict):
    question: str


class Answer(TypedDict):
    answer: str


class Working(TypedDict):
    question: str
    answer: str
    messages: Annotated[list[AnyMessage], add_messages]
    private_note: str


def answer(state: Question, runtime: Runtime[Settings]) -> dict:
    return {"answer": f"{runtime.context.tone}: {state['question']}"}


builder = StateGraph(Working, input_schema=Question, output_schema=Answer, context_schema=Settings)
builder.add_node("answer", answer)
builder.add_edge(START, "answer")
builder.add_edge("answer", END)
graph = builder.compile()
