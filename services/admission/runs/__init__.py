"""Runs on the control plane: intake and policy (whether a run is stored), quotas,
idempotency, the run rows and their transitions, leases and dispatch (who runs
it), the runners' work stream, closing an ended run's log."""
