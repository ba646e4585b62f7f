"""Waybill, as one Python package.

The code lives in the top-level folders (`cli/`, `common/`, `gateway/`,
`services/`); the links beside this file make them `waybill.cli`,
`waybill.common`, `waybill.gateway` and `waybill.services`, so that a user's
project may have packages of its own named `common` or `services`. `waybill.v1`
holds the generated gRPC stubs (see protos/).
"""
