"""Consumer groups on the broker: Kafka's classic group protocol, persisted in ``__consumer_offsets``,
and the consumer group protocol of KIP-848.

- :mod:`.state`: the state machine as a transition table.
- :mod:`.metadata`, :mod:`.member`: one group and its members.
- :mod:`.membership`: JoinGroup / SyncGroup / Heartbeat / LeaveGroup and their timers.
- :mod:`.coordinator`: the registry of groups, offsets, admin operations, expiry.
- :mod:`.offsets`: committed offsets and pending transactional ones.
- :mod:`.log_format`, :mod:`.replay`, :mod:`.persistence`: the internal topic's records.
- :mod:`.scheduler`: injected timers (fake clock in tests, asyncio in the broker).
- :mod:`.consumer_groups`, :mod:`.reconciliation`, :mod:`.assignment`: KIP-848 groups
  (ConsumerGroupHeartbeat), how a member moves to its target assignment, and the assignors;
  :mod:`.consumer_group_records`: their records in ``__consumer_offsets``.
"""
