"""ACLs: CreateAcls (30) and DeleteAcls (31) as AccessControlEntryRecord /
RemoveAccessControlEntryRecord (Kafka's ``AclControlManager``).

Brokers forward both requests here after authorizing them (ALTER on the cluster). Each creation is
checked as Kafka checks a new binding (INVALID_REQUEST: an ANY or unknown field, an empty name, a
CLUSTER resource not named kafka-cluster, a principal not of the form Type:name, an empty host); a
binding the image already has, or one repeated in the request, succeeds without a record. A new
binding gets a random id no other ACL has, as Kafka's (a Uuid per ACL): removals name that id.

Each delete filter removes every binding it matches and answers with them; a filter with an unknown
field is INVALID_REQUEST. A binding two filters match is removed by one record and reported by both.
"""

from __future__ import annotations

import random
import uuid

from kafka.protocol.admin import CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse

from onceflow.metadata.acls import AclBinding, AclBindingFilter, check_new_binding
from onceflow.metadata.image import MetadataImage
from onceflow.metadata.records import RemoveAccessControlEntryRecord
from onceflow.protocol.errors import ErrorCode

_Created = CreateAclsResponse.AclCreationResult
_Filtered = DeleteAclsResponse.DeleteAclsFilterResult
_Matching = _Filtered.DeleteAclsMatchingAcl


def new_acl_id(taken, rng: random.Random) -> uuid.UUID:
    """A random id no ACL has (nor the zero id)."""
    while True:
        acl_id = uuid.UUID(int=rng.getrandbits(128))
        if acl_id.int != 0 and acl_id not in taken:
            return acl_id


def create_acls(
    image: MetadataImage, request: CreateAclsRequest, rng: random.Random
) -> tuple[list, CreateAclsResponse]:
    records: list = []
    results = []
    new_ids: set[uuid.UUID] = set()
    added: set[AclBinding] = set()
    for creation in request.creations or []:
        binding = AclBinding.from_creation(creation)
        problem = check_new_binding(binding)
        if problem is not None:
            results.append(_Created(error_code=int(ErrorCode.INVALID_REQUEST), error_message=problem))
            continue
        if binding not in added and image.acl_id(binding) is None:
            acl_id = new_acl_id(image.acls.keys() | new_ids, rng)
            new_ids.add(acl_id)
            added.add(binding)
            records.append(binding.to_record(acl_id))
        results.append(_Created(error_code=0, error_message=None))
    return records, CreateAclsResponse(throttle_time_ms=0, results=results)


def _matching(acl: AclBinding) -> _Matching:
    return _Matching(error_code=0, error_message=None, **acl.wire_fields())


def delete_acls(image: MetadataImage, request: DeleteAclsRequest) -> tuple[list, DeleteAclsResponse]:
    removed: dict[uuid.UUID, None] = {}  # in order, each id once
    results = []
    ordered = sorted(image.acls.items(), key=lambda item: item[1])
    for f in request.filters or []:
        acl_filter = AclBindingFilter.from_delete_filter(f)
        if acl_filter.unknown:
            results.append(
                _Filtered(
                    error_code=int(ErrorCode.INVALID_REQUEST),
                    error_message="Unknown filter field",
                    matching_acls=[],
                )
            )
            continue
        matched = [(acl_id, acl) for acl_id, acl in ordered if acl_filter.matches(acl)]
        removed.update(dict.fromkeys(acl_id for acl_id, _acl in matched))
        results.append(
            _Filtered(
                error_code=0, error_message=None, matching_acls=[_matching(acl) for _id, acl in matched]
            )
        )
    records = [RemoveAccessControlEntryRecord(id=acl_id) for acl_id in removed]
    return records, DeleteAclsResponse(throttle_time_ms=0, filter_results=results)
