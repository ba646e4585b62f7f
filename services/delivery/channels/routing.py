"""From a platform's delivery to a run, and from the run back to the chat.

Every inbound message takes the same path, whatever its platform or whether it
came by webhook or on a connection the service holds (long polling, a gateway, a sync):

1. the adapter verifies and parses it;
2. its platform event id is taken once, cluster-wide (`channel_events`);
3. a command (`/new`, `/stop`, `/status`) is answered at once; any other text
   starts a run on the conversation's thread through `Admission.StartRun`,
   acting as the channel's bound owner with the platform user in the run's
   context, and with the channel's busy policy as the multitask strategy;
4. the answer is streamed back to the chat (`replies.py`) in the background.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Mapping
from dataclasses import asdict
from typing import Any

import grpc
import httpx

from waybill.common import codec
from waybill.common.errors import ServiceError, not_found
from waybill.common.settings import Settings
from waybill.services.delivery.channels import commands
from waybill.services.delivery.channels.adapter import (
    Acknowledge,
    ChannelAdapter,
    Delivery,
    InboundMessage,
    PlatformCallFailed,
)
from waybill.services.delivery.channels.config import ChannelSpec, owner_principal
from waybill.services.delivery.channels.metrics import DELIVERIES_REFUSED, DUPLICATE_EVENTS
from waybill.services.delivery.channels.platforms import ADAPTERS
from waybill.services.delivery.channels.replies import stream_reply
from waybill.services.delivery.channels.store import HOLDER, ChannelStore, OwedReply
from waybill.v1 import admission_pb2, admission_pb2_grpc, common_pb2, journal_pb2_grpc

log = logging.getLogger("waybill.channels")

BUSY_POLICY = {
    "reject": common_pb2.MULTITASK_STRATEGY_REJECT,
    "enqueue": common_pb2.MULTITASK_STRATEGY_ENQUEUE,
    "interrupt": common_pb2.MULTITASK_STRATEGY_INTERRUPT,
}
# Admission's verdicts on a request; any other code is a fault worth retrying.
REFUSALS = (
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
)
ACTIVE = (common_pb2.RUN_STATUS_RUNNING, common_pb2.RUN_STATUS_PENDING)


class MessageRouter:
    """Routes each chat message to a run on its conversation's thread, and the
    run's answer back to the chat ("dispatch" is admission's word for handing
    runs to runners)."""

    def __init__(
        self,
        settings: Settings,
        specs: Mapping[str, ChannelSpec],
        store: ChannelStore,
        admission: admission_pb2_grpc.AdmissionStub,
        journal: journal_pb2_grpc.JournalStub,
        http: httpx.AsyncClient,
    ) -> None:
        self.settings = settings
        self.store = store
        self.admission = admission
        self.journal = journal
        self.adapters = {
            name: ADAPTERS[spec.platform](spec, http, settings) for name, spec in specs.items()
        }
        self.replies: set[asyncio.Task[None]] = set()
        # Runs whose answer this replica is streaming: never adopted here again, even
        # when a late renewal let their lease lapse (that made two answers).
        self.answering: set[str] = set()

    async def receive(self, platform: str, channel: str, delivery: Delivery) -> Acknowledge:
        """One webhook delivery; returns what to answer the platform with."""
        adapter = self.adapters.get(channel)
        if adapter is None or adapter.platform != platform:
            raise not_found(f"No {platform} channel named '{channel}' is configured.")
        try:
            adapter.verify(delivery)
            parsed = adapter.parse(delivery)  # a body that does not decrypt is refused too
        except ServiceError as error:
            if error.code == grpc.StatusCode.UNAUTHENTICATED:
                DELIVERIES_REFUSED.labels(platform, channel).inc()
                log.warning("channel %s: delivery refused: %s", channel, error.message)
            raise
        if isinstance(parsed, Acknowledge):
            return parsed
        await self.take(adapter, parsed)
        return adapter.received(parsed)

    async def take(self, adapter: ChannelAdapter, message: InboundMessage) -> None:
        """Act on a message once, however many times and replicas it reaches."""
        name = adapter.spec.name
        if not await self.store.take_event(name, message.event_id):
            DUPLICATE_EVENTS.labels(adapter.platform, name).inc()
            log.info("channel %s: event %s seen before; ignored", name, message.event_id)
            return
        try:
            await self._act(adapter, message)
        except BaseException:
            # Nothing was started: let the platform's retry be taken.
            await self.store.release_event(name, message.event_id)
            raise

    async def _act(self, adapter: ChannelAdapter, message: InboundMessage) -> None:
        command = commands.command_of(message.text)
        if command == "new":
            await self.store.next_thread(adapter.spec.name, message.conversation)
            self._say(adapter, message, commands.NEW_THREAD)
        elif command == "stop":
            self._say(adapter, message, await self._stop(adapter, message))
        elif command == "status":
            self._say(adapter, message, await self._status(adapter, message))
        elif command in ("start", "help"):
            self._say(adapter, message, commands.HELP)
        else:
            await self._start(adapter, message)

    # ---- runs ------------------------------------------------------------------

    def _metadata(self, adapter: ChannelAdapter, message: InboundMessage) -> list[Any]:
        """The owner's principal, with who wrote on the platform (never a secret)."""
        who = {
            "platform": adapter.platform,
            "channel": adapter.spec.name,
            "user": message.user,
            "chat": message.chat,
        }
        return owner_principal(self.settings, adapter.spec, who).to_metadata()

    async def _start(self, adapter: ChannelAdapter, message: InboundMessage) -> None:
        spec = adapter.spec
        thread_id = await self.store.thread_of(spec.name, message.conversation)
        kwargs = {
            "input": {"messages": [{"role": "user", "content": message.text}]},
            "stream_mode": ["messages-tuple"],
        }
        request = admission_pb2.StartRunRequest(
            thread_id=thread_id,
            assistant_id=spec.assistant_id,
            kwargs_json=codec.dumps(kwargs),
            metadata_json=codec.dumps({"channel": spec.name, "platform": spec.platform}),
            multitask_strategy=BUSY_POLICY[spec.busy],
            if_not_exists="create",
            idempotency_key=f"channel:{spec.name}:{message.event_id}",
        )
        try:
            # The thread says where it came from, so that its owner finds it
            # (`/threads/search` by metadata); an existing thread is left as is.
            await self.admission.CreateThread(
                admission_pb2.CreateThreadRequest(
                    thread_id=thread_id,
                    metadata_json=codec.dumps(
                        {"channel": spec.name, "platform": spec.platform, "chat": message.chat}
                    ),
                    if_exists="do_nothing",
                ),
                metadata=self._metadata(adapter, message),
                timeout=self.settings.rpc_timeout_seconds,
            )
            run = await self.admission.StartRun(
                request,
                metadata=self._metadata(adapter, message),
                timeout=self.settings.rpc_timeout_seconds,
            )
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.ABORTED and spec.busy == "reject":
                self._say(adapter, message, commands.BUSY)
                return
            if error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:  # over a quota: say which
                log.warning("channel %s: run refused: %s", spec.name, error.details())
                self._say(adapter, message, commands.over_quota(error.details() or ""))
                return
            if error.code() not in REFUSALS:  # a fault, not a verdict: the retry is taken
                log.warning("channel %s: admission failed: %s", spec.name, error.code().name)
                raise ServiceError(
                    grpc.StatusCode.UNAVAILABLE, "Could not start the run now; retry."
                ) from None
            log.warning("channel %s: run refused: %s", spec.name, error.details())
            self._say(adapter, message, commands.CANNOT_START)
            return
        await self.store.event_started(spec.name, message.event_id, run.run_id)
        log.info("channel %s: event %s started run %s", spec.name, message.event_id, run.run_id)
        owed = OwedReply(
            run.run_id, run.thread_id, spec.name, codec.dumps(asdict(message)).decode(), None
        )
        await self.store.owe_reply(owed, HOLDER, self.settings.channel_reply_lease_seconds)
        self._background(self._answer(adapter, message, owed), f"answer of run {run.run_id}")

    async def _answer(
        self, adapter: ChannelAdapter, message: InboundMessage, owed: OwedReply
    ) -> None:
        """Stream one answer while holding its lease. Should this replica die, the
        lease expires and another replica adopts the answer (`adopt_orphans`)."""
        streaming = asyncio.current_task()
        assert streaming is not None
        self.answering.add(owed.run_id)
        holding = asyncio.create_task(self._hold(owed.run_id, streaming))

        async def posted(handle: str) -> None:
            await self.store.reply_posted(owed.run_id, HOLDER, handle)

        try:
            await stream_reply(
                adapter,
                message,
                owed.run_id,
                self.journal,
                lambda: self._status_of(adapter, message, owed),
                self.settings.channel_edit_seconds,
                owed.handle,
                posted,
            )
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND:
                raise  # the journal or admission is away: the lease lapses, it is adopted
        finally:
            holding.cancel()
            self.answering.discard(owed.run_id)
        await self.store.reply_done(owed.run_id)

    async def _hold(self, run_id: str, streaming: asyncio.Task[Any]) -> None:
        lease = self.settings.channel_reply_lease_seconds
        while True:
            await asyncio.sleep(lease / 3)
            try:
                held = await self.store.hold_reply(run_id, HOLDER, lease)
            except Exception as error:  # the database is away: try again soon
                log.warning("answer of run %s: lease not renewed: %s", run_id, type(error).__name__)
                continue
            if not held:  # another replica adopted it: stop, it goes on
                streaming.cancel()
                return

    async def adopt_orphans(self) -> int:
        """Resume answers whose replica died; returns how many were adopted."""
        owed_list = await self.store.adopt_replies(
            HOLDER, self.settings.channel_reply_lease_seconds, skip=self.answering
        )
        for owed in owed_list:
            adapter = self.adapters.get(owed.channel)
            if adapter is None:  # the channel left the config
                await self.store.reply_done(owed.run_id)
                continue
            message = InboundMessage(**codec.loads(owed.message))
            log.info("channel %s: adopted the answer of run %s", owed.channel, owed.run_id)
            self._background(self._answer(adapter, message, owed), f"answer of run {owed.run_id}")
        return len(owed_list)

    async def _status_of(
        self, adapter: ChannelAdapter, message: InboundMessage, owed: OwedReply
    ) -> int:
        found = await self.admission.GetRun(
            admission_pb2.GetRunRequest(thread_id=owed.thread_id, run_id=owed.run_id),
            metadata=self._metadata(adapter, message),
            timeout=self.settings.rpc_timeout_seconds,
        )
        return int(found.status)

    async def _active_runs(
        self, adapter: ChannelAdapter, message: InboundMessage
    ) -> tuple[str, list[common_pb2.Run]]:
        thread_id = await self.store.thread_of(adapter.spec.name, message.conversation)
        found: list[common_pb2.Run] = []
        for status in ACTIVE:
            try:
                listed = await self.admission.ListRuns(
                    admission_pb2.ListRunsRequest(thread_id=thread_id, limit=100, status=status),
                    metadata=self._metadata(adapter, message),
                    timeout=self.settings.rpc_timeout_seconds,
                )
            except grpc.aio.AioRpcError as error:
                if error.code() == grpc.StatusCode.NOT_FOUND:
                    return thread_id, []  # no thread yet: nothing ever ran
                raise
            found.extend(listed.runs)
        return thread_id, found

    async def _stop(self, adapter: ChannelAdapter, message: InboundMessage) -> str:
        thread_id, active = await self._active_runs(adapter, message)
        if not active:
            return commands.NOTHING_TO_STOP
        try:
            await self.admission.CancelRuns(
                admission_pb2.CancelRunsRequest(
                    thread_id=thread_id, run_ids=[run.run_id for run in active], action="interrupt"
                ),
                metadata=self._metadata(adapter, message),
                timeout=self.settings.rpc_timeout_seconds,
            )
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND:  # they ended meanwhile
                raise
        return commands.STOPPED

    async def _status(self, adapter: ChannelAdapter, message: InboundMessage) -> str:
        _, active = await self._active_runs(adapter, message)
        if not active:
            return commands.IDLE
        running = [run.run_id for run in active if run.status == common_pb2.RUN_STATUS_RUNNING]
        return commands.working(running, len(active) - len(running))

    # ---- replies -------------------------------------------------------------------

    def _say(self, adapter: ChannelAdapter, message: InboundMessage, text: str) -> None:
        """A short answer (command, refusal), posted without holding up the platform."""
        self._background(adapter.post(message, text), f"reply in {adapter.spec.name}")

    def _background(self, work: Coroutine[Any, Any, Any], what: str) -> None:
        async def guarded() -> None:
            try:
                await work
            except PlatformCallFailed as error:
                log.warning("%s failed: %s", what, error)
            except grpc.aio.AioRpcError as error:
                log.warning("%s failed: %s %s", what, error.code().name, error.details())
            except Exception as error:  # a reply must never take the service down
                log.warning("%s failed: %s", what, type(error).__name__)

        task = asyncio.create_task(guarded())
        self.replies.add(task)
        task.add_done_callback(self.replies.discard)

    async def close(self) -> None:
        for task in list(self.replies):
            task.cancel()
        await asyncio.gather(*self.replies, return_exceptions=True)
