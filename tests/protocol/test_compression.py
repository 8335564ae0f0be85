"""Round trips and interoperability quirks of the record-batch compression codecs."""

import os

import aiokafka.codec
import lz4.frame
import pytest

from onceflow.protocol.compression import (
    XERIAL_MAGIC,
    CompressionType,
    codec_for_name,
    codec_name,
    compress,
    decompress,
)
from onceflow.protocol.errors import CorruptMessage, ErrorCode, UnsupportedCompressionType

ALL_CODECS = list(CompressionType)
COMPRESSED_CODECS = [c for c in CompressionType if c != CompressionType.NONE]
# Half random, half repetitive, and larger than one snappy / lz4 block so framing is exercised.
LARGE = os.urandom(70_000) + b"onceflow " * 30_000


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("payload", [b"", b"x", LARGE], ids=["empty", "one-byte", "large"])
def test_round_trip(codec, payload):
    assert decompress(codec, compress(codec, payload)) == payload


@pytest.mark.parametrize("codec", COMPRESSED_CODECS, ids=lambda c: c.name)
def test_accepts_memoryview(codec):
    assert decompress(codec, memoryview(compress(codec, memoryview(LARGE)))) == LARGE


def test_snappy_writes_xerial_framing_with_32k_blocks():
    data = compress(CompressionType.SNAPPY, LARGE)
    assert data.startswith(XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01")
    # aiokafka implements the same framing independently.
    assert aiokafka.codec.snappy_decode(data) == LARGE


def test_snappy_reads_raw_blocks_too():
    raw = bytes(aiokafka.codec.snappy_encode(LARGE, xerial_compatible=False))
    assert not raw.startswith(XERIAL_MAGIC)
    assert decompress(CompressionType.SNAPPY, raw) == LARGE


def test_lz4_frames_have_independent_blocks_and_no_content_size():
    data = compress(CompressionType.LZ4, LARGE)
    info = lz4.frame.get_frame_info(data)
    assert info["block_linked"] is False
    assert info["content_size"] == 0
    assert aiokafka.codec.lz4_decode(data) == LARGE


def test_zstd_reads_frames_without_content_size_and_several_frames():
    import zstandard

    frame = zstandard.ZstdCompressor(write_content_size=False).compress(b"abc" * 1000)
    assert decompress(CompressionType.ZSTD, frame + frame) == b"abc" * 2000


def test_gzip_reads_concatenated_members():
    data = aiokafka.codec.gzip_encode(b"first ") + compress(CompressionType.GZIP, b"second")
    assert decompress(CompressionType.GZIP, data) == b"first second"


@pytest.mark.parametrize("codec", COMPRESSED_CODECS, ids=lambda c: c.name)
def test_garbage_is_corrupt_message(codec):
    with pytest.raises(CorruptMessage) as info:
        decompress(codec, b"this is not compressed data at all")
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", COMPRESSED_CODECS, ids=lambda c: c.name)
def test_truncated_payload_is_corrupt_message(codec):
    data = compress(codec, LARGE)
    with pytest.raises(CorruptMessage):
        decompress(codec, data[: len(data) // 2])


@pytest.mark.parametrize("func", [compress, decompress])
def test_unknown_codec_is_unsupported(func):
    with pytest.raises(UnsupportedCompressionType) as info:
        func(5, b"data")
    assert info.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_names():
    assert codec_for_name("ZSTD") == CompressionType.ZSTD
    assert codec_name(2) == "snappy"
    with pytest.raises(UnsupportedCompressionType, match="brotli"):
        codec_for_name("brotli")
