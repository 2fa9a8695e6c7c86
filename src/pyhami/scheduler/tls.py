"""Serving certificates from files, reloaded when the files change (controller-runtime certwatcher).

One `ssl.SSLContext` serves the listener for its whole life; reloading calls
`load_cert_chain` on it again, which OpenSSL applies to every handshake that follows. A
half-written or mismatched pair (a Secret update lands as two files) keeps the old
certificate and is retried on the next poll.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)


class CertificateError(RuntimeError):
    """The certificate or key file cannot be loaded."""


@dataclass(frozen=True, slots=True)
class _Stamp:
    cert: tuple[int, int, int]
    key: tuple[int, int, int]


def _stamp_of(path: Path) -> tuple[int, int, int]:
    # Kubernetes swaps Secret volumes through a symlink, so the inode changes even when
    # mtime granularity would hide the update.
    info = os.stat(path)
    return (info.st_ino, info.st_mtime_ns, info.st_size)


class ReloadingCertificate:
    """An SSL server context whose certificate follows `cert_file` and `key_file`."""

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.reloads = 0
        self._stamp = self._load()

    def _stamps(self) -> _Stamp:
        try:
            return _Stamp(cert=_stamp_of(self.cert_file), key=_stamp_of(self.key_file))
        except OSError as err:
            raise CertificateError(f"cannot read certificate files: {err}") from err

    def _load(self) -> _Stamp:
        stamp = self._stamps()
        try:
            self.context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as err:
            raise CertificateError(
                f"cannot load certificate {self.cert_file} with key {self.key_file}: {err}"
            ) from err
        self.reloads += 1
        return stamp

    def reload_if_changed(self) -> bool:
        """Reload when either file changed since the last good load; True when it did."""
        try:
            if self._stamps() == self._stamp:
                return False
            self._stamp = self._load()
        except CertificateError as err:
            log.warning("certificate reload failed; keeping the previous one", error=str(err))
            return False
        log.info("serving certificate reloaded", cert_file=str(self.cert_file))
        return True

    async def watch(self, interval: float, stop: asyncio.Event) -> None:
        """Poll the files until `stop` is set."""
        while not stop.is_set():
            self.reload_if_changed()
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval)
            except TimeoutError:
                continue
