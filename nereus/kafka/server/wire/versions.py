"""ApiVersions: the API keys and versions this broker speaks (``codec.kafka.protocol.SUPPORTED``)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ....codec.kafka import NO_THROTTLE, make, nested
from ....codec.kafka.protocol import SUPPORTED, response_schema


def _api_keys(cls) -> tuple:
    return tuple(nested(cls, "ApiVersion")(api_key=k, min_version=lo, max_version=hi)
                 for k, (_, lo, hi) in sorted(SUPPORTED.items()))


def api_versions_response(head):
    """ApiVersions v0 with UNSUPPORTED_VERSION (for versions we do not speak)."""
    cls = response_schema(18, 0)
    return head, cls(error_code=ErrorCode.unsupported_version, api_keys=_api_keys(cls))


def handle_api_versions(conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    return make(cls, error_code=ErrorCode.none, api_keys=_api_keys(cls), throttle_time=NO_THROTTLE)


__all__ = ["api_versions_response", "handle_api_versions"]
