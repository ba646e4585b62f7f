"""Threads: their RPCs, rows, searches, removal across the services, and TTLs."""
