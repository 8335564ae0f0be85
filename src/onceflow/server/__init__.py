"""Process wiring: one onceflow node with its roles (broker, controller, or both), its listeners and
its Kafka-named configuration, the metadata quorum it runs on, and the order things start and stop in.

``config`` turns ``--config`` / ``server.properties`` into a checked :class:`ServerConfig`;
``node.Node`` runs it. Plain ``onceflow serve`` is a one-voter combined node (see docs/cluster.md).
"""
