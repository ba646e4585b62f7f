"""Streaming benchmark: the same graph in-process and through the gateway (`make bench`)."""
