"""What the app accepts from an uploaded file: the bytes in, a document or a trace out, or one line why not.

Plain Python (the pages call these from their upload widgets), so every hostile file can be tested
without a browser. A refused file never touches what the user already has: the caller keeps the
text box and the figures as they were.
"""

from __future__ import annotations

from ..errors import CcvizError
from ..trace import Trace
from .limits import MAX_UPLOAD_ENV


def decode_document(name: str, data: bytes, limit: int) -> str:
    """The text of an uploaded document, or a one-line reason why it cannot be used."""
    if len(data) > limit:
        raise CcvizError(
            f"{name} is {len(data) // 1024} KB: documents are limited to {limit // 1024} KB ({MAX_UPLOAD_ENV}); "
            "upload a shorter excerpt"
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise CcvizError(f"{name} is not UTF-8 text: save it as plain UTF-8 (.txt or .md)") from None
    if "\x00" in text:
        raise CcvizError(f"{name} looks like a binary file, not text: upload a .txt or .md file")
    if not text.strip():
        raise CcvizError(f"{name} is empty")
    return text


def read_trace(name: str, data: bytes) -> Trace:
    """A trace file as a :class:`Trace`, fully validated by :meth:`Trace.from_json` before anything is
    drawn (size, JSON, schema, types, lengths, displayable text); errors name the file."""
    try:
        return Trace.from_json(data)
    except CcvizError as err:
        raise CcvizError(f"{name}: {err}") from None
