"""ApiVersions (18): which APIs and versions this broker serves: exactly the HANDLERS list.

An ApiVersions request above our max version never reaches this handler: the connection answers it
with a v0 body and UNSUPPORTED_VERSION (see ``protocol.apis.unsupported_api_versions_response``).
"""

from __future__ import annotations

from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from onceflow.broker.context import RequestContext

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4
REQUEST = ApiVersionsRequest


def advertised_versions() -> list[ApiVersionsResponse.ApiVersion]:
    from onceflow.broker.handlers import HANDLERS  # the registry imports this module

    return [
        ApiVersionsResponse.ApiVersion(
            api_key=h.API_KEY, min_version=h.MIN_VERSION, max_version=h.MAX_VERSION
        )
        for h in sorted(HANDLERS, key=lambda h: h.API_KEY)
    ]


async def handle(ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    return ApiVersionsResponse(error_code=0, api_keys=advertised_versions(), throttle_time_ms=0)
