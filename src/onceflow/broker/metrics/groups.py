"""The group coordinator's state, read at scrape time through its read-only entry points (the ones
ListGroups, OffsetFetch and DescribeGroups use): groups per state, committed offsets, members, and
consumer lag per group and partition.

Lag is what ``onceflow groups describe`` shows: the partition's high watermark (its log end offset
for a read_uncommitted consumer) minus the committed offset, never below 0; partitions with no
committed offset have no lag. The names are kafka_exporter's (``kafka_consumergroup_lag{consumergroup,
topic, partition}`` and its sums), which lag dashboards and alerts are written for; the web console's
charts read them too. Computing it costs one dictionary lookup per committed offset.

Groups per state are Kafka's ``kafka.coordinator.group:type=GroupMetadataManager`` gauges (classic
groups) and the ``group-coordinator-metrics`` group counts (``group-count`` by protocol,
``consumer-group-count`` by state).
"""

from __future__ import annotations

import logging
from typing import Any

from onceflow.broker.metrics.families import Families, exporter_default, jmx
from onceflow.protocol.errors import KafkaError

log = logging.getLogger(__name__)

# GroupMetadataManager's gauge per classic group state (Kafka's names).
CLASSIC_STATES = {
    "PreparingRebalance": "NumGroupsPreparingRebalance",
    "CompletingRebalance": "NumGroupsCompletingRebalance",
    "Stable": "NumGroupsStable",
    "Dead": "NumGroupsDead",
    "Empty": "NumGroupsEmpty",
}
CONSUMER_STATES = ("Empty", "Assigning", "Reconciling", "Stable", "Dead")


def collect_groups(families: Families, groups: Any, topics: Any) -> None:
    try:
        listings = groups.list_groups()
    except KafkaError as exc:  # still loading __consumer_offsets
        log.debug("groups not collected: %s", exc)
        return
    classic = {state: 0 for state in CLASSIC_STATES}
    consumer = dict.fromkeys(CONSUMER_STATES, 0)
    for listing in listings:
        counts = consumer if listing.group_type == "consumer" else classic
        counts[listing.state] = counts.get(listing.state, 0) + 1
    n_classic = sum(classic.values())
    families.gauge(
        jmx("coordinator_group", "GroupMetadataManager", "NumGroups"), "Classic groups.", n_classic
    )
    for state, mbean in CLASSIC_STATES.items():
        families.gauge(
            jmx("coordinator_group", "GroupMetadataManager", mbean),
            f"Classic groups in state {state}.",
            classic[state],
        )
    group_count = exporter_default("server", "group-coordinator-metrics", "group-count")
    families.gauge(group_count, "Groups per protocol.", n_classic, {"protocol": "classic"})
    families.gauge(group_count, "Groups per protocol.", sum(consumer.values()), {"protocol": "consumer"})
    for state, n in consumer.items():
        families.gauge(
            exporter_default("server", "group-coordinator-metrics", "consumer-group-count"),
            "Consumer-protocol (KIP-848) groups per state.",
            n,
            {"state": state},
        )
    offsets = _collect_offsets(families, groups, topics, sorted(g.group_id for g in listings))
    families.gauge(
        jmx("coordinator_group", "GroupMetadataManager", "NumOffsets"), "Committed offsets held.", offsets
    )


def _collect_offsets(families: Families, groups: Any, topics: Any, group_ids: list[str]) -> int:
    """Committed offset, lag and members of every group; returns how many offsets there are."""
    total = 0
    for name in ("current_offset", "current_offset_sum", "lag", "lag_sum", "members"):
        families.declare(f"kafka_consumergroup_{name}", _MEANING[name], "gauge")
    for group_id in group_ids:
        try:
            error, committed = groups.fetch_offsets(group_id, None)
            members = len(groups.describe_group(group_id).members)
        except KafkaError as exc:
            log.debug("group %s not collected: %s", group_id, exc)
            continue
        if error:
            continue
        families.gauge("kafka_consumergroup_members", "", members, {"consumergroup": group_id})
        offset_sums: dict[str, int] = {}
        lag_sums: dict[str, int] = {}
        for (topic, index), value, code in committed:
            if value is None or code:
                continue
            total += 1
            labels = {"consumergroup": group_id, "topic": topic, "partition": str(index)}
            families.gauge("kafka_consumergroup_current_offset", "", value.offset, labels)
            offset_sums[topic] = offset_sums.get(topic, 0) + value.offset
            t = topics.get(topic)
            if t is None or index >= len(t.partitions) or t.partitions[index].log is None:
                # Deleted since, or (on a cluster) its log is on another broker: no log end here.
                continue
            lag = max(t.partitions[index].log.high_watermark - value.offset, 0)
            families.gauge("kafka_consumergroup_lag", "", lag, labels)
            lag_sums[topic] = lag_sums.get(topic, 0) + lag
        for topic, n in offset_sums.items():
            families.gauge(
                "kafka_consumergroup_current_offset_sum", "", n, {"consumergroup": group_id, "topic": topic}
            )
        for topic, n in lag_sums.items():
            families.gauge("kafka_consumergroup_lag_sum", "", n, {"consumergroup": group_id, "topic": topic})
    return total


_MEANING = {
    "current_offset": "Committed offset of a group on a partition.",
    "current_offset_sum": "Committed offsets of a group on a topic, summed over its partitions.",
    "lag": "High watermark - committed offset of a group on a partition (>= 0).",
    "lag_sum": "Lag of a group on a topic, summed over its partitions.",
    "members": "Members of a group.",
}
