"""The services a runner calls, each call with a deadline."""

from __future__ import annotations

from dataclasses import dataclass

from waybill.common.grpc_channels import PeerChannels
from waybill.services.runner.reporting.journal_link import JournalLink
from waybill.v1 import admission_pb2_grpc, delivery_pb2_grpc, journal_pb2_grpc


@dataclass
class RunnerPeers:
    admission: admission_pb2_grpc.AdmissionStub
    journal: journal_pb2_grpc.JournalStub
    delivery: delivery_pb2_grpc.DeliveryStub
    journal_link: JournalLink  # the runner's one append stream, shared by its runs
    # Every call a run makes has a deadline: a peer that hangs fails the call
    # (and the run's attempt) instead of holding the run forever.
    rpc_timeout: float = 30.0
    # How long a peer may stay away before a run is handed back (outages.py).
    outage_seconds: float = 60.0


def connect_peers(channels: PeerChannels) -> RunnerPeers:
    journal = journal_pb2_grpc.JournalStub(channels.journal())
    return RunnerPeers(
        admission=admission_pb2_grpc.AdmissionStub(channels.admission()),
        journal=journal,
        journal_link=JournalLink(journal),
        delivery=delivery_pb2_grpc.DeliveryStub(channels.delivery()),
        rpc_timeout=channels.settings.rpc_timeout_seconds,
        outage_seconds=channels.settings.dependency_outage_seconds,
    )
