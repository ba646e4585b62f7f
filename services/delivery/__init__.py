"""Delivery: receipts of what each run delivered (workspaces and webhooks come later)."""
