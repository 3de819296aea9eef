"""An S3 object read while it is replaced: pyarrow sizes a read by a HEAD and then GETs that many
bytes, so a manifest rewritten in between came back cut at the old size (a fresh-clone run saw
"unreadable manifest (Unterminated string …)"). `S3Path.read_bytes` reads until the length it
got is the object's size. No server here: the file system is a stand-in that serves the cut
read first."""

from __future__ import annotations

import io
import types

from crbc_viz.store import s3


class _Replaced:
    """A file system whose object is replaced by a longer version while the first read runs:
    that read returns the new version cut at the old length; HEADs say the new size."""

    def __init__(self, old: bytes, new: bytes):
        self.old, self.new, self.reads = old, new, 0

    def open_input_stream(self, location):
        self.reads += 1
        return io.BytesIO(self.new[: len(self.old)] if self.reads == 1 else self.new)

    def get_file_info(self, location):
        return types.SimpleNamespace(size=len(self.new))


def _path(fs) -> s3.S3Path:
    store = object.__new__(s3._Store)
    store.fs, store.bucket, store.prefix, store.listing, store.lease = fs, "b", "p", {}, None
    return s3.S3Path(store, "p/manifest/m.json")


def test_a_manifest_replaced_during_its_read_is_read_whole():
    old = b'{"parts": ["a"]}'
    new = b'{"parts": ["a", "b", "c"], "complete": true}'
    fs = _Replaced(old, new)
    assert _path(fs).read_text() == new.decode()
    assert fs.reads == 2


def test_an_object_that_keeps_its_size_is_read_once():
    fs = _Replaced(b"x" * 10, b"y" * 10)
    assert _path(fs).read_bytes() == b"y" * 10
    assert fs.reads == 1
