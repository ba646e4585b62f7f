"""Waybill's tests: `unit/` (one module in process), `e2e/` (through running stacks),
`repo/` (the repository's own checks); `support/` and `fixtures/` are what they share."""
