"""Admission: threads, the run control plane, assistants and policy."""
