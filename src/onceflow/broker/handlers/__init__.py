"""The registry of request handlers: one module per Kafka API, listed once here.

Each module has ``API_KEY``, ``MIN_VERSION``, ``MAX_VERSION``, ``REQUEST`` (the kafka.protocol request
class) and ``async def handle(ctx, request) -> response | None`` (``None``: send no response).
ApiVersions advertises exactly this list. To add an API, write its module and append it here.
"""

from onceflow.broker.handlers import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_configs,
    api_versions,
    create_partitions,
    create_topics,
    delete_groups,
    delete_topics,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_producers,
    describe_transactions,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    produce,
    sync_group,
    txn_offset_commit,
    write_txn_markers,
)

HANDLERS = [
    produce,
    fetch,
    list_offsets,
    metadata,
    api_versions,
    create_topics,
    delete_topics,
    describe_configs,
    alter_configs,
    incremental_alter_configs,
    create_partitions,
    describe_cluster,
    # consumer groups (broker/group)
    find_coordinator,
    join_group,
    sync_group,
    heartbeat,
    leave_group,
    offset_commit,
    offset_fetch,
    describe_groups,
    list_groups,
    delete_groups,
    offset_delete,
    # idempotent producer (issue 3)
    init_producer_id,
    describe_producers,
    # transactions (issue 4)
    add_partitions_to_txn,
    add_offsets_to_txn,
    end_txn,
    write_txn_markers,
    txn_offset_commit,
    describe_transactions,
    list_transactions,
]
