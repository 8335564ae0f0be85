"""Metadata-record codec: onceflow's dataclass codec (onceflow.metadata.schema) against kafka-python's
schema machinery (StructField from the same field list, compiled encoder/decoder), and a whole
snapshot replay (records -> image) at a given size.

Usage: python bench/metadata_codec.py [--quick]
Last stdout line: one JSON object (see /work/shared/BENCH.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from kafka.protocol.data_container import DataContainer  # noqa: E402
from kafka.protocol.schemas import StructField  # noqa: E402
from kafka.protocol.schemas.fields.codecs import EncodeBufferPool  # noqa: E402

from onceflow.metadata import records as r  # noqa: E402
from onceflow.metadata.image import MetadataImage  # noqa: E402
from onceflow.metadata.schema import specs  # noqa: E402
from onceflow.metadata.snapshot import load_snapshot, snapshot_bytes  # noqa: E402


def _kafka_python_struct(cls) -> type:
    """A kafka-python data class for a record, built from the same field list our codec uses."""
    fields = []
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    for name, spec in specs(cls):
        field = {
            "name": "".join(part.title() for part in name.split("_")),
            "type": spec.kind,
            "versions": f"{spec.versions[0]}+",
        }
        if spec.tag is not None:
            default = defaults[name]
            field.update(
                tag=spec.tag,
                taggedVersions=f"{spec.versions[0]}+",
                default="null" if default is None else str(default),
            )
        if spec.nullable:
            field["nullableVersions"] = f"{spec.nullable[0]}+"
        fields.append(field)
    struct = StructField({"name": cls.__name__, "type": cls.__name__, "versions": "0+", "fields": fields})
    data_cls = type(cls.__name__, (DataContainer,), {"_struct": struct})
    struct.set_data_class(data_cls)
    return data_cls


def _per_op_us(fn, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def _image(partitions: int, per_topic: int = 10) -> MetadataImage:
    records = [r.FeatureLevelRecord(name="metadata.version", feature_level=14)]
    for b in range(3):
        records.append(
            r.RegisterBrokerRecord(broker_id=b, incarnation_id=uuid.uuid4(), broker_epoch=b, fenced=False)
        )
    for t in range(partitions // per_topic):
        topic_id = uuid.uuid4()
        records.append(r.TopicRecord(name=f"topic-{t}", topic_id=topic_id))
        for p in range(per_topic):
            replicas = (p % 3, (p + 1) % 3, (p + 2) % 3)
            records.append(
                r.PartitionRecord(
                    partition_id=p,
                    topic_id=topic_id,
                    replicas=replicas,
                    isr=replicas,
                    leader=replicas[0],
                    leader_epoch=0,
                    partition_epoch=0,
                )
            )
    return MetadataImage.EMPTY.apply_all(records)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n, rounds, partitions = (5_000, 3, 2_000) if args.quick else (30_000, 5, 20_000)

    ours_record = r.PartitionRecord(
        partition_id=3,
        topic_id=uuid.uuid4(),
        replicas=(1, 2, 3),
        isr=(1, 2, 3),
        leader=1,
        leader_epoch=5,
        partition_epoch=7,
    )
    ours_bytes = r.to_bytes(ours_record)
    body = ours_bytes[3:]
    kp_cls = _kafka_python_struct(r.PartitionRecord)
    kp_record = kp_cls(
        version=0,
        partition_id=3,
        topic_id=ours_record.topic_id,
        replicas=[1, 2, 3],
        isr=[1, 2, 3],
        removing_replicas=[],
        adding_replicas=[],
        leader=1,
        leader_recovery_state=0,
        leader_epoch=5,
        partition_epoch=7,
    )
    kp_encode = kp_cls._struct.compiled_encode_into(0, compact=True, tagged=True)
    kp_decode = kp_cls._struct.compiled_decode_from(0, compact=True, tagged=True, data_class=kp_cls)

    def kp_encode_one():
        with EncodeBufferPool.acquire() as out:
            kp_encode(kp_record, out)
            return out.result()

    assert kp_encode_one() == body, "the two codecs disagree on PartitionRecord v0"
    samples: dict[str, list[float]] = {
        k: [] for k in ("ours_encode_us", "kp_encode_us", "ours_decode_us", "kp_decode_us", "snapshot_load_s")
    }
    image = _image(partitions)
    snapshot = snapshot_bytes(image)
    for i in range(rounds):
        print(f"round {i + 1}/{rounds}", file=sys.stderr)
        samples["ours_encode_us"].append(_per_op_us(lambda: r.to_bytes(ours_record), n))
        samples["kp_encode_us"].append(_per_op_us(kp_encode_one, n))
        samples["ours_decode_us"].append(_per_op_us(lambda: r.from_bytes(ours_bytes), n))
        samples["kp_decode_us"].append(_per_op_us(lambda: kp_decode(memoryview(body), 0), n))
        start = time.perf_counter()
        assert load_snapshot(snapshot) == image
        samples["snapshot_load_s"].append(time.perf_counter() - start)
    results = {k: round(statistics.median(v), 3) for k, v in samples.items()}
    print(
        json.dumps(
            {
                "bench": "metadata_codec",
                "unit": "us per PartitionRecord (snapshot_load_s: seconds)",
                "results": results,
                "ratios": {
                    "ours/kafka_python_encode": round(results["ours_encode_us"] / results["kp_encode_us"], 2),
                    "ours/kafka_python_decode": round(results["ours_decode_us"] / results["kp_decode_us"], 2),
                },
                "params": {
                    "ops": n,
                    "rounds": rounds,
                    "snapshot_partitions": partitions,
                    "snapshot_records": len(snapshot),
                },
            }
        )
    )


if __name__ == "__main__":
    main()
