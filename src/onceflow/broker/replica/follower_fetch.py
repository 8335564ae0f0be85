"""A follower's Fetch, as the leader's broker serves it: the request goes to the replica manager
(which records the follower's progress and holds the request until data comes, as Kafka's delayed
fetch), and its answers go back in Kafka's Fetch response. The Fetch handler sends every request with
a replica id here; consumers' fetches stay with the handler.
"""

from __future__ import annotations

from kafka.protocol.consumer import FetchRequest, FetchResponse

from onceflow.broker.replica import wire
from onceflow.broker.replica.service import ReplicationService

_TopicResponse = FetchResponse.FetchableTopicResponse


async def serve(service: ReplicationService, request: FetchRequest, version: int) -> FetchResponse:
    image = service.manager.image
    names = {topic_id: name for name, topic_id in image.topic_ids.items()}
    data, _replica = wire.follower_fetch(request, version, names)
    answers = await service.fetch_for_follower(data)
    topics: list[_TopicResponse] = []
    for (topic, index), answer in answers.items():
        if not topics or topics[-1].topic != topic:
            topics.append(_TopicResponse(topic=topic, topic_id=image.topic_ids.get(topic), partitions=[]))
        topics[-1].partitions.append(wire.fetch_partition_data(index, answer))
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=topics)
