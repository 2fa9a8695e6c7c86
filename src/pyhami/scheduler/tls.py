"""Serving certificates from files, reloaded when the files change (controller-runtime certwatcher).

One `ssl.SSLContext` serves the listener for its whole life; reloading calls
`load_cert_chain` on it again, which OpenSSL applies to every handshake that follows. A
half-written or mismatched pair (a Secret update lands as two files) keeps the old
certificate and is retried on the next poll.

With a client-CA bundle the context asks every caller for a certificate (optional at the TLS
layer, so kube-apiserver and kubelet probes still connect without one) and checks any it gets
against that bundle alone, never the system's CAs: a certificate from another CA fails the
handshake, and the routes that need a caller (server.py) refuse a connection that showed
none. A changed bundle is added to the trusted set; a CA removed from it stays trusted until
the process restarts (OpenSSL cannot take a CA back out of a live context).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)


class CertificateError(RuntimeError):
    """The certificate or key file cannot be loaded."""


def _stamp_of(path: Path | None) -> tuple[int, int, int] | None:
    # Kubernetes swaps Secret volumes through a symlink, so the inode changes even when
    # mtime granularity would hide the update.
    if path is None:
        return None
    info = os.stat(path)
    return (info.st_ino, info.st_mtime_ns, info.st_size)


class ReloadingCertificate:
    """An SSL server context whose certificate follows `cert_file` and `key_file`."""

    def __init__(self, cert_file: Path, key_file: Path, client_ca: Path | None = None) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.client_ca = client_ca
        # Not create_default_context: for a server it loads the system CAs as trusted issuers
        # of client certificates.
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        if client_ca is not None:
            self.context.verify_mode = ssl.CERT_OPTIONAL
        self.reloads = 0
        self._stamp = self._load()

    def _stamps(self) -> tuple[tuple[int, int, int] | None, ...]:
        """The certificate's, the key's and the client CA bundle's."""
        try:
            return tuple(map(_stamp_of, (self.cert_file, self.key_file, self.client_ca)))
        except OSError as err:
            raise CertificateError(f"cannot read certificate files: {err}") from err

    def _load(self) -> tuple[tuple[int, int, int] | None, ...]:
        stamp = self._stamps()
        what = f"certificate {self.cert_file} with key {self.key_file}"
        try:
            self.context.load_cert_chain(self.cert_file, self.key_file)
            if self.client_ca is not None:
                what = f"the client CA bundle {self.client_ca}"
                self.context.load_verify_locations(cafile=self.client_ca)
        except (OSError, ssl.SSLError) as err:
            raise CertificateError(f"cannot load {what}: {err}") from err
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
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval)
