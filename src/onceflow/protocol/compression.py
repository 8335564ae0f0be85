"""Record-batch compression codecs, byte-compatible with Kafka's Java client and broker.

Pure functions: ``compress(codec, data)`` and ``decompress(codec, data)`` with Kafka's codec ids
(the low three bits of a magic-2 batch's attributes). The quirks that matter for interoperability:

- snappy: Java wraps raw snappy blocks in xerial's stream framing, so that is what we write; we read
  both the xerial framing and bare raw snappy (some non-Java clients send that).
- lz4: the frame format with *independent* blocks, because Java's reader rejects linked blocks
  (KIP-57), 64 KB blocks and no content size, as Java writes them.
- zstd: frames may lack a content size and a payload may hold several frames; cramjam's streaming
  decoder handles both (``zstandard.decompress`` does neither).
"""

from __future__ import annotations

import enum
import struct
import zlib

import cramjam
import lz4.frame

from onceflow.protocol.errors import CorruptMessage, UnsupportedCompressionType

__all__ = ["CompressionType", "compress", "decompress", "codec_for_name", "codec_name"]


class CompressionType(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# Kafka's defaults: gzip Deflater.DEFAULT_COMPRESSION (6), zstd level 3 (KIP-390).
GZIP_LEVEL = 6
ZSTD_LEVEL = 3

# xerial snappy stream: 8-byte magic, int32 version, int32 minimum compatible version, then blocks of
# [int32 compressed length][raw snappy block]. Java's SnappyOutputStream compresses 32 KB per block.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_HEADER_SIZE = len(_XERIAL_HEADER)
SNAPPY_BLOCK_SIZE = 32 * 1024
_INT32 = struct.Struct(">i")


def codec_name(codec: int) -> str:
    """``gzip``, ``snappy``, ... the name Kafka's ``compression.type`` config uses."""
    try:
        return CompressionType(codec).name.lower()
    except ValueError:
        raise UnsupportedCompressionType(f"unknown compression codec {codec}")


def codec_for_name(name: str) -> CompressionType:
    """The codec id for a ``compression.type`` name (``none``, ``gzip``, ``snappy``, ``lz4``, ``zstd``)."""
    try:
        return CompressionType[name.strip().upper()]
    except KeyError:
        raise UnsupportedCompressionType(
            f"unknown compression type {name!r}: use one of none, gzip, snappy, lz4, zstd"
        )


def compress(codec: int, data: bytes | bytearray | memoryview, level: int | None = None) -> bytes:
    """Compress ``data`` the way Kafka's Java producer does for ``codec``, at ``level`` (a topic's
    ``compression.<codec>.level``; None: Kafka's producer default; snappy has none)."""
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec == CompressionType.GZIP:
        # wbits=31: deflate inside a gzip member, as java.util.zip.GZIPOutputStream writes.
        gzip_level = GZIP_LEVEL if level is None or level < 0 else level
        compressor = zlib.compressobj(gzip_level, zlib.DEFLATED, 31)
        return compressor.compress(data) + compressor.flush()
    if codec == CompressionType.SNAPPY:
        return _xerial_snappy_compress(data)
    if codec == CompressionType.LZ4:
        return lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
            compression_level=0 if level is None else level,
        )
    if codec == CompressionType.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=ZSTD_LEVEL if level is None else level))
    raise UnsupportedCompressionType(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    """Undo :func:`compress`; raises ``CorruptMessage`` when ``data`` is not valid for ``codec``."""
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec not in _DECOMPRESSORS:
        raise UnsupportedCompressionType(f"unknown compression codec {codec}")
    try:
        return _DECOMPRESSORS[codec](data)
    except CorruptMessage:
        raise
    except (zlib.error, cramjam.DecompressionError, RuntimeError, ValueError, struct.error) as exc:
        raise CorruptMessage(f"{codec_name(codec)} payload of {len(data)} bytes does not decompress: {exc}")


def _gzip_decompress(data) -> bytes:
    # Java's GZIPInputStream reads concatenated gzip members; so do we.
    out = []
    remaining = bytes(data)
    while True:
        decompressor = zlib.decompressobj(31)
        out.append(decompressor.decompress(remaining))
        if not decompressor.eof:
            raise CorruptMessage("gzip payload is truncated")
        remaining = decompressor.unused_data
        if not remaining:
            return b"".join(out)


def _xerial_snappy_compress(data) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), SNAPPY_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + SNAPPY_BLOCK_SIZE]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data) -> bytes:
    view = memoryview(data)
    if bytes(view[: len(XERIAL_MAGIC)]) != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(view))
    if len(view) < _XERIAL_HEADER_SIZE:
        raise CorruptMessage("xerial snappy header is truncated")
    out = []
    pos = _XERIAL_HEADER_SIZE
    end = len(view)
    while pos < end:
        if pos + 4 > end:
            raise CorruptMessage(f"xerial snappy block length at byte {pos} is truncated")
        (block_len,) = _INT32.unpack_from(view, pos)
        pos += 4
        if block_len < 0 or pos + block_len > end:
            raise CorruptMessage(
                f"xerial snappy block at byte {pos} claims {block_len} bytes, {end - pos} left"
            )
        out.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + block_len])))
        pos += block_len
    return b"".join(out)


def _lz4_decompress(data) -> bytes:
    # A payload may hold more than one frame; decode them all.
    out = []
    remaining = bytes(data)
    while remaining:
        decompressor = lz4.frame.LZ4FrameDecompressor()
        out.append(decompressor.decompress(remaining))
        if not decompressor.eof:
            raise CorruptMessage("lz4 frame is truncated")
        remaining = decompressor.unused_data
    return b"".join(out)


def _zstd_decompress(data) -> bytes:
    return bytes(cramjam.zstd.decompress(bytes(data)))


_DECOMPRESSORS = {
    CompressionType.GZIP: _gzip_decompress,
    CompressionType.SNAPPY: _snappy_decompress,
    CompressionType.LZ4: _lz4_decompress,
    CompressionType.ZSTD: _zstd_decompress,
}
