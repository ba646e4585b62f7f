"""A2A (agent-to-agent) at `/a2a/{assistant_id}`: the routes (`routes.py`), a call's
parsing (`call.py`), the agent card (`card.py`), messages and their streams
(`messages.py`, `turn.py`), tasks (`tasks.py`) and the wire shapes (`shapes.py`)."""
