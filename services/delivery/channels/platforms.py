"""Which adapter serves which platform, and the configured channels checked
against them. Adding a platform is one adapter module and one line here."""

from __future__ import annotations

from waybill.common.settings import Settings
from waybill.services.delivery.channels.adapter import ChannelAdapter
from waybill.services.delivery.channels.config import (
    ChannelSpec,
    channel_entries,
    owner_principal,
    spec_of,
)
from waybill.services.delivery.channels.dingtalk import DingTalkAdapter
from waybill.services.delivery.channels.discord import DiscordAdapter
from waybill.services.delivery.channels.feishu import FeishuAdapter, LarkAdapter
from waybill.services.delivery.channels.matrix import MatrixAdapter
from waybill.services.delivery.channels.signed_webhook import SignedWebhookAdapter
from waybill.services.delivery.channels.slack import SlackAdapter
from waybill.services.delivery.channels.telegram import TelegramAdapter
from waybill.services.delivery.channels.wecom import WeComAdapter

ADAPTERS: dict[str, type[ChannelAdapter]] = {
    "telegram": TelegramAdapter,
    "slack": SlackAdapter,
    "webhook": SignedWebhookAdapter,
    "feishu": FeishuAdapter,
    "lark": LarkAdapter,
    "dingtalk": DingTalkAdapter,
    "wecom": WeComAdapter,
    "discord": DiscordAdapter,
    "matrix": MatrixAdapter,
}


def load_channels(settings: Settings) -> dict[str, ChannelSpec]:
    """The configured channels by name; a mistake stops the service at start-up."""
    specs: dict[str, ChannelSpec] = {}
    for entry in channel_entries(settings):
        spec = spec_of(entry)
        if spec.platform not in ADAPTERS:
            known = ", ".join(sorted(ADAPTERS))
            raise ValueError(f"channel {spec.name}: platform {spec.platform} is not one of {known}")
        missing = [f for f in ADAPTERS[spec.platform].needs(spec) if not getattr(spec, f)]
        if missing:
            raise ValueError(f"channel {spec.name} ({spec.platform}) needs {', '.join(missing)}")
        owner_principal(settings, spec, {})  # the owner must exist
        if spec.name in specs:
            raise ValueError(f"channels: the name {spec.name} is used twice")
        specs[spec.name] = spec
    return specs
