"""The webhook outbox's worker: release held webhooks once the run's terminal
status is known, send the due ones, retry with exponential backoff.

Why held: the receipt (and with it the outbox row) is written before the
terminal status, which admission owns. The runner confirms the status right
after admission accepted it (`ConfirmFinished`); if the runner dies between the
two, the row stays held and this worker asks admission how the run ended once
`WAYBILL_WEBHOOK_HELD_SECONDS` have passed: ended under the row's epoch ->
released; taken over (a newer epoch) -> superseded, as that epoch writes its
own receipt and rows; still running -> asked again later. Every state change is
in SQL before anything is sent, so a delivery process that dies at any point
picks up where it was after a restart (an attempt in flight is counted, and
the next one carries a new attempt id and the same Idempotency-Key).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import grpc
import httpx

from waybill.common import codec
from waybill.common.background import BackgroundLoop, seconds_until
from waybill.common.settings import Settings
from waybill.common.statuses import TERMINAL_RUN_STATUSES
from waybill.common.webhook_targets import CheckedTarget, WebhookTargetRefused, check_webhook_url
from waybill.services.delivery import signing
from waybill.services.delivery.metrics import WEBHOOK_ATTEMPTS
from waybill.services.delivery.outbox_store import AttemptRow, DeliveryRow, OutboxStore
from waybill.v1 import admission_pb2, admission_pb2_grpc, common_pb2

log = logging.getLogger("waybill.delivery.outbox")

ENDED = {codec.RUN_STATUS_VALUES[status] for status in TERMINAL_RUN_STATUSES}
BATCH = 20


def payload(row: DeliveryRow, run: common_pb2.Run | None) -> bytes:
    """The body: the run as LangGraph Platform shows it (or, when it was deleted,
    what its receipt says), its final values, the error if any, and the
    receipt's verdict."""
    receipt = dict(codec.loads(row.receipt_json, {}))
    body: dict[str, Any] = (
        codec.run_to_dict(run)
        if run is not None
        else {
            "run_id": row.run_id,
            "thread_id": row.thread_id,
            "assistant_id": receipt.get("assistant_id"),
            "status": receipt.get("status"),
        }
    )
    body["values"] = codec.loads(row.values_json, None)
    body["error"] = receipt.pop("error", None)
    receipt.pop("assistant_id", None)
    receipt.pop("status", None)
    body["receipt"] = receipt
    return codec.dumps(body)


def backoff(settings: Settings, attempts: int) -> float:
    return float(
        min(
            settings.webhook_backoff_max_seconds,
            settings.webhook_backoff_seconds * 2 ** (attempts - 1),
        )
    )


# What an attempt's record says for a request that got no answer, by httpx's error
# (the first that matches). The receiver's owner reads it: plain words, never the
# exception's class or text (which may carry this server's details).
ATTEMPT_FAILURES: tuple[tuple[type[httpx.HTTPError], str], ...] = (
    (httpx.TimeoutException, "the receiver did not answer in time"),
    (httpx.ConnectError, "could not connect to the receiver"),
    (httpx.RemoteProtocolError, "the receiver broke off the HTTP exchange"),
    (httpx.HTTPError, "the request to the receiver failed"),
)


def attempt_failure(error: httpx.HTTPError) -> str:
    return next(text for kind, text in ATTEMPT_FAILURES if isinstance(error, kind))


class Outbox:
    def __init__(
        self,
        settings: Settings,
        outbox: OutboxStore,
        admission: admission_pb2_grpc.AdmissionStub,
    ) -> None:
        self.settings = settings
        self.store = outbox
        self.admission = admission
        self.secret = signing.webhook_secret(settings)
        self.http = httpx.AsyncClient(
            timeout=settings.webhook_timeout_seconds, follow_redirects=False
        )
        # A failed pass (a database hiccup) is tried again after one poll.
        poll = settings.webhook_poll_seconds
        self.loop = BackgroundLoop(
            "webhook-outbox", self.outbox_pass, log=log, retry_seconds=poll, max_sleep=poll
        )

    def start(self) -> None:
        self.loop.start()

    async def close(self) -> None:
        await self.loop.stop()
        await self.http.aclose()

    # ---- releasing held rows ----------------------------------------------------

    async def confirm(self, run_id: str, epoch: int) -> int:
        """The runner says the terminal status of (run, epoch) was accepted."""
        released = 0
        for row in await self.store.held(run_id, epoch):
            released += await self._settle(row)
        if released:
            self.loop.wake()
        return released

    async def _settle(self, row: DeliveryRow) -> int:
        """Release, supersede, or leave a held row, by what admission says."""
        run: common_pb2.Run | None = None
        try:
            run = await self.admission.GetRun(
                admission_pb2.GetRunRequest(thread_id=row.thread_id, run_id=row.run_id),
                timeout=self.settings.rpc_timeout_seconds,
            )
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND:
                log.info("run %s: admission unreachable (%s); later", row.run_id, error.code())
                return 0
            # Deleted: only ended runs can be deleted, so the receipt tells how.
        now = codec.now_utc()
        if run is not None:
            if run.epoch > row.epoch:
                await self.store.supersede(row.delivery_id, now)
                return 0
            if run.status not in ENDED:
                return 0
        released = await self.store.release(row.delivery_id, payload(row, run), now)
        return int(released)

    async def settle_overdue(self) -> None:
        cutoff = codec.now_utc() - timedelta(seconds=self.settings.webhook_held_seconds)
        for row in await self.store.held_before(cutoff):
            await self._settle(row)

    # ---- sending -----------------------------------------------------------------

    async def send_due(self) -> int:
        now = codec.now_utc()
        hold = timedelta(seconds=self.settings.webhook_timeout_seconds + 5)
        rows = await self.store.claim_due(now, hold, BATCH)
        await asyncio.gather(*(self._attempt(row) for row in rows))
        return len(rows)

    async def _attempt(self, row: DeliveryRow) -> None:
        attempt = await self.store.begin_attempt(row, codec.now_utc())
        try:
            target = await check_webhook_url(row.url, self.settings)
            attempt.status_code = await self._post(row, attempt, target)
            if not 200 <= attempt.status_code < 300:
                attempt.error = f"the receiver answered {attempt.status_code}"
        except WebhookTargetRefused as refused:
            attempt.error = str(refused)
        except httpx.HTTPError as error:
            attempt.error = attempt_failure(error)
            log.info("webhook %s: %s: %s", row.delivery_id, type(error).__name__, error)
        now = codec.now_utc()
        if not attempt.error:
            state, next_at = "delivered", None
        else:
            next_at = now + timedelta(seconds=backoff(self.settings, attempt.attempt))
            window_ends = row.created_at + timedelta(seconds=self.settings.webhook_retry_seconds)
            state = "pending" if next_at <= codec.aware_utc(window_ends) else "failed"
            if state == "failed":
                next_at = None
            log.info("webhook %s attempt %d: %s", row.delivery_id, attempt.attempt, attempt.error)
        WEBHOOK_ATTEMPTS.labels("retrying" if state == "pending" else state).inc()
        await self.store.finish_attempt(attempt, state, next_at, now)

    async def _post(self, row: DeliveryRow, attempt: AttemptRow, target: CheckedTarget) -> int:
        body = dict(codec.loads(row.payload, {}))
        body["webhook_sent_at"] = codec.iso(attempt.sent_at)
        data = codec.dumps(body)
        timestamp = str(int(attempt.sent_at.timestamp()))
        headers = {
            "Host": target.host_header,
            "Content-Type": "application/json",
            "User-Agent": "waybill-webhooks",
            signing.TIMESTAMP_HEADER: timestamp,
            signing.SIGNATURE_HEADER: signing.signature(self.secret, timestamp, data),
            signing.IDEMPOTENCY_HEADER: row.delivery_id,
            signing.DELIVERY_HEADER: row.delivery_id,
            signing.ATTEMPT_HEADER: str(attempt.attempt),
            signing.ATTEMPT_ID_HEADER: attempt.attempt_id,
        }
        # To the address that was checked, never to a fresh resolution of the name.
        extensions = {"sni_hostname": target.host} if row.url.startswith("https") else {}
        response = await self.http.post(
            target.pinned_url(), content=data, headers=headers, extensions=extensions
        )
        return response.status_code

    # ---- the loop ------------------------------------------------------------------

    async def outbox_pass(self) -> float | None:
        """Release overdue held rows, send the due ones; then the seconds until
        the next is due (at most one poll: another replica may add rows)."""
        await self.settle_overdue()
        await self.send_due()
        return seconds_until(await self.store.next_due(codec.now_utc()))
