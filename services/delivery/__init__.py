"""Delivery: workspace snapshots, verified receipts, outputs and uploads, the webhook outbox."""
