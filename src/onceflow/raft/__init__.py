"""The controller quorum: KIP-595 Raft over the metadata log ``__cluster_metadata-0``.

``node.RaftNode`` is the sans-IO core; ``memory_storage`` and ``file_storage`` hold its state;
``wire`` and ``server`` put it on the network; ``listener`` says what it tells its user. See
docs/raft.md.
"""
