"""The names of Kafka's internal topics (Kafka's ``Topic.GROUP_METADATA_TOPIC_NAME`` and
``Topic.TRANSACTION_STATE_TOPIC_NAME``): the one place they are spelled."""

from __future__ import annotations

CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
