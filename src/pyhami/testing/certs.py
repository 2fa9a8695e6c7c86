"""A throwaway certificate authority: a CA and the serving and client certificates it signs.

The API double checks a webhook's certificate against the CA bundle it was given, and the
kube-scheduler harness checks the extender's, as in a cluster with cert-manager or HAMi's cert
Job. The extender in turn asks its callers for a client certificate signed by the same CA
(kube-scheduler's `tlsConfig.certFile`), and the real control plane signs its serving and
client certificates with one. The demo and the HTTPS tests use it; nothing here is trusted
outside their own run.
"""

import asyncio
import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

import yaml
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


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    # Kubernetes reads a client certificate's CN as the user and each O as a group.
    return x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        + [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in organizations]
    )


def write_private_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    """A private key as PEM, readable by its owner only."""
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A certificate and its key as files (`tls.crt`/`tls.key` of a Secret)."""

    cert_file: Path
    key_file: Path
    serial: int

    def load_into(self, context: ssl.SSLContext) -> ssl.SSLContext:
        context.load_cert_chain(self.cert_file, self.key_file)
        return context


class CertificateAuthority:
    """A throwaway CA, written as `ca.crt` in `directory`, that signs serving and client
    certificates into the same directory."""

    def __init__(
        self,
        directory: Path,
        now: datetime.datetime | None = None,
        name: str = "pyhami throwaway CA",
    ) -> None:
        self.directory = directory
        self.now = now or datetime.datetime.now(datetime.UTC)
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = _name(name)
        self._cert = (
            self._builder(self._name, self._key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_CA_KEY_USAGE, critical=True)
            # Key identifiers, as Go's x509 (helm, cert-manager) writes them: every throwaway
            # CA has the same name, and a verifier tells them apart by these.
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), False)
            .sign(self._key, hashes.SHA256())
        )
        self.pem = self._cert.public_bytes(serialization.Encoding.PEM)
        self.cert_file = directory / "ca.crt"
        self.cert_file.write_bytes(self.pem)

    def _builder(
        self, subject: x509.Name, public_key: ec.EllipticCurvePublicKey
    ) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._name)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.now - datetime.timedelta(minutes=1))
            .not_valid_after(self.now + _VALIDITY)
        )

    def _issue(
        self,
        stem: str,
        subject: x509.Name,
        usage: x509.ObjectIdentifier,
        names: list[x509.GeneralName],
    ) -> KeyPair:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            self._builder(subject, key.public_key())
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), False
            )
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        pair = KeyPair(
            self.directory / f"{stem}.crt", self.directory / f"{stem}.key", cert.serial_number
        )
        write_private_key(pair.key_file, key)
        pair.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return pair

    def serving(
        self,
        stem: str,
        dns_names: tuple[str, ...] = ("localhost",),
        ips: tuple[str, ...] = ("127.0.0.1",),
    ) -> KeyPair:
        """A server certificate for `dns_names` and `ips`."""
        names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        subject = _name(dns_names[0] if dns_names else ips[0])
        return self._issue(stem, subject, ExtendedKeyUsageOID.SERVER_AUTH, names)

    def client(self, stem: str, user: str, groups: tuple[str, ...] = ()) -> KeyPair:
        """A client certificate Kubernetes reads as `user` in `groups`."""
        return self._issue(stem, _name(user, groups), ExtendedKeyUsageOID.CLIENT_AUTH, [])


@dataclass(frozen=True, slots=True)
class ServingFiles(KeyPair):
    """`tls.crt`/`tls.key` as a Secret would mount them, and the CA that signed them (written
    as `ca.crt`: the bundle clients trust and the extender's client-CA file)."""

    authority: CertificateAuthority

    @property
    def ca_file(self) -> Path:
        return self.authority.cert_file

    @property
    def ca_pem(self) -> bytes:
        return self.authority.pem

    def server_context(self) -> ssl.SSLContext:
        return self.load_into(ssl.create_default_context(ssl.Purpose.CLIENT_AUTH))

    def client_certificate(self, common_name: str = KUBE_SCHEDULER_CLIENT) -> KeyPair:
        """A client certificate from the same CA (`client.crt`/`client.key`), e.g.
        kube-scheduler's."""
        return self.authority.client("client", common_name)


def write_serving_certificate(
    directory: Path,
    now: datetime.datetime | None = None,
    dns_names: tuple[str, ...] = ("localhost",),
) -> ServingFiles:
    """A fresh CA and a certificate for 127.0.0.1 and `dns_names`, written under `directory`."""
    authority = CertificateAuthority(directory, now)
    pair = authority.serving("tls", dns_names)
    return ServingFiles(pair.cert_file, pair.key_file, pair.serial, authority)


async def client_seen_by(server: ssl.SSLContext, client: ssl.SSLContext) -> str:
    """One TLS handshake over loopback: the common name of the client certificate the server
    side accepted ("" when none was shown). A handshake the server refuses raises on the client
    side."""
    seen: list[str] = []

    async def serve(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        subject = (writer.get_extra_info("peercert") or {}).get("subject", ())
        seen.append(dict(name[0] for name in subject).get("commonName", ""))
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


def kubeconfig(cluster: dict[str, str], user: dict[str, str]) -> str:
    """A kubeconfig file's text: one cluster (its `server` and CA), one user, one context."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "pyhami", "cluster": cluster}],
        "users": [{"name": "pyhami", "user": user}],
        "contexts": [{"name": "pyhami", "context": {"cluster": "pyhami", "user": "pyhami"}}],
        "current-context": "pyhami",
    }
    return yaml.safe_dump(config)
