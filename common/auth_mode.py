"""Whether a deployment asks who is calling: the one question the gateway (what a
browser may do, gateway/browser_guard.py) and the runner (whether the sandbox
tools are offered) must answer alike."""

from __future__ import annotations

from waybill.common.settings import Settings


def auth_configured(settings: Settings) -> bool:
    """An API key, principals, the internal token or the project's own auth: the
    gateway authenticates every API request. Otherwise every request acts as the
    one local user (the embedded default)."""
    project = settings.project()
    return bool(
        settings.api_key
        or settings.internal_token
        or settings.principals()
        or (project is not None and project.section("auth"))
    )


def sandbox_offered(settings: Settings) -> bool:
    """The `bash` and `python` tools: with a `sandbox` section, and with auth off only
    when it says `allow_without_auth: true` (any web page the browser of someone on
    this machine opens could otherwise start a run that calls them)."""
    spec = settings.sandbox()
    if spec is None:
        return False
    return spec.allow_without_auth or auth_configured(settings)
