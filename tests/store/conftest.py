"""Fixtures of the store's tests: a real S3 server (`s3_server`, `s3`: tests/s3_server.py)."""

from s3_server import s3, s3_server  # noqa: F401
