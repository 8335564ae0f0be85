"""The active KRaft controller's decisions, sans-IO (KIP-500, KIP-631).

:class:`~onceflow.controller.quorum_controller.QuorumController` takes requests (kafka-python message
objects) and an injected clock, and answers each with the metadata records to append and the
response to send once they are committed. It never touches a socket, a file or a clock of its own:
the Raft layer (:mod:`onceflow.raft`) and the server wiring move the bytes. Imports only
:mod:`onceflow.protocol` and :mod:`onceflow.metadata`.
"""
