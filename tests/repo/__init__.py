"""Checks of the repository itself: its layout rules, the architecture map, the
generated docs and stubs, the deploy files, the OpenAPI document."""
