"""What a run's graph is built from: the graph registry, the context a graph is
handed, the chat models and their providers."""
