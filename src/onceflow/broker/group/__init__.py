"""Consumer groups on the broker: Kafka's classic group protocol and the consumer group protocol of
KIP-848, persisted in ``__consumer_offsets`` through the coordinator runtime
(:mod:`onceflow.broker.coordinator`).

- :mod:`.coordinator`: every API, run as an operation of the group's partition on the runtime.
- :mod:`.shard`, :mod:`.offset_operations`: the runtime's shard: the groups and offsets of the loaded
  partitions, what each operation emits, and how the records replay.
- :mod:`.service`: what the broker's handlers await (answers held until their records are committed).
- :mod:`.state`: the classic state machine as a transition table.
- :mod:`.metadata`, :mod:`.member`: one classic group and its members.
- :mod:`.membership`: JoinGroup / SyncGroup / Heartbeat / LeaveGroup and their timers.
- :mod:`.offsets`, :mod:`.offset_expiry`: committed offsets and pending transactional ones; which expire.
- :mod:`.log_format`, :mod:`.persistence`: the internal topic's records and how it is reached.
- :mod:`.descriptions`: what DescribeGroups and ListGroups show.
- :mod:`.consumer_groups`, :mod:`.reconciliation`, :mod:`.assignment`: KIP-848 groups
  (ConsumerGroupHeartbeat), how a member moves to its target assignment, and the assignors;
  :mod:`.consumer_group_records`: their records in ``__consumer_offsets``.
"""
