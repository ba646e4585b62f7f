"""Run the gateway with uvicorn; SIGTERM drains open connections."""

from __future__ import annotations

import signal
import sys

import uvicorn

from waybill.common.extras import MISSING_EXTRA_EXIT_CODE, MissingExtra
from waybill.common.logs import configure_logging
from waybill.common.ports import PORT_IN_USE_EXIT_CODE, PortInUse, bind_http_socket
from waybill.common.project import PROJECT_EXIT_CODE, ProjectError
from waybill.common.settings import get_settings
from waybill.gateway.app import create_app
from waybill.gateway.project_http import served


def main() -> None:
    settings = get_settings()
    configure_logging("gateway", settings.log_format, settings.log_level)
    try:  # first: a busy port is said at once, before the app's slow start
        listening = bind_http_socket(settings.http_host, settings.http_port)
    except PortInUse as busy:
        print(f"gateway: refusing to start: {busy}", file=sys.stderr, flush=True)
        sys.exit(PORT_IN_USE_EXIT_CODE)
    # uvicorn drains on SIGTERM, then re-raises the signal to the handler that was
    # installed before it; a no-op one lets a clean drain exit with status 0.
    signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        app = create_app(settings)
    except MissingExtra as missing:  # a setting needs an optional part not installed
        print(f"gateway: refusing to start: {missing}", file=sys.stderr, flush=True)
        sys.exit(MISSING_EXTRA_EXIT_CODE)
    except ProjectError as error:  # the project cannot be served: say why, do not start
        print(f"gateway: refusing to start: {error}", file=sys.stderr, flush=True)
        sys.exit(PROJECT_EXIT_CODE)
    config = uvicorn.Config(
        served(app, app.state.http),
        host=settings.http_host,
        port=settings.http_port,
        log_level=settings.log_level.lower(),
        log_config=None,  # uvicorn's lines go through our (JSON) handler
        timeout_graceful_shutdown=int(settings.shutdown_grace_seconds),
    )
    uvicorn.Server(config).run(sockets=[listening])


if __name__ == "__main__":
    main()
