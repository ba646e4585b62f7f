"""Token usage: the ledger written with a run's end, and its RPCs."""
