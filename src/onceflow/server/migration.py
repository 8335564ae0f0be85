"""A data dir written by a single-node onceflow, as metadata records.

Before the metadata log, a single broker kept its cluster state in files of its data dir:
``topics.json`` (each topic's name, id, partition count, config overrides) and
``producer-id-block.json`` (where the next block of producer ids starts). On an empty metadata log,
the active controller writes these as its bootstrap records, so that the same topics (same ids, same
configs, their partitions led by this node) and no producer id already handed out come back:

- a ``TopicRecord`` per topic, its ``ConfigRecord``s, a ``PartitionRecord`` per partition with this node
  as the only replica, leader and ISR;
- internal topics written by an onceflow without compaction become compacted (``cleanup.policy``);
- a ``ProducerIdsRecord`` moving the allocator past the last block the old broker reserved.

A node of a cluster also brings in the data dir's ACLs (``acls.json``: an AccessControlEntryRecord
each, with a new id) and SCRAM credentials (``scram-credentials.json``: a UserScramCredentialRecord
each), since a cluster keeps those in its metadata log. That is also how the first administrator gets
a credential on a cluster that only accepts SASL clients, as ``kafka-storage format --add-scram``
does: ``onceflow users scram set --data-dir`` on the controllers' data dirs before their first start.
A single node keeps using those files, and they stay where they are.
"""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

from onceflow.broker.security.acl_store import FILE_NAME as ACLS_FILE
from onceflow.broker.security.acl_store import FileAclStore
from onceflow.broker.security.credentials import FILE_NAME as SCRAM_FILE
from onceflow.broker.security.credentials import FileScramStore
from onceflow.broker.topics import INTERNAL_TOPIC_CONFIGS, INTERNAL_TOPICS, TOPICS_FILE, _read_topics_file
from onceflow.broker.txn.pid_manager import PRODUCER_ID_BLOCK_FILE
from onceflow.metadata.records import (
    RESOURCE_TOPIC,
    ConfigRecord,
    PartitionRecord,
    ProducerIdsRecord,
    TopicRecord,
)

log = logging.getLogger(__name__)


def single_node_records(data_dir: Path, node_id: int, *, security: bool = False) -> list:
    """The records of a single-node data dir's topics and producer ids (none for a new data dir), and
    with ``security`` (a cluster node) its ACLs and SCRAM credentials. ValueError: a damaged file."""
    data_dir = Path(data_dir)
    records: list = []
    path = data_dir / TOPICS_FILE
    if path.exists():
        for name, topic_id, configs, _internal, partitions in _read_topics_file(path):
            if name in INTERNAL_TOPICS and "cleanup.policy" not in configs:
                # Written by an onceflow without compaction, which kept internal topics under "delete".
                configs = {**INTERNAL_TOPIC_CONFIGS, **configs}
            records.append(TopicRecord(name=name, topic_id=topic_id))
            for key, value in sorted(configs.items()):
                records.append(
                    ConfigRecord(resource_type=RESOURCE_TOPIC, resource_name=name, name=key, value=value)
                )
            for index in range(partitions):
                records.append(
                    PartitionRecord(
                        partition_id=index,
                        topic_id=topic_id,
                        replicas=(node_id,),
                        isr=(node_id,),
                        leader=node_id,
                        leader_epoch=0,
                        partition_epoch=0,
                    )
                )
    next_producer_id = _next_producer_id(data_dir)
    if next_producer_id > 0:
        records.append(
            ProducerIdsRecord(broker_id=node_id, broker_epoch=-1, next_producer_id=next_producer_id)
        )
    if security:
        records += security_records(data_dir)
    if records:
        log.info(
            "bringing the topics, producer ids, ACLs and credentials of %s into the metadata log (%d records)",
            data_dir,
            len(records),
        )
    return records


def security_records(data_dir: Path) -> list:
    """The ACLs and SCRAM credentials a data dir's files hold, as the records a cluster keeps them in."""
    records: list = []
    for (user, mechanism), credential in sorted(FileScramStore(data_dir).load().items()):
        records.append(credential.to_record(user, mechanism))
    records += [acl.to_record(uuid.uuid4()) for acl in sorted(set(FileAclStore(data_dir).load()))]
    return records


def _next_producer_id(data_dir: Path) -> int:
    path = data_dir / PRODUCER_ID_BLOCK_FILE
    try:
        return max(0, int(json.loads(path.read_text())["next_block_start"]))
    except FileNotFoundError:
        return 0
    except (ValueError, KeyError, TypeError) as exc:
        raise RuntimeError(f"{path} is unreadable ({exc}); restore it or remove it deliberately") from exc


RETIRED_SUFFIX = ".migrated"


def retire_single_node_files(data_dir: Path, *, security: bool = False) -> None:
    """Once their records are committed to the metadata log, the old files are kept aside (renamed
    ``*.migrated``) rather than deleted: a copy for the operator, never read again (with
    ``security``, a cluster node's, the ACL and SCRAM files too)."""
    names = (TOPICS_FILE, PRODUCER_ID_BLOCK_FILE) + ((ACLS_FILE, SCRAM_FILE) if security else ())
    for name in names:
        path = Path(data_dir) / name
        if path.exists():
            path.rename(path.with_name(name + RETIRED_SUFFIX))
            log.info(
                "%s is in the metadata log now; the old file is kept as %s%s", name, name, RETIRED_SUFFIX
            )
