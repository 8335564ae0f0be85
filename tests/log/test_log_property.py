"""Property: any sequence of appends, rolls, reopens, crashes and torn tails reads back as appended."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.log.batches import decode, make_batch, produce

from onceflow.log.config import LogConfig
from onceflow.log.log import Log

CONFIG = LogConfig(segment_bytes=2_000, index_interval_bytes=64)

operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 4), st.integers(0, 120), st.integers(1, 3)),
        st.tuples(st.just("roll")),
        st.tuples(st.just("reopen")),
        st.tuples(st.just("crash"), st.binary(max_size=80)),
        st.tuples(st.just("read"), st.integers(0, 10**6), st.integers(1, 700)),
    ),
    max_size=25,
)


def read_all(log):
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        got = decode(log.read(offset, 1_000))
        out.extend((o, v) for o, v, _ in got if o >= offset)
        offset = got[-1][0] + 1
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations)
def test_read_back_equals_appended(tmp_path_factory, ops):
    directory = tmp_path_factory.mktemp("prop") / "t-0"
    log = Log.open(directory, CONFIG)
    expected: list[tuple[int, bytes]] = []
    counter = 0
    try:
        for op in ops:
            if op[0] == "append":
                _, records_per_batch, value_size, batch_count = op
                raw = []
                for _ in range(batch_count):
                    raw.append(make_batch(records_per_batch, value=bytes([counter % 256]) * value_size))
                    counter += 1
                result = produce(log, *raw)
                assert result.base_offset == len(expected)
                for batch in raw:
                    expected.extend((len(expected), v) for _, v, _ in decode(batch))
                assert result.last_offset == len(expected) - 1
            elif op[0] == "roll":
                log.roll()
            elif op[0] == "reopen":
                log.close()
                log = Log.open(directory, CONFIG)
            elif op[0] == "crash":
                log.abandon()
                with open(log.segment_paths()[-1], "ab") as f:
                    f.write(op[1])
                log = Log.open(directory, CONFIG)
            else:
                _, offset, max_bytes = op
                if expected:
                    offset %= len(expected)
                    got = decode(log.read(offset, max_bytes))
                    assert got and got[0][0] <= offset <= got[-1][0]
                    assert [(o, v) for o, v, _ in got if o >= offset] == expected[offset : got[-1][0] + 1]
            assert log.log_end_offset == len(expected)
        assert read_all(log) == expected
    finally:
        log.close()
