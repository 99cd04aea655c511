"""The server's store of pasted documents, so a link can name a document by a short hash of its text.

Plain Python (no Streamlit): one bounded, thread-safe LRU per server process, shared by every
session. A link names a document by :func:`document_hash`; a document that was pushed out (or a
server restarted since) is simply not found, and the page says so.
"""

from __future__ import annotations

import hashlib
import math
import threading

from cachetools import LRUCache

HASH_CHARS = 12  # 48 bits of SHA-256: a collision needs ~16 million documents on one server
DEFAULT_MAX_DOCUMENTS = 256
DEFAULT_MAX_BYTES = 32 * 2**20


def document_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:HASH_CHARS]


class DocumentStore:
    """Documents by content hash, least recently used dropped first, within a count and a byte budget."""

    def __init__(self, max_documents: int = DEFAULT_MAX_DOCUMENTS, max_bytes: int = DEFAULT_MAX_BYTES):
        self.max_documents, self.max_bytes = max_documents, max_bytes
        # Sized in bytes and never full by itself: put() drops the least recently used within both limits,
        # always keeping the newest document, even one over the byte budget on its own.
        self._items: LRUCache[str, str] = LRUCache(maxsize=math.inf, getsizeof=_size)
        self._lock = threading.Lock()

    def put(self, text: str) -> str:
        """Hold ``text`` (or refresh it) and return its hash."""
        key = document_hash(text)
        with self._lock:
            if self._items.get(key) is None:
                self._items[key] = text
                items = self._items
                while len(items) > 1 and (len(items) > self.max_documents or items.currsize > self.max_bytes):
                    items.popitem()
        return key

    def get(self, key: str) -> str | None:
        with self._lock:
            return self._items.get(key)

    def __len__(self) -> int:
        return len(self._items)


def _size(text: str) -> int:
    return len(text.encode("utf-8"))
