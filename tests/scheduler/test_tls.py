import asyncio
import ssl
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from cryptography import x509

from pyhami.scheduler.tls import CertificateError, ReloadingCertificate
from pyhami.testing.certs import KeyPair, client_seen_by, write_serving_certificate


async def _served_serial(port: int) -> int:
    client = ssl.create_default_context()
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    _reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    await writer.wait_closed()
    return x509.load_der_x509_certificate(der).serial_number


async def test_certificate_reloads_when_files_change(tmp_path: Path) -> None:
    first = write_serving_certificate(tmp_path).serial
    cert = ReloadingCertificate(tmp_path / "tls.crt", tmp_path / "tls.key")
    app = web.Application()

    async def healthz(_: web.Request) -> web.Response:
        return web.Response()

    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=cert.context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        assert await _served_serial(port) == first
        assert cert.reload_if_changed() is False
        second = write_serving_certificate(tmp_path).serial
        assert cert.reload_if_changed() is True
        assert await _served_serial(port) == second
        # A broken key keeps the previous certificate serving.
        (tmp_path / "tls.key").write_text("garbage")
        assert cert.reload_if_changed() is False
        assert await _served_serial(port) == second
        url = f"https://127.0.0.1:{port}/healthz"
        async with aiohttp.ClientSession() as session, session.get(url, ssl=False) as resp:
            assert resp.status == 200
    finally:
        await runner.cleanup()


async def test_watch_reloads_in_the_background(tmp_path: Path) -> None:
    write_serving_certificate(tmp_path)
    cert = ReloadingCertificate(tmp_path / "tls.crt", tmp_path / "tls.key")
    stop = asyncio.Event()
    task = asyncio.create_task(cert.watch(0.01, stop))
    write_serving_certificate(tmp_path)
    for _ in range(200):
        if cert.reloads == 2:
            break
        await asyncio.sleep(0.01)
    stop.set()
    await task
    assert cert.reloads == 2


def test_missing_files_are_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CertificateError, match="cannot read certificate files"):
        ReloadingCertificate(tmp_path / "nope.crt", tmp_path / "nope.key")
    write_serving_certificate(tmp_path)
    (tmp_path / "tls.key").write_text("not a key")
    with pytest.raises(CertificateError, match="cannot load certificate"):
        ReloadingCertificate(tmp_path / "tls.crt", tmp_path / "tls.key")


def _client(ca_pem: bytes, certificate: KeyPair | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=ca_pem.decode())
    return context if certificate is None else certificate.load_into(context)


async def test_client_certificates_are_checked_against_the_bundle_alone(tmp_path: Path) -> None:
    serving = write_serving_certificate(tmp_path)
    ours = serving.client_certificate("kube-scheduler")
    bundle = tmp_path / "client-ca.crt"
    bundle.write_bytes(serving.ca_pem)
    cert = ReloadingCertificate(serving.cert_file, serving.key_file, bundle)
    assert cert.context.cert_store_stats()["x509_ca"] == 1  # no system CA issues client certs
    assert await client_seen_by(cert.context, _client(serving.ca_pem, ours)) == "kube-scheduler"
    assert await client_seen_by(cert.context, _client(serving.ca_pem)) == ""  # none is allowed
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    other = write_serving_certificate(other_dir)
    theirs = other.client_certificate("intruder")
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await client_seen_by(cert.context, _client(serving.ca_pem, theirs))
    # A rotated bundle: its new CA is trusted at the next poll, the old one until a restart.
    bundle.write_bytes(other.ca_pem)
    assert cert.reload_if_changed() is True
    assert await client_seen_by(cert.context, _client(serving.ca_pem, theirs)) == "intruder"
    assert await client_seen_by(cert.context, _client(serving.ca_pem, ours)) == "kube-scheduler"
