"""The classic group protocol, client side (JoinGroup/SyncGroup; the group leader assigns).

- :mod:`.membership`: the member's state machine (sans-IO);
- :mod:`.driver`: its async driver (``GroupCoordinator``);
- :mod:`.assignors`: the assignors a leader runs, and the subscription/assignment bytes.
"""
