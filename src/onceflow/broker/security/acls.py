"""The ACL data model the broker's security uses: Kafka's bindings, filters and their checks, which
live in ``metadata.acls`` (the controller and the metadata image share them); re-exported here so the
broker's modules name them where the rest of its security is."""

from onceflow.metadata.acls import *  # noqa: F403 (re-exported: the names its __all__ lists)
from onceflow.metadata.acls import __all__  # noqa: F401
