"""Crons: their RPCs and rows, the schedule, and the scheduler that fires each
due firing once across replicas."""
