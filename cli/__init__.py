"""The `waybill` command: start the embedded default, migrate, inspect and steer
runs and threads through the gateway, and check an installation's health."""
