"""A graph whose node raises: its author needs the traceback."""

from langgraph.graph import END, START, MessagesState, StateGraph


def check_the_order(state: MessagesState) -> dict:
    raise ValueError("boom in node: the order has no lines")


builder = StateGraph(MessagesState)
builder.add_node("check_the_order", check_the_order)
builder.add_edge(START, "check_the_order")
builder.add_edge("check_the_order", END)
graph = builder.compile()
