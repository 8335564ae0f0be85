"""ApiVersions (18): which APIs and versions this broker serves (exactly the HANDLERS list) and, from
v3, which features it supports and which levels are finalized (KIP-584).

The one feature that matters to clients is ``transaction.version`` (KIP-890): a producer uses the
transaction protocol v2 (Produce v12 without AddPartitionsToTxn, EndTxn v5 with an epoch bump) only
when the finalized level is 2 or more. We support levels 0..2 and finalize
``BrokerConfig.transaction_version``. As in Kafka, a level 0 is not listed as finalized (level 0 means
"off"), and an ApiVersions v3 request sees a supported minimum of 0 raised to 1: clients of v3 predate
KIP-1022 and treat a range starting at 0 as invalid.

An ApiVersions request above our max version never reaches this handler: the connection answers it
with a v0 body and UNSUPPORTED_VERSION (see ``protocol.apis.unsupported_api_versions_response``).
"""

from __future__ import annotations

import functools
import time

from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from onceflow.broker.config import MAX_TRANSACTION_VERSION, MIN_TRANSACTION_VERSION
from onceflow.broker.context import RequestContext
from onceflow.protocol.transaction_versions import TRANSACTION_VERSION_FEATURE

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4
REQUEST = ApiVersionsRequest

FIRST_FEATURES_VERSION = 3
FIRST_LEVEL0_VERSION = 4  # KIP-1022: from v4 a supported range may start at 0

# Kafka's finalized-features epoch is the offset of the metadata record that set them, so it only
# grows. Our levels come from the configuration, fixed for the life of the process: the start time
# in ms grows across restarts, so a client that keeps the highest epoch it saw (Kafka's does) notices
# a broker restarted with another level.
_FEATURES_EPOCH = time.time_ns() // 1_000_000


@functools.cache
def advertised_versions() -> tuple[ApiVersionsResponse.ApiVersion, ...]:
    """Built once: every client connection asks, and building ~35 entries took ~150 µs."""
    from onceflow.broker.handlers import HANDLERS  # the registry imports this module

    return tuple(
        ApiVersionsResponse.ApiVersion(
            api_key=h.API_KEY, min_version=h.MIN_VERSION, max_version=h.MAX_VERSION
        )
        for h in sorted(HANDLERS, key=lambda h: h.API_KEY)
    )


def _features(api_version: int, transaction_version: int) -> dict:
    if api_version < FIRST_FEATURES_VERSION:
        return {}
    min_level = MIN_TRANSACTION_VERSION
    if api_version < FIRST_LEVEL0_VERSION and min_level == 0:
        min_level = 1
    finalized = []
    if transaction_version > 0:
        finalized.append(
            ApiVersionsResponse.FinalizedFeatureKey(
                name=TRANSACTION_VERSION_FEATURE,
                max_version_level=transaction_version,
                min_version_level=transaction_version,
            )
        )
    return {
        "supported_features": [
            ApiVersionsResponse.SupportedFeatureKey(
                name=TRANSACTION_VERSION_FEATURE, min_version=min_level, max_version=MAX_TRANSACTION_VERSION
            )
        ],
        "finalized_features_epoch": _FEATURES_EPOCH,
        "finalized_features": finalized,
    }


async def handle(ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    return ApiVersionsResponse(
        error_code=0,
        api_keys=list(advertised_versions()),
        throttle_time_ms=0,
        **_features(ctx.api_version, ctx.config.transaction_version),
    )
