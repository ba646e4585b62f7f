"""The project's own `services` package (a name Waybill's folders must not shadow)."""
