"""Alembic's entry point for the delivery migrations (`alembic.command.upgrade`,
through `waybill migrate`): they run on the connection it gives, recorded in
`alembic_version_delivery`."""

from waybill.common.sql import run_migrations

run_migrations("delivery")
