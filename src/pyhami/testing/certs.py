"""A throwaway certificate authority: one CA and one serving certificate it signed.

The API double checks a webhook's certificate against the CA bundle it was given, and the
kube-scheduler harness checks the extender's, as in a cluster with cert-manager or HAMi's cert
Job. The demo and the HTTPS tests use it; nothing here is trusted outside their own run.
"""

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

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


@dataclass(frozen=True, slots=True)
class ServingFiles:
    """`tls.crt`/`tls.key` as a Secret would mount them, the CA bundle that trusts them."""

    ca_pem: bytes
    cert_file: Path
    key_file: Path
    serial: int

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert_file, self.key_file)
        return context


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def write_serving_certificate(
    directory: Path,
    now: datetime.datetime | None = None,
    dns_names: tuple[str, ...] = ("localhost",),
) -> ServingFiles:
    """A fresh CA and a certificate for 127.0.0.1 and `dns_names`, written under `directory`."""
    now = now or datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("pyhami throwaway CA")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_CA_KEY_USAGE, critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    names.append(x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")))
    serial = x509.random_serial_number()
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(dns_names[0] if dns_names else "127.0.0.1"))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key_file = directory / "tls.key"
    cert_file = directory / "tls.crt"
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_file.chmod(0o600)
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return ServingFiles(ca.public_bytes(serialization.Encoding.PEM), cert_file, key_file, serial)
