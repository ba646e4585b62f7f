"""What delivery counts for Prometheus."""

from __future__ import annotations

from prometheus_client import Counter

RECEIPTS_WRITTEN = Counter(
    "waybill_receipts_written", "Delivery receipts written, by run outcome.", ["outcome"]
)
# Outbound webhook / IM reply attempts, by outcome ("delivered", "failed",
# "retrying"). Defined here so dashboards have it from day one; the webhook sender
# counts into it (one increment per HTTP attempt, never per event).
WEBHOOK_ATTEMPTS = Counter(
    "waybill_webhook_attempts", "Outbound webhook deliveries attempted, by outcome.", ["outcome"]
)
