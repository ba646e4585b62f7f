"""What this runner process did, counted; served by `Runner.GetStats`."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class RunnerStats:
    runs_started: int = 0
    runs_cancelled_before_start: int = 0
    runs_taken_over: int = 0  # started with attempt > 1
    runs_handed_back: int = 0
    runs_fenced: int = 0  # stopped because the lease was lost
    models_built: int = 0
    stale_writes_refused: int = 0  # every write a fenced run attempted, checkpoints included
    stale_checkpoint_writes_refused: int = 0
    receipts_requested: int = 0  # WriteReceipt calls made (tests time faults by it)
    finishes_requested: int = 0  # FinishRun calls made by runs (likewise)
    confirmations_failed: int = 0  # ConfirmFinished calls that failed (delivery settles those)
    lease_renewals_failed: int = 0  # RenewLeases calls that failed (lease_keeper.py)
    loop_stalls: int = 0  # times the runner's event loop did not turn for 0.5 s or more
    loop_stall_longest_ms: int = 0  # the longest such stall
    dependency_retries: int = 0  # calls at a run's end tried again (outages.py)
    node_threads: int = 0  # the executor lent to sync nodes (node_threads.py)
    node_threads_busy: int = 0
    node_threads_stuck: int = 0  # busy for a run that has ended (a node that never returned)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


STATS = RunnerStats()
