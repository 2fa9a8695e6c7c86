"""A throwaway certificate authority, the serving certificate it signs, and client certificates.

The API double checks a webhook's certificate against the CA bundle it was given, and the
kube-scheduler harness checks the extender's, as in a cluster with cert-manager or HAMi's cert
Job. The extender in turn asks its callers for a client certificate signed by the same CA
(kube-scheduler's `tlsConfig.certFile`). The demo and the HTTPS tests use it; nothing here is
trusted outside their own run.
"""

import asyncio
import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=1)
_CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=True,
    key_cert_sign=True,
    crl_sign=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    encipher_only=False,
    decipher_only=False,
)
# The client certificate the chart gives kube-scheduler names it so (any name is accepted).
KUBE_SCHEDULER_CLIENT = "kube-scheduler"


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _now(now: datetime.datetime | None) -> datetime.datetime:
    return now or datetime.datetime.now(datetime.UTC)


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A certificate and its key as files (`tls.crt`/`tls.key` of a Secret)."""

    cert_file: Path
    key_file: Path
    serial: int

    def load_into(self, context: ssl.SSLContext) -> ssl.SSLContext:
        context.load_cert_chain(self.cert_file, self.key_file)
        return context


@dataclass(frozen=True, slots=True)
class CertificateAuthority:
    """A self-signed CA that issues serving and client certificates."""

    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    @classmethod
    def create(cls, now: datetime.datetime | None = None) -> "CertificateAuthority":
        now = _now(now)
        key = ec.generate_private_key(ec.SECP256R1())
        name = _name("pyhami throwaway CA")
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_CA_KEY_USAGE, critical=True)
            # Key identifiers, as Go's x509 (helm, cert-manager) writes them: every throwaway
            # CA has the same name, and a verifier tells them apart by these.
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(key, hashes.SHA256())
        )
        return cls(key, certificate)

    @property
    def pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        directory: Path,
        stem: str,
        common_name: str,
        *,
        usage: x509.ObjectIdentifier,
        alternative_names: tuple[x509.GeneralName, ...] = (),
        now: datetime.datetime | None = None,
    ) -> KeyPair:
        """A fresh key and a certificate for it, written as `<stem>.crt` and `<stem>.key`."""
        now = _now(now)
        key = ec.generate_private_key(ec.SECP256R1())
        serial = x509.random_serial_number()
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(serial)
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), False
            )
        )
        if alternative_names:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(list(alternative_names)), critical=False
            )
        cert = builder.sign(self.key, hashes.SHA256())
        key_file = directory / f"{stem}.key"
        cert_file = directory / f"{stem}.crt"
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        key_file.chmod(0o600)
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return KeyPair(cert_file, key_file, serial)

    def client_certificate(
        self,
        directory: Path,
        common_name: str = KUBE_SCHEDULER_CLIENT,
        now: datetime.datetime | None = None,
    ) -> KeyPair:
        """A client certificate (`client.crt`/`client.key`), e.g. kube-scheduler's."""
        return self.issue(
            directory, "client", common_name, usage=ExtendedKeyUsageOID.CLIENT_AUTH, now=now
        )


@dataclass(frozen=True, slots=True)
class ServingFiles:
    """`tls.crt`/`tls.key` as a Secret would mount them, the CA that signed them (also written
    as `ca.crt`, the bundle clients trust and the extender's client-CA file)."""

    authority: CertificateAuthority
    ca_file: Path
    cert_file: Path
    key_file: Path
    serial: int

    @property
    def ca_pem(self) -> bytes:
        return self.authority.pem

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert_file, self.key_file)
        return context

    def client_certificate(
        self, common_name: str = KUBE_SCHEDULER_CLIENT, now: datetime.datetime | None = None
    ) -> KeyPair:
        """A client certificate from the same CA, next to the serving files."""
        return self.authority.client_certificate(self.ca_file.parent, common_name, now)


def write_serving_certificate(
    directory: Path,
    now: datetime.datetime | None = None,
    dns_names: tuple[str, ...] = ("localhost",),
) -> ServingFiles:
    """A fresh CA and a certificate for 127.0.0.1 and `dns_names`, written under `directory`."""
    authority = CertificateAuthority.create(now)
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    names.append(x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")))
    pair = authority.issue(
        directory,
        "tls",
        dns_names[0] if dns_names else "127.0.0.1",
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        alternative_names=tuple(names),
        now=now,
    )
    ca_file = directory / "ca.crt"
    ca_file.write_bytes(authority.pem)
    return ServingFiles(authority, ca_file, pair.cert_file, pair.key_file, pair.serial)


async def client_seen_by(server: ssl.SSLContext, client: ssl.SSLContext) -> dict[str, Any]:
    """One TLS handshake over loopback: the client certificate the server side accepted (empty
    when none was shown). A handshake the server refuses raises on the client side."""
    seen: list[dict[str, Any]] = []

    async def serve(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(writer.get_extra_info("peercert") or {})
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    listener = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server)
    port = listener.sockets[0].getsockname()[1]
    async with listener:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
        try:
            if await reader.read() != b"ok":
                raise ConnectionError("the server closed the connection during the handshake")
        finally:
            writer.close()
    return seen[0]
