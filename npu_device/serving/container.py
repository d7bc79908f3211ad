"""The serving container (`.om` written by npu-atc): one compiled model per batch size plus the
signature's input/output names, versioned and checksummed. Layout: docs/serving.md.

    blob = container.pack(manifest, {1: om_b1, 8: om_b8})
    manifest, models = container.unpack(blob)       # models: {batch size: compiled model bytes}
"""
import json
import struct
import zlib

MAGIC = b"NPUSRV\0\0"
VERSION = 1
_HEADER = struct.Struct("<8sIIQ")      # magic, version, crc32 of payload, payload length
MODEL_MAGIC = b"NPUOM\0\0\0"            # a bare compiled model (docs/compiled_model_format.md)


class ContainerError(ValueError):
    pass


def pack(manifest: dict, models: dict) -> bytes:
    meta = json.dumps(manifest, sort_keys=True).encode()
    parts = [struct.pack("<I", len(meta)), meta, struct.pack("<I", len(models))]
    for batch in sorted(models):
        parts += [struct.pack("<IQ", batch, len(models[batch])), models[batch]]
    payload = b"".join(parts)
    return _HEADER.pack(MAGIC, VERSION, zlib.crc32(payload), len(payload)) + payload


def unpack(data: bytes):
    """(manifest dict, {batch size: compiled model bytes}); ContainerError names what is wrong."""
    data = bytes(data)
    if len(data) < _HEADER.size:
        raise ContainerError(f"file is {len(data)} bytes, shorter than the {_HEADER.size}-byte "
                             f"header")
    magic, version, crc, length = _HEADER.unpack_from(data)
    if magic != MAGIC:
        hint = " (a bare compiled model; compile with npu-atc)" if magic == MODEL_MAGIC else ""
        raise ContainerError(f"not a serving container: magic {magic!r}, expected {MAGIC!r}{hint}")
    if version != VERSION:
        raise ContainerError(f"container version {version} is not supported (supported: "
                             f"{VERSION})")
    payload = data[_HEADER.size:]
    if len(payload) != length:
        raise ContainerError(f"payload is {len(payload)} bytes, header says {length} (truncated?)")
    if zlib.crc32(payload) != crc:
        raise ContainerError("checksum mismatch: the file is corrupted")
    (n,), pos = struct.unpack_from("<I", payload), 4
    manifest = json.loads(payload[pos:pos + n])
    pos += n
    (count,) = struct.unpack_from("<I", payload, pos)
    pos += 4
    models = {}
    for _ in range(count):
        batch, size = struct.unpack_from("<IQ", payload, pos)
        pos += 12
        models[batch] = payload[pos:pos + size]
        pos += size
    return manifest, models
