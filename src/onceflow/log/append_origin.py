"""Who is appending to a partition log.

Kafka's ``AppendOrigin``: client appends go through every check (sequence numbers, control batches
forbidden), coordinator appends write transaction markers and group/transaction state, replication
appends copy a leader's batches as they are.
"""

import enum


class AppendOrigin(enum.Enum):
    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"
