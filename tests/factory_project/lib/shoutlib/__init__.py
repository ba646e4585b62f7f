"""A plain folder dependency (`./lib`): importable because langgraph.json lists it."""


def shout(text: str) -> str:
    return text.upper()
