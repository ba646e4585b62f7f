"""One run's path on a runner: the work stream's assignment, the start barrier,
the run's scope and limits, its graph driven to its end, its lease kept."""
