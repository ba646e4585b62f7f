"""The graph-side read service: a thread's state and history, the store's RPCs,
a graph's drawing and schemas."""
