"""Write committed and aborted transactions with the client's transactional producer, so that the
source's read_committed behaviour can be tested."""

from __future__ import annotations

from onceflow.client import Producer


def write_transactions(bootstrap: str, topic: str, transactions: list[tuple[list[bytes], bool]]) -> None:
    """Each ``(values, commit)`` is one transaction on partition 0 of ``topic``."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"spark-test-{topic}"})
    try:
        producer.init_transactions()
        for values, commit in transactions:
            producer.begin_transaction()
            for value in values:
                producer.send(topic, value, partition=0)
            if commit:
                producer.commit_transaction()
            else:
                producer.flush()
                producer.abort_transaction()
    finally:
        producer.close()
