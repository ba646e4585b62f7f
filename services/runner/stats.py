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

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


STATS = RunnerStats()
