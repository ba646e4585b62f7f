"""Calls that must happen once: a run's tool calls and model calls, recorded so
that an attempt after a takeover answers them from the record."""
