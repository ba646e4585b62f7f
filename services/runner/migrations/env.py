"""Alembic's entry point for the runner migrations (`alembic.command.upgrade`,
through `waybill migrate`): they run on the connection it gives, recorded in
`alembic_version_runner`."""

from waybill.common.sql import run_migrations

run_migrations("runner")
