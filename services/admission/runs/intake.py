"""Run intake: the one path by which a run is created.

`StartRun`, `StartRuns`, a cron's creation (its payload is checked as a run
would be) and each cron firing all come through here:

1. idempotency: a retry with a live key gets the run it created, and nothing starts;
2. every rule of `policy.py`, in its order, with nothing written;
3. the atomic insert (the multitask strategy decided under the thread's lock,
   see `run_store.py`), claiming the run at once for a free runner connected here;
   a batch is one insert of all its runs, or none, claimed by the dispatch loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.exc import IntegrityError

from waybill.common.config_file import QuotaLimits
from waybill.common.errors import ServiceError, busy, refused
from waybill.common.identity import LOCAL_USER, Principal, with_run_filters
from waybill.common.sealed import SecretsUnavailable, secrets_key
from waybill.common.settings import BUILTIN_GRAPHS, Settings
from waybill.common.tracing import run_span
from waybill.services.admission import metrics
from waybill.services.admission.assistants.assistants import AssistantCatalog, thread_config
from waybill.services.admission.rows import RunRow
from waybill.services.admission.runs.dispatch import RunnerPool
from waybill.services.admission.runs.idempotency import (
    IdempotencyKey,
    KeyedRun,
    key_for,
    replayed_run_id,
)
from waybill.services.admission.runs.leases import Lease
from waybill.services.admission.runs.policy import (
    SECRETS_KEY,
    admitted_kwargs,
    auth_user_of,
    build_run,
    check_run_budget,
    check_webhook,
    identity_of,
    merged_metadata,
    requested_checkpoint,
    sent_config,
)
from waybill.services.admission.runs.quotas import checked_by_admission
from waybill.services.admission.runs.run_store import Admit, RunStore
from waybill.services.admission.runs.runner_facts import RunnerFacts
from waybill.v1 import admission_pb2

# The project's auth filters by resource ("threads", "assistants"); None: no filter.
Filters = dict[str, dict[str, Any]] | None


class RunIntake:
    def __init__(
        self,
        runs: RunStore,
        pool: RunnerPool,
        facts: RunnerFacts,
        assistants: AssistantCatalog,
        settings: Settings,
    ) -> None:
        self.runs = runs
        self.pool = pool
        self.facts = facts
        self.assistants = assistants
        self.settings = settings
        self.allowed_models = [model.name for model in settings.models()]
        # The graphs whose model choice is Waybill's: the built-in lead_agent
        # (unless a project serves a graph of its own under that name).
        self.model_graphs = {
            graph_id
            for graph_id, spec in settings.graph_specs().items()
            if spec.target == BUILTIN_GRAPHS["lead_agent"]
        }

    async def start(
        self,
        request: admission_pb2.StartRunRequest,
        caller: Principal | None,
        filters: Filters = None,
    ) -> RunRow:
        """StartRun's whole path (idempotency, every rule, the admit) for `caller`:
        an HTTP request's principal, or a cron's owner when it fires."""
        user = caller.user_id if caller else LOCAL_USER.user_id
        key = key_for(request, user, self.settings.idempotency_seconds)
        if key is not None:  # a retry gets the run it created, and nothing starts
            found = await self.runs.keyed_run(key)
            if found is not None:
                return await self._replay(key, found)
        filters = with_run_filters(filters or {}, request.auth_filters_json)
        run, owner = await self.check(request, caller, filters)
        try:
            await self._admit(
                run,
                request.if_not_exists,
                owner,
                key,
                (filters or {}).get("threads"),
                self.quota_for(run, caller),
            )
        except IntegrityError as error:
            found = await self.runs.keyed_run(key) if key else None
            if key is not None and found is not None:
                return await self._replay(key, found)  # a twin with the same key won the race
            raise busy(
                f"Thread {run.thread_id} changed under this request (created or started "
                "concurrently); retry it."
            ) from error
        return run

    async def start_many(
        self,
        requests: Sequence[admission_pb2.StartRunRequest],
        caller: Principal | None,
        filters: Filters = None,
    ) -> list[RunRow]:
        """Every request is checked before any run is stored: a bad one writes nothing."""
        checked = []
        for index, one in enumerate(requests):
            own = with_run_filters(filters or {}, one.auth_filters_json)
            try:
                checked.append((await self.check(one, caller, own), one, own))
            except ServiceError as error:
                raise ServiceError(error.code, f"runs[{index}]: {error.message}") from error
        admits = [
            Admit(
                run,
                one.if_not_exists or "reject",
                owner,
                own.get("threads"),
                self.quota_for(run, caller),
            )
            for (run, owner), one, own in checked
        ]
        try:
            await self.runs.admit_runs(admits)
        except IntegrityError as error:
            raise busy(
                "A thread of this batch changed under it (created or started "
                "concurrently); retry it."
            ) from error
        admitted = [run for (run, _), _, _ in checked]
        for run in admitted:
            self._admitted(run)
        return admitted

    async def check(
        self,
        request: admission_pb2.StartRunRequest,
        caller: Principal | None,
        filters: Filters = None,
    ) -> tuple[RunRow, str | None]:
        """Every rule of `policy.py`, in its order; nothing is written.
        Returns the run to store and the owner its caller is confined to."""
        owner = caller.owner_filter if caller else None
        filters = filters or {}
        assistant = await self.assistants.resolve_for_run(
            request.assistant_id, filters.get("assistants"), owner
        )
        allowed_models = self.allowed_models if assistant.graph_id in self.model_graphs else None
        run = build_run(request, assistant, allowed_models, caller)  # checks 1-4
        await check_webhook(run.kwargs, self.settings)  # check 4, the webhook's target
        check_run_budget(run.kwargs, self.settings.quotas().run)  # check 4, its budget
        if_not_exists = request.if_not_exists or "reject"
        thread = await self.runs.threads.thread_for_run(
            run.thread_id, owner, if_not_exists, filters.get("threads")
        )  # 5
        owner_id = thread.owner_id if thread else run.owner_id
        run.sent_metadata = run.metadata
        run.metadata = merged_metadata(run.metadata, assistant, thread.metadata if thread else {})
        run.thread_config = thread_config(
            assistant, thread.config if thread else {}, sent_config(request)
        )
        identity = identity_of(caller, owner_id)
        await self.facts.ensure_buildable(run.graph_id)  # check 6: its factory does not raise
        run.kwargs = admitted_kwargs(
            run.kwargs, auth_user_of(caller, identity), self._secrets_key(run.kwargs)
        )
        checkpoint_id = requested_checkpoint(run.kwargs, run.thread_id)  # check 7
        if checkpoint_id:
            graph_id = str(thread.metadata.get("graph_id") or "") if thread else ""
            await self.facts.require_checkpoint(run.thread_id, graph_id, checkpoint_id)
        return run, owner

    def quota_for(self, run: RunRow, caller: Principal | None) -> QuotaLimits | None:
        """The limits of the run's owner, or None when admission has none to check."""
        if self.runs.quotas is None:
            return None
        who = caller or LOCAL_USER
        limits = self.runs.quotas.limits_for(run.owner_id, who.user_id, who.role)
        return limits if checked_by_admission(limits) else None

    async def _replay(self, key: IdempotencyKey, found: KeyedRun) -> RunRow:
        return await self.runs.get_run(found.thread_id, replayed_run_id(key, found))

    async def _admit(
        self,
        run: RunRow,
        if_not_exists: str,
        owner: str | None,
        key: IdempotencyKey | None,
        auth: dict[str, Any] | None = None,
        quota: QuotaLimits | None = None,
    ) -> None:
        """Store a checked run; claim it for a free runner here at once when it may start."""
        runner = self.pool.reserve_slot(run.run_id)
        lease = Lease(runner.runner_id, self.pool.lease_seconds) if runner else None
        claimed = False
        try:
            with run_span("admission.admit", run.run_id, run.thread_id, run.owner_id):
                await self.runs.admit_run(
                    run, if_not_exists or "reject", lease, owner, key, auth, quota
                )
            claimed = runner is not None and run.lease_owner is not None
        finally:
            if runner is not None and not claimed:
                self.pool.release(runner.runner_id, run.run_id)  # not claimed: free the slot
        if claimed and runner is not None:
            self.pool.assign(runner, run, start_now=True)
            self.pool.leased_at_admit()  # its lease may need the loop's expiry timer
        self._admitted(run)

    def _admitted(self, run: RunRow) -> None:
        """After the commit: count the run, wake the loop for a run left unclaimed,
        and deliver the cancels its strategy made (interrupt / rollback)."""
        metrics.RUNS_ADMITTED.inc()
        if run.lease_owner is not None:  # admitted and started in one write
            metrics.RUNS_STARTED.inc()
            metrics.QUEUE_WAIT.observe(0.0)
        else:
            self.pool.wake()  # a waiting run needs a claim; a delayed one, the start timer
        for run_id, action in run.displaced:
            self.pool.send_cancel(run_id, action)

    def _secrets_key(self, kwargs: dict[str, Any]) -> bytes | None:
        context = kwargs.get("context")
        if not isinstance(context, dict) or SECRETS_KEY not in context:
            return None
        try:
            return secrets_key(self.settings)
        except SecretsUnavailable as error:
            raise refused(str(error)) from error
