"""The coordinator runtime (Kafka 4's ``CoordinatorRuntime``) that the group and transaction
coordinators run on: operations return records and a response; the runtime appends them to the
internal topic, replays them into the coordinator's state and answers once they are committed.

- :mod:`.runtime`: the runtime (per partition: status, coordinator epoch, operations, timers, answers
  held until the high watermark);
- :mod:`.records`: what an operation returns and what a partition holds;
- :mod:`.writer`: the internal topic as the runtime sees it, and one in memory for tests;
- :mod:`.internal_topic`: the broker's writer, on the partition logs;
- :mod:`.commits`: awaiting a commit from the broker's event loop;
- :mod:`.scheduler`: the injected clock and timers;
- :mod:`.partitioning`: which partition holds a group or transactional id.
"""
