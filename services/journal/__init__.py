"""Journal: every run's events, numbered in order, stored, and followed live."""
