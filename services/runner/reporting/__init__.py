"""A run's frames and typed records on their way to the journal: the stream's
events, the one append stream, the callbacks, token usage, spans."""
