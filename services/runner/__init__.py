"""Runner: builds graphs, drives `astream`, journals every frame, reports the end."""
