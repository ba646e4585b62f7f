"""Run the gateway with uvicorn; SIGTERM drains open connections."""

from __future__ import annotations

import signal

import uvicorn

from waybill.common.logs import configure_logging
from waybill.common.project import ProjectError
from waybill.common.settings import get_settings
from waybill.gateway.app import create_app
from waybill.gateway.project_http import served


def main() -> None:
    settings = get_settings()
    configure_logging("gateway", settings.log_format)
    # uvicorn drains on SIGTERM, then re-raises the signal to the handler that was
    # installed before it; a no-op one lets a clean drain exit with status 0.
    signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        app = create_app(settings)
    except ProjectError as error:  # the project cannot be served: say why, do not start
        raise SystemExit(f"gateway: {error}") from None
    uvicorn.run(
        served(app, app.state.http),
        host=settings.http_host,
        port=settings.http_port,
        log_level="info",
        log_config=None,  # uvicorn's lines go through our (JSON) handler
        timeout_graceful_shutdown=int(settings.shutdown_grace_seconds),
    )


if __name__ == "__main__":
    main()
