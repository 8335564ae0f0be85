"""The controller listener with an authorizer, without sockets: each API's decision as Kafka's
controller makes it (CLUSTER_ACTION on the cluster for what nodes send each other and for the admin
requests brokers send on, DESCRIBE for DescribeQuorum, ALTER for UnregisterBroker), from the ACLs of
the controller's committed image and the node's super.users; a refused request gets
CLUSTER_AUTHORIZATION_FAILED, reaches neither the controller nor the quorum, and is logged once.
The warning a node gives at start when the principal nodes reach the controllers as is no super user.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid

import pytest
from kafka.protocol.admin import CreateTopicsRequest

from onceflow.broker.connection import RequestReceived
from onceflow.broker.security.config import AuthorizerSettings
from onceflow.broker.security.principal import ANONYMOUS, user
from onceflow.broker.security.session import Session
from onceflow.metadata.acls import AclBinding, AclOperation, PatternType, PermissionType, ResourceType
from onceflow.metadata.image import MetadataImage
from onceflow.protocol import apis
from onceflow.protocol.errors import ErrorCode
from onceflow.protocol.messages import BrokerHeartbeatRequest, BrokerRegistrationRequest
from onceflow.server.cluster_authorization import controller_warning
from onceflow.server.config import server_config
from onceflow.server.controller_authorization import ControllerAuthorizer
from onceflow.server.controller_listener import ControllerListener

NODE, INTRUDER = user("controller"), user("intruder")
DENIED = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
RAFT_APIS = {1: "Fetch", 52: "Vote", 53: "BeginQuorumEpoch", 54: "EndQuorumEpoch", 59: "FetchSnapshot"}


class FakeController:
    def __init__(self) -> None:
        self.committed_image = MetadataImage.EMPTY

    def grant(self, principal, operation: AclOperation) -> None:
        acl = AclBinding(
            ResourceType.CLUSTER,
            "kafka-cluster",
            PatternType.LITERAL,
            str(principal),
            "*",
            operation,
            PermissionType.ALLOW,
        )
        acls = {**self.committed_image.acls, uuid.uuid4(): acl}
        self.committed_image = dataclasses.replace(self.committed_image, acls=acls)


class FakeRunner:
    def __init__(self) -> None:
        self.controller = FakeController()
        self.calls: list = []

    async def call(self, operation):
        self.calls.append(operation)
        raise AssertionError("a refused request reached the controller")


def listener(allow_if_no_acl: bool = False) -> tuple[ControllerListener, FakeRunner, list]:
    runner = FakeRunner()
    reached: list[int] = []

    def quorum_handler(api_key: int):
        async def handle(version, request, correlation_id):
            reached.append(api_key)
            return b""

        return handle

    quorum_apis = {key: (0, 16, apis.request_class(key), quorum_handler(key)) for key in RAFT_APIS}
    settings = AuthorizerSettings(frozenset({NODE}), allow_if_no_acl)
    authorizer = ControllerAuthorizer(settings, runner.controller)
    return ControllerListener(runner, None, "127.0.0.1", 0, quorum_apis, None, authorizer), runner, reached


def session(principal) -> Session:
    return Session(
        listener="CONTROLLER", security_protocol="SASL_SSL", client_host="127.0.0.1", principal=principal
    )


def registration(broker_id: int = 7) -> BrokerRegistrationRequest:
    return BrokerRegistrationRequest(
        broker_id=broker_id,
        cluster_id="cluster",
        incarnation_id=uuid.uuid4(),
        listeners=[],
        features=[],
        rack=None,
    )


def create_topics() -> CreateTopicsRequest:
    topic = CreateTopicsRequest.CreatableTopic(
        name="orders", num_partitions=1, replication_factor=1, assignments=[], configs=[]
    )
    return CreateTopicsRequest(topics=[topic], timeout_ms=1000, validate_only=False)


def error_codes(answer) -> set[int]:
    if hasattr(answer, "topics") and answer.topics and hasattr(answer.topics[0], "error_code"):
        return {t.error_code for t in answer.topics}  # CreateTopics: per topic
    return {answer.error_code}


@pytest.mark.parametrize("api_key", sorted(RAFT_APIS))
def test_a_raft_request_needs_cluster_action_a_super_user_has_it(api_key):
    subject, _runner, _reached = listener()
    assert subject.refused(session(NODE), api_key, 0, None) is None
    answer = subject.refused(session(INTRUDER), api_key, 0, None)
    assert answer is not None and answer.error_code == DENIED


@pytest.mark.parametrize(
    ("api_key", "request_"),
    [
        (62, registration()),
        (
            63,
            BrokerHeartbeatRequest(
                broker_id=7, broker_epoch=1, current_metadata_offset=0, want_fence=False, want_shut_down=False
            ),
        ),
        (19, create_topics()),  # an admin request a broker sends on
    ],
)
def test_broker_requests_and_forwarded_admin_requests_need_cluster_action(api_key, request_):
    subject, _runner, _reached = listener()
    assert subject.refused(session(NODE), api_key, 0, request_) is None
    answer = subject.refused(session(INTRUDER), api_key, 0, request_)
    assert error_codes(answer) == {DENIED}


def test_describe_quorum_needs_describe_and_unregister_broker_alter():
    subject, runner, _reached = listener()
    assert subject.refused(session(INTRUDER), 55, 1, None).error_code == DENIED
    runner.controller.grant(INTRUDER, AclOperation.DESCRIBE)
    assert subject.refused(session(INTRUDER), 55, 1, None) is None
    assert subject.refused(session(INTRUDER), 64, 0, None).error_code == DENIED  # DESCRIBE is not ALTER
    assert subject.refused(session(INTRUDER), 52, 0, None).error_code == DENIED  # nor CLUSTER_ACTION
    runner.controller.grant(INTRUDER, AclOperation.ALTER)
    assert subject.refused(session(INTRUDER), 64, 0, None) is None


def test_the_decisions_follow_the_acls_of_the_controllers_committed_image():
    subject, runner, _reached = listener()
    assert subject.refused(session(INTRUDER), 62, 0, registration()) is not None
    runner.controller.grant(INTRUDER, AclOperation.CLUSTER_ACTION)
    assert subject.refused(session(INTRUDER), 62, 0, registration()) is None
    assert subject.refused(session(INTRUDER), 52, 0, None) is None


def test_api_versions_and_the_sasl_exchange_need_nothing():
    subject, _runner, _reached = listener()
    for api_key in (17, 18, 36):
        assert subject.refused(session(ANONYMOUS), api_key, 0, None) is None


def test_allow_everyone_if_no_acl_found_lets_any_principal_in_until_the_cluster_has_an_acl():
    subject, runner, _reached = listener(allow_if_no_acl=True)
    assert subject.refused(session(INTRUDER), 52, 0, None) is None
    runner.controller.grant(NODE, AclOperation.CLUSTER_ACTION)  # the cluster now has an ACL
    assert subject.refused(session(INTRUDER), 52, 0, None).error_code == DENIED


def test_without_an_authorizer_nothing_is_refused():
    runner = FakeRunner()
    subject = ControllerListener(runner, None, "127.0.0.1", 0)
    assert subject.refused(session(INTRUDER), 62, 0, registration()) is None


def _received(api_key: int, request) -> RequestReceived:
    return RequestReceived(apis.RequestHeader(api_key, 0, 11, "intruder", 0), request, 0)


def test_a_refused_request_reaches_neither_the_controller_nor_the_quorum_and_is_logged_once(caplog):
    subject, runner, reached = listener()
    caplog.set_level(logging.INFO, logger="onceflow.authorizer")

    async def send() -> list:
        return [
            await subject._dispatch(session(INTRUDER), _received(62, registration())),  # noqa: SLF001
            await subject._dispatch(session(INTRUDER), _received(52, None)),  # noqa: SLF001
        ]

    answers = asyncio.run(send())
    assert all(answers)  # each got an answer (the refusal), encoded
    assert runner.calls == [] and reached == []
    denials = [r.getMessage() for r in caplog.records if r.name == "onceflow.authorizer"]
    assert len(denials) == 2
    assert "User:intruder is Denied operation = CLUSTER_ACTION" in denials[0]
    assert "BrokerRegistration" in denials[0] and "Vote" in denials[1]


CLUSTER = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.quorum.voters": "1@127.0.0.1:19093",
    "controller.listener.names": "CONTROLLER",
    "listeners": "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL",
}


def test_a_node_reaching_the_controllers_as_no_super_user_is_warned_about():
    server = server_config(CLUSTER)
    admins = AuthorizerSettings(frozenset({user("admin")}), False)
    warning = controller_warning(server, admins, "controller")
    assert warning is not None
    assert (
        "User:controller" in warning
        and "super.users" in warning
        and "controller listener CONTROLLER" in warning
    )
    nodes = AuthorizerSettings(frozenset({user("admin"), NODE}), False)
    assert controller_warning(server, nodes, "controller") is None
    assert controller_warning(server, None, "controller") is None


def test_a_plaintext_controller_listener_makes_the_nodes_anonymous():
    server = server_config(
        {**CLUSTER, "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"}
    )
    admins = AuthorizerSettings(frozenset({user("admin")}), False)
    warning = controller_warning(server, admins)
    assert warning is not None and "User:ANONYMOUS" in warning
    assert controller_warning(server, AuthorizerSettings(frozenset({ANONYMOUS}), False)) is None
