"""TLS and mutual TLS with certificates made by the test: a CA, a server certificate for
127.0.0.1, client certificates of that CA and of a stranger CA."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from support.certs import CertificateAuthority, Issued
from support.production import code_of
from support.production import settings_for as make_settings
from support.providers import ProgrammableProvider
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import Application, start_application
from wm_server.config import ConfigurationError

Stub = service_grpc.WorkingMemoryServiceStub
KEY = "tls-tenant-key-0123456789"
AUTH = (("authorization", f"Bearer {KEY}"),)


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    return CertificateAuthority(tmp_path / "pki")


@pytest.fixture
def server_cert(ca: CertificateAuthority) -> Issued:
    return ca.server()


async def _start(tmp_path: Path, **overrides: object) -> Application:
    return await start_application(
        make_settings(tmp_path, **overrides), provider=ProgrammableProvider()
    )


@pytest.fixture
async def tls_app(tmp_path: Path, server_cert: Issued) -> AsyncIterator[Application]:
    app = await _start(tmp_path, tls_cert=server_cert.cert_path, tls_key=server_cert.key_path)
    yield app
    await app.stop(grace=0.5)


@pytest.fixture
async def mtls_app(
    tmp_path: Path, ca: CertificateAuthority, server_cert: Issued
) -> AsyncIterator[Application]:
    app = await _start(
        tmp_path,
        tls_cert=server_cert.cert_path,
        tls_key=server_cert.key_path,
        tls_client_ca=ca.cert_path,
        api_keys=f"acme:{KEY}",
    )
    yield app
    await app.stop(grace=0.5)


async def _create(address: str, credentials: grpc.ChannelCredentials | None) -> grpc.StatusCode:
    """CreateSession over a TLS (or, with None, plaintext) channel; the status code."""
    channel = (
        grpc.aio.insecure_channel(address)
        if credentials is None
        else grpc.aio.secure_channel(address, credentials)
    )
    async with channel:
        stub = Stub(channel)
        return await code_of(
            stub.CreateSession(api.CreateSessionRequest(), metadata=AUTH, timeout=10)
        )


async def test_tls_serves_a_client_that_trusts_the_ca(
    tls_app: Application, ca: CertificateAuthority
) -> None:
    credentials = grpc.ssl_channel_credentials(root_certificates=ca.cert)
    assert await _create(tls_app.address, credentials) == grpc.StatusCode.OK
    async with grpc.aio.secure_channel(tls_app.address, credentials) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=10
        )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_tls_refuses_plaintext_and_untrusted_servers_are_refused_by_clients(
    tls_app: Application, tmp_path: Path
) -> None:
    assert await _create(tls_app.address, None) == grpc.StatusCode.UNAVAILABLE
    stranger = CertificateAuthority(tmp_path / "stranger", name="stranger-ca")
    credentials = grpc.ssl_channel_credentials(root_certificates=stranger.cert)
    assert await _create(tls_app.address, credentials) == grpc.StatusCode.UNAVAILABLE


async def test_mtls_serves_a_client_with_a_certificate_of_the_ca(
    mtls_app: Application, ca: CertificateAuthority
) -> None:
    client = ca.client()
    credentials = grpc.ssl_channel_credentials(
        root_certificates=ca.cert, private_key=client.key, certificate_chain=client.cert
    )
    assert await _create(mtls_app.address, credentials) == grpc.StatusCode.OK


async def test_mtls_refuses_a_client_without_a_certificate(
    mtls_app: Application, ca: CertificateAuthority
) -> None:
    credentials = grpc.ssl_channel_credentials(root_certificates=ca.cert)
    assert await _create(mtls_app.address, credentials) == grpc.StatusCode.UNAVAILABLE


async def test_mtls_refuses_a_certificate_of_another_ca(
    mtls_app: Application, ca: CertificateAuthority, tmp_path: Path
) -> None:
    stranger = CertificateAuthority(tmp_path / "stranger", name="stranger-ca").client("intruder")
    credentials = grpc.ssl_channel_credentials(
        root_certificates=ca.cert, private_key=stranger.key, certificate_chain=stranger.cert
    )
    assert await _create(mtls_app.address, credentials) == grpc.StatusCode.UNAVAILABLE


async def test_mtls_still_asks_for_the_api_key(
    mtls_app: Application, ca: CertificateAuthority
) -> None:
    client = ca.client()
    credentials = grpc.ssl_channel_credentials(
        root_certificates=ca.cert, private_key=client.key, certificate_chain=client.cert
    )
    async with grpc.aio.secure_channel(mtls_app.address, credentials) as channel:
        code = await code_of(Stub(channel).ListSessions(api.ListSessionsRequest(), timeout=10))
    assert code == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize(
    ("which", "message"),
    [
        ("cert_only", "WM_TLS_KEY: WM_TLS_CERT and WM_TLS_KEY must be set together"),
        ("ca_only", "WM_TLS_CLIENT_CA needs WM_TLS_CERT and WM_TLS_KEY"),
        ("missing_file", "WM_TLS_CERT: cannot read"),
        ("not_pem", "WM_TLS_KEY:"),
        ("wrong_key", "WM_TLS_CERT/WM_TLS_KEY: the certificate and key do not load together"),
    ],
)
async def test_bad_tls_settings_stop_the_start_naming_the_variable(
    tmp_path: Path, ca: CertificateAuthority, server_cert: Issued, which: str, message: str
) -> None:
    other = ca.client("other")
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello")
    options: dict[str, dict[str, object]] = {
        "cert_only": {"tls_cert": server_cert.cert_path},
        "ca_only": {"tls_client_ca": ca.cert_path},
        "missing_file": {"tls_cert": tmp_path / "absent.crt", "tls_key": server_cert.key_path},
        "not_pem": {"tls_cert": server_cert.cert_path, "tls_key": not_pem},
        "wrong_key": {"tls_cert": server_cert.cert_path, "tls_key": other.key_path},
    }
    with pytest.raises(ConfigurationError) as caught:
        await _start(tmp_path, **options[which])
    assert message in str(caught.value)
