"""What delivery counts for Prometheus."""

from __future__ import annotations

from prometheus_client import Counter

RECEIPTS_WRITTEN = Counter(
    "waybill_receipts_written", "Delivery receipts written, by run outcome.", ["outcome"]
)
# Outbound webhook attempts, by outcome ("delivered", "retrying", "failed": out of
# retries); one increment per HTTP attempt (services/delivery/outbox.py).
WEBHOOK_ATTEMPTS = Counter(
    "waybill_webhook_attempts", "Outbound webhook deliveries attempted, by outcome.", ["outcome"]
)
