"""A dependency packaged with a src layout (`./pkg`, code under `pkg/src`)."""


def exclaim(text: str) -> str:
    return f"{text}!"
