"""Runner: builds graphs, drives `astream`, journals every frame, reports the end.

Its wings, in the order a run goes through them: `run/` (the work stream, a run's
scope, its graph driven and stopped, its lease kept), `reporting/` (frames and
records to the journal), `effects/` (tool and model calls run once), `ending/`
(outcome, final state, receipt), `persistence/` (checkpoints and the store, fenced),
`reads/` (the graph-side read service), `graphs/` (registry, context, models),
`agent/` (the built-in lead agent) and `sandbox/`."""
