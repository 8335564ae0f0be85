"""The wire facts of KIP-890 that the broker and the client must agree on: the feature that tells
clients which transaction protocol to use, and the first request versions of each protocol.

A producer of the transaction protocol v2 sends Produce v12+ (the broker adds the partition to the
transaction), TxnOffsetCommit v5+ (the group coordinator adds the offsets partition) and EndTxn v5+
(every EndTxn bumps the epoch); a v1 producer stays below those versions. Brokers answer each request
by its version, as Kafka does, and advertise the finalized level of ``transaction.version`` in
ApiVersions v3+.
"""

TRANSACTION_VERSION_FEATURE = "transaction.version"

FIRST_TV2_PRODUCE_VERSION = 12
FIRST_TV2_END_TXN_VERSION = 5
FIRST_TV2_TXN_OFFSET_COMMIT_VERSION = 5

# Produce v11 is the first whose clients know TRANSACTION_ABORTABLE; older ones get INVALID_TXN_STATE.
FIRST_ABORTABLE_PRODUCE_VERSION = 11
