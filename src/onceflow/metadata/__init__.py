"""Cluster metadata: Kafka's metadata records, and the immutable image that brokers and controllers
replay them into (KIP-500, KIP-631). Imports only :mod:`onceflow.protocol`."""
