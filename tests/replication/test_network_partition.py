"""A network partition (test 6 of the replication issue): three brokers in network namespaces of their
own; the leader is cut off from the other two (the quorum's majority) while clients still reach it.
The minority side cannot complete an acks=all write; the majority elects a new leader and writes go
on; after the heal the logs converge and every acknowledged record is there once."""

from __future__ import annotations

import time

import pytest
from tests.replication.cluster_ops import FAST, wait_until
from tests.replication.netns import Driver, NamespacedNode, NetworkLab, unavailable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.onceflow_only]

TOPIC = "split"


@pytest.fixture
def lab():
    reason = unavailable()
    if reason is not None:
        pytest.skip(f"no network namespaces here: {reason}")
    with NetworkLab(3) as network:
        yield network


def test_the_cut_off_leader_cannot_commit_and_the_logs_converge_after_the_heal(lab, tmp_path):
    nodes = {n: NamespacedNode(tmp_path / f"node-{n}", n, lab, FAST) for n in lab.namespaces}
    driver = Driver(lab)
    try:
        for node in nodes.values():
            node.start_nowait()
        for node in nodes.values():
            node.wait_ready(90)
        bootstrap = ",".join(node.address for node in nodes.values())
        driver.call("create_topic", bootstrap=bootstrap, topic=TOPIC)
        driver.call("load_start", bootstrap=bootstrap, topic=TOPIC)
        time.sleep(2)
        leader = driver.call("partition", bootstrap=bootstrap, topic=TOPIC)["leader"]
        majority = ",".join(node.address for n, node in nodes.items() if n != leader)
        lab.cut(leader)
        # The cut-off leader still takes a write, but can never commit it.
        minority = driver.call(
            "produce_raw",
            address=nodes[leader].address,
            topic=TOPIC,
            values=["minority-0", "minority-1"],
            acks=-1,
            timeout_ms=3000,
            id_from=majority.split(",")[0],
        )
        wait_until(
            lambda: driver.call("partition", bootstrap=majority, topic=TOPIC)["leader"] not in (leader, -1),
            60,
            "the majority elects a leader",
        )
        time.sleep(3)  # writes go on at the new leader
        lab.heal(leader)
        wait_until(
            lambda: len(driver.call("partition", bootstrap=bootstrap, topic=TOPIC)["isr"]) == 3,
            60,
            "the old leader back in the ISR",
        )
        acked = driver.call("load_stop")
        values = driver.call("read_all", bootstrap=bootstrap, topic=TOPIC)
    finally:
        driver.close()
        for node in nodes.values():
            node.kill9()
    assert minority[0] != 0, minority  # never acknowledged
    assert not [v for v in values if v.startswith("minority")]
    assert len(values) == len(set(values))
    assert len(acked) > 20
    assert set(acked) <= set(values)
