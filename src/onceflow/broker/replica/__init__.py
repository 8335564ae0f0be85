"""Partition replication, sans-IO: a partition as leader or follower (``partition``), the leader's view
of its followers and ISR (``isr``), the follower's fetch state machine (``fetcher``) and acks=all
produce waits (``acks``). Messages and times go in, requests come out; the asyncio broker and the
seeded simulator in the tests drive the same objects."""
