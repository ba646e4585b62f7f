"""Assistants: a graph with default config and context, versioned; their rows."""
