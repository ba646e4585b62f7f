"""How a run ends and proves it: its outcome, its final state, the workspace
before it, its receipt, and the work left after it."""
