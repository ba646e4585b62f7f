"""What the channels count for Prometheus (served on the delivery process's `/metrics`)."""

from __future__ import annotations

from prometheus_client import Counter

# A delivery whose signature, token or timestamp did not prove the platform sent
# it (forged, tampered with, or replayed late): refused with 401.
DELIVERIES_REFUSED = Counter(
    "waybill_channel_deliveries_refused",
    "Inbound channel deliveries refused as forged or replayed.",
    ["platform", "channel"],
)
# A platform event seen before (a retry, a second replica, a replay in time):
# acknowledged, starts nothing.
DUPLICATE_EVENTS = Counter(
    "waybill_channel_duplicate_events",
    "Inbound channel events taken before, ignored.",
    ["platform", "channel"],
)
# A platform API call tried again: rate limited (429, Retry-After, its own codes)
# or failing (5xx, no answer).
PLATFORM_RETRIES = Counter(
    "waybill_channel_platform_retries",
    "Chat platform API calls tried again, by reason.",
    ["platform", "reason"],
)
