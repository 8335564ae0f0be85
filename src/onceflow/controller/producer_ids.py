"""AllocateProducerIds (67): blocks of producer ids (Kafka's ``ProducerIdControlManager``).

Each broker's transaction coordinator asks the controller for a block of 1,000 ids and hands them
out locally; the controller writes a ProducerIdsRecord whose ``next_producer_id`` is the first id
of the following block, so two brokers never get overlapping blocks, even across controller
failovers (the allocator is in the replicated log).
"""

from __future__ import annotations

from onceflow.controller.brokers import check_broker_epoch
from onceflow.controller.config import PRODUCER_ID_BLOCK_SIZE
from onceflow.metadata.image import MetadataImage
from onceflow.metadata.records import ProducerIdsRecord
from onceflow.protocol.errors import ErrorCode, KafkaError
from onceflow.protocol.messages import AllocateProducerIdsRequest, AllocateProducerIdsResponse

_MAX_PRODUCER_ID = (1 << 63) - 1


def allocate_producer_ids(
    image: MetadataImage, request: AllocateProducerIdsRequest
) -> tuple[list, AllocateProducerIdsResponse]:
    check_broker_epoch(image, request.broker_id, request.broker_epoch)
    start = image.next_producer_id
    if start > _MAX_PRODUCER_ID - PRODUCER_ID_BLOCK_SIZE:
        raise KafkaError(
            "Exhausted all producerIds as the next block's end producerId would overflow",
            ErrorCode.UNKNOWN_SERVER_ERROR,
        )
    record = ProducerIdsRecord(
        broker_id=request.broker_id,
        broker_epoch=request.broker_epoch,
        next_producer_id=start + PRODUCER_ID_BLOCK_SIZE,
    )
    response = AllocateProducerIdsResponse(
        throttle_time_ms=0, error_code=0, producer_id_start=start, producer_id_len=PRODUCER_ID_BLOCK_SIZE
    )
    return [record], response
