"""How long an ACL or a SCRAM user made through one broker of a cluster takes to hold on another.

    python bench/acl_propagation.py [--quick] [--samples N]

A 2-node combined cluster with the authorizer on and a SASL_PLAINTEXT (SCRAM-SHA-512) client
listener. Each sample, through broker 1 as the ``admin`` super user:

- **acl_answer / acl_enforced**: CreateAcls (ALLOW alice WRITE on a topic): the time until broker 1
  answers (the controller committed it and broker 1's image has it), and until broker 2 lets alice
  see the topic (a Metadata request on one authenticated connection, repeated);
- **acl_removed**: DeleteAcls of it, until broker 2 refuses her again;
- **scram_login**: AlterUserScramCredentials of a new user, until that user logs in on broker 2.

There is no other contender: the numbers are the metadata propagation delay the docs quote, as
medians (and the slowest) of the samples.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit, kill_all, median, progress  # noqa: E402
from kafka.protocol.admin import (  # noqa: E402
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
)
from kafka.protocol.metadata import MetadataRequest  # noqa: E402
from tests.helpers.acl_cluster import AuthorizingNode, authorizing_cluster  # noqa: E402
from tests.helpers.broker import LOOPBACK  # noqa: E402

from onceflow.broker.security.credentials import FileScramStore  # noqa: E402
from onceflow.client.connection import Connection  # noqa: E402
from onceflow.client.security import ClientSecurity  # noqa: E402
from onceflow.metadata.scram import credential_from_password, salted_password  # noqa: E402
from onceflow.protocol.acl_types import AclOperation, PatternType, PermissionType, ResourceType  # noqa: E402

FULL = {"samples": 20}
QUICK = {"samples": 5}
TOPIC = "bench-acl"
DENIED = 29  # TOPIC_AUTHORIZATION_FAILED
POLL_S = 0.002
WAIT_S = 30.0


def security(user: str, password: str) -> ClientSecurity:
    return ClientSecurity(
        protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512", sasl_username=user, sasl_password=password
    )


async def connect(node: AuthorizingNode, user: str, password: str) -> Connection:
    return await Connection.open(LOOPBACK, node.client_port, security=security(user, password))


def upsertion(user: str, password: str):
    salt = uuid.uuid4().bytes
    return AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
        name=user,
        mechanism=2,
        iterations=4096,
        salt=salt,
        salted_password=salted_password("SCRAM-SHA-512", password, salt, 4096),
    )


ALICE_WRITE = dict(
    resource_type=int(ResourceType.TOPIC),
    resource_name=TOPIC,
    resource_pattern_type=int(PatternType.LITERAL),
    principal="User:alice",
    host="*",
    operation=int(AclOperation.WRITE),
    permission_type=int(PermissionType.ALLOW),
)


async def wait_until(check, what: str) -> float:
    """Seconds until ``await check()`` is true."""
    start = time.perf_counter()
    while not await check():
        if time.perf_counter() - start > WAIT_S:
            raise RuntimeError(f"not within {WAIT_S}s: {what}")
        await asyncio.sleep(POLL_S)
    return time.perf_counter() - start


async def measure(first: AuthorizingNode, second: AuthorizingNode, samples: int) -> dict[str, list[float]]:
    admin = await connect(first, "admin", "admin-secret")
    spec = CreateTopicsRequest.CreatableTopic
    await admin.send(
        CreateTopicsRequest(
            topics=[spec(name=TOPIC, num_partitions=1, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=30000,
            validate_only=False,
        ),
        version=5,
    )
    await admin.send(
        AlterUserScramCredentialsRequest(deletions=[], upsertions=[upsertion("alice", "alice-secret")]),
        version=0,
    )
    alice = None
    while alice is None:
        try:
            alice = await connect(second, "alice", "alice-secret")
        except Exception:  # noqa: BLE001 - her credential has not reached broker 2 yet
            await asyncio.sleep(0.05)
    topic = MetadataRequest.MetadataRequestTopic
    metadata = MetadataRequest(
        topics=[topic(name=TOPIC, topic_id=None)],
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )

    async def alice_sees(allowed: bool) -> bool:
        response = await alice.send(metadata, version=9)
        return (response.topics[0].error_code != DENIED) is allowed

    results: dict[str, list[float]] = {
        "acl_answer": [],
        "acl_enforced": [],
        "acl_removed": [],
        "scram_login": [],
    }
    acl_filter = DeleteAclsRequest.DeleteAclsFilter(
        resource_type_filter=int(ResourceType.TOPIC),
        resource_name_filter=TOPIC,
        pattern_type_filter=int(PatternType.LITERAL),
        principal_filter="User:alice",
        host_filter=None,
        operation=int(AclOperation.ANY),
        permission_type=int(PermissionType.ANY),
    )
    for n in range(samples):
        start = time.perf_counter()
        await admin.send(
            CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(**ALICE_WRITE)]), version=2
        )
        answered = time.perf_counter() - start
        enforced = answered + await wait_until(lambda: alice_sees(True), "the ACL on broker 2")
        start = time.perf_counter()
        await admin.send(DeleteAclsRequest(filters=[acl_filter]), version=2)
        removed = (
            time.perf_counter() - start + await wait_until(lambda: alice_sees(False), "no ACL on broker 2")
        )
        user = f"user-{n}"
        start = time.perf_counter()
        await admin.send(
            AlterUserScramCredentialsRequest(deletions=[], upsertions=[upsertion(user, "pw-secret")]),
            version=0,
        )

        async def logs_in(user: str = user) -> bool:
            try:
                conn = await connect(second, user, "pw-secret")
            except Exception:  # noqa: BLE001 - not there yet
                return False
            await conn.close()
            return True

        login = time.perf_counter() - start + await wait_until(logs_in, f"{user} on broker 2")
        for key, value in zip(results, (answered, enforced, removed, login), strict=True):
            results[key].append(value)
        progress(
            f"sample {n + 1}/{samples}: acl {answered:.3f}/{enforced:.3f}s, removed {removed:.3f}s, login {login:.3f}s"
        )
    await alice.close()
    await admin.close()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--samples", type=int)
    args = parser.parse_args(argv)
    samples = args.samples or (QUICK if args.quick else FULL)["samples"]
    tmp = tempfile.TemporaryDirectory(prefix="onceflow-bench-acl-")
    try:
        cluster = authorizing_cluster(Path(tmp.name), 2)
        admin = credential_from_password("SCRAM-SHA-512", "admin-secret")
        for node in cluster.nodes.values():
            FileScramStore(node.data_dir).save({("admin", "SCRAM-SHA-512"): admin})
        cluster.start()
        progress("2-node cluster up")
        results = asyncio.run(measure(cluster.nodes[1], cluster.nodes[2], samples))
        cluster.kill_all()
    finally:
        kill_all()
        tmp.cleanup()
    emit(
        {
            "bench": "acl_propagation",
            "unit": "seconds",
            "results": {
                **{f"{key}_s": round(median(values), 4) for key, values in results.items()},
                **{f"{key}_max_s": round(max(values), 4) for key, values in results.items()},
            },
            "params": {"samples": samples, "nodes": 2, "poll_s": POLL_S, "scram_iterations": 4096},
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
