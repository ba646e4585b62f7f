"""Admission: threads, the run control plane, assistants and policy.

Its wings: `runs/` (intake, policy, quotas, leases, dispatch, the runners' work
stream), `threads/`, `crons/`, `assistants/`, `usage/`; `server.py` mixes their
RPCs into one servicer."""
