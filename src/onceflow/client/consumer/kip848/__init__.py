"""The consumer group protocol of KIP-848, client side (ConsumerGroupHeartbeat; the coordinator
assigns).

- :mod:`.membership`: the member's state machine (sans-IO);
- :mod:`.driver`: its async driver (``ConsumerGroupCoordinator``).
"""
