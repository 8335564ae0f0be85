"""Reading the consumer protocol's subscription bytes (the broker needs the topics for OffsetDelete)."""

from __future__ import annotations

import logging

from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from onceflow.broker.group.metadata import GroupMetadata

log = logging.getLogger(__name__)


def subscribed_topics(group: GroupMetadata) -> set[str] | None:
    """Topics any member of a consumer-protocol group subscribes to, or ``None`` if some member's
    metadata can't be read (then nobody may delete the group's offsets: we can't prove them unused)."""
    topics: set[str] = set()
    for member in group.members.values():
        try:
            raw = member.metadata_for(group.protocol_name or "")
            topics.update(ConsumerProtocolSubscription.decode(bytes(raw)).topics or [])
        except Exception:
            log.warning("group %s: unreadable subscription of member %s", group.group_id, member.member_id)
            return None
    return topics
