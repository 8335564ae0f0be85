"""Who may send what to a node's controller listener, when the node has an authorizer.

Kafka's controller asks, for every request but ApiVersions and the SASL exchange, for one operation
on the CLUSTER resource (``kafka-cluster``):

- CLUSTER_ACTION for what nodes send each other: the quorum's Vote, BeginQuorumEpoch,
  EndQuorumEpoch, Fetch and FetchSnapshot, BrokerRegistration, BrokerHeartbeat, AlterPartition,
  AllocateProducerIds;
- DESCRIBE for DescribeQuorum, ALTER for UnregisterBroker (Kafka's admin tool sends it);
- CLUSTER_ACTION for the admin requests (CreateTopics, CreateAcls, ...) too: Kafka's brokers wrap a
  client's admin request in an Envelope, which needs CLUSTER_ACTION, and the controller then checks
  the client's own operations. onceflow's brokers authorize the client themselves and send the
  request on as the broker, so the controller asks what Kafka asks of an Envelope.

A refused request changes nothing: it gets CLUSTER_AUTHORIZATION_FAILED where its API carries its
error, and the authorizer logs the denial in one line (``onceflow.authorizer``), as on a broker.

The decisions are the broker's :class:`StandardAuthorizer`'s, over the ACLs of the controller's own
committed metadata image (``broker.cluster_metadata.ImageAclStore`` on it), with the node's
``super.users`` and ``allow.everyone.if.no.acl.found``. The quorum has to form before any ACL can be
written, so the nodes' own principals belong in ``super.users`` (:func:`controller_warning` says so
at start when this node's is not).
"""

from __future__ import annotations

from typing import Any

from onceflow.broker.cluster_metadata import ImageAclStore
from onceflow.broker.security.access import api_name
from onceflow.broker.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from onceflow.broker.security.authorizer import StandardAuthorizer
from onceflow.broker.security.config import AuthorizerSettings
from onceflow.broker.security.session import Session

# API key -> the operation on the cluster it needs; any other API (but ApiVersions and SASL's,
# which need none) needs CLUSTER_ACTION.
_OTHER_THAN_CLUSTER_ACTION = {
    55: AclOperation.DESCRIBE,  # DescribeQuorum
    64: AclOperation.ALTER,  # UnregisterBroker
}
UNCHECKED = frozenset({17, 18, 36})  # SaslHandshake, ApiVersions, SaslAuthenticate


def operation_needed(api_key: int) -> AclOperation | None:
    """The operation on the cluster a request of ``api_key`` needs here (None: no check)."""
    if api_key in UNCHECKED:
        return None
    return _OTHER_THAN_CLUSTER_ACTION.get(api_key, AclOperation.CLUSTER_ACTION)


class _CommittedImage:
    """The controller's committed image, as ``ImageAclStore`` reads a broker's."""

    def __init__(self, controller: Any) -> None:
        self._controller = controller

    @property
    def image(self) -> Any:
        return self._controller.committed_image


class ControllerAuthorizer:
    """The controller listener's authorizer, following the ACLs of ``controller``'s committed image."""

    def __init__(self, settings: AuthorizerSettings, controller: Any) -> None:
        self._committed = _CommittedImage(controller)
        self._seen = self._committed.image.acls
        self.authorizer = StandardAuthorizer(settings, ImageAclStore(self._committed))

    def allows(self, session: Session, api_key: int) -> bool:
        """Whether the connection's principal may send a request of ``api_key`` (a denial is logged)."""
        operation = operation_needed(api_key)
        if operation is None:
            return True
        acls = self._committed.image.acls
        if acls is not self._seen:  # the image's ACLs changed since the last decision
            self._seen = acls
            self.authorizer.replace(acls.values())
        return self.authorizer.authorize(
            session.principal,
            session.client_host,
            operation,
            ResourceType.CLUSTER,
            CLUSTER_NAME,
            request=api_name(api_key),
        )
