"""The project's own `common` package (a name Waybill's folders must not shadow)."""
