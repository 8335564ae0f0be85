"""The names of Kafka's internal topics (Kafka's ``Topic.GROUP_METADATA_TOPIC_NAME``,
``Topic.TRANSACTION_STATE_TOPIC_NAME`` and ``Topic.CLUSTER_METADATA_TOPIC_NAME``): the one place they
are spelled. ``INTERNAL_TOPICS`` are the two the coordinators write, which clients see as internal;
``__cluster_metadata`` is the quorum's log and no topic of any broker."""

from __future__ import annotations

CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
