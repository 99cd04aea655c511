"""A minimal PNG writer: an RGB array to the bytes of a PNG file (no imaging library needed).

Used for pictures the browser only has to show, not to interact with (the live retention heatmap):
decoding a few-kB PNG costs a browser next to nothing, where redrawing a Plotly figure every second
takes a noticeable share of a 2-core machine from the run it is watching.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_bytes(rgb: np.ndarray) -> bytes:
    """``rgb`` uint8 ``[height, width, 3]`` as an 8-bit RGB PNG (every row with filter 0: none)."""
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3 or 0 in rgb.shape:
        raise ValueError(f"need a non-empty uint8 [height, width, 3] array, got {rgb.dtype} {rgb.shape}")
    height, width = rgb.shape[:2]
    rows = np.concatenate([np.zeros((height, 1), dtype=np.uint8), rgb.reshape(height, width * 3)], axis=1)
    header = struct.pack(
        ">IIBBBBB", width, height, 8, 2, 0, 0, 0
    )  # 8 bits, truecolour, deflate, no filter, no interlace
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(rows.tobytes(), 6))
        + _chunk(b"IEND", b"")
    )
