"""Server credentials for TLS and mutual TLS, from ``WM_TLS_CERT``, ``WM_TLS_KEY`` and
``WM_TLS_CLIENT_CA``.

The files are read and checked with the standard ``ssl`` module at start, so a wrong path, a
non-PEM file or a key that does not belong to the certificate stops the server with a message
naming the variable, instead of surfacing later as handshake failures on every call. They are
read once: rotating a certificate means restarting (a rolling restart behind a Service).

Inside a service mesh leave these unset: the sidecar terminates mTLS and the application
listens in plaintext inside the pod (see README, "Deployment and service mesh").
"""

from __future__ import annotations

import ssl
from enum import StrEnum
from pathlib import Path

import grpc

from wm_server.config import ConfigurationError, Settings


class TlsMode(StrEnum):
    """Transport security in force."""

    OFF = "off"
    TLS = "tls"
    MUTUAL = "mtls"


def tls_mode(settings: Settings) -> TlsMode:
    if settings.tls_cert is None:
        return TlsMode.OFF
    return TlsMode.MUTUAL if settings.tls_client_ca is not None else TlsMode.TLS


def _read_pem(path: Path, variable: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"{variable}: cannot read {path}: {exc}") from None
    if b"-----BEGIN " not in data:
        raise ConfigurationError(f"{variable}: {path} is not a PEM file")
    return data


def server_ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The same certificate, key and client CA for the HTTP door (call after
    :func:`server_credentials`, which reports what is wrong with the files)."""
    if settings.tls_cert is None or settings.tls_key is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(settings.tls_cert, settings.tls_key)
    if settings.tls_client_ca is not None:
        context.load_verify_locations(cafile=str(settings.tls_client_ca))
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def server_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """The credentials for ``add_secure_port``, or None for plaintext."""
    cert, key, client_ca = settings.tls_cert, settings.tls_key, settings.tls_client_ca
    if cert is None and key is None:
        if client_ca is not None:
            raise ConfigurationError(
                "WM_TLS_CLIENT_CA needs WM_TLS_CERT and WM_TLS_KEY (mutual TLS is TLS plus"
                " client certificates)"
            )
        return None
    if cert is None or key is None:
        missing = "WM_TLS_KEY" if key is None else "WM_TLS_CERT"
        raise ConfigurationError(f"{missing}: WM_TLS_CERT and WM_TLS_KEY must be set together")
    cert_pem = _read_pem(cert, "WM_TLS_CERT")
    key_pem = _read_pem(key, "WM_TLS_KEY")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except (ssl.SSLError, ValueError) as exc:
        raise ConfigurationError(
            f"WM_TLS_CERT/WM_TLS_KEY: the certificate and key do not load together: {exc}"
        ) from None
    ca_pem: bytes | None = None
    if client_ca is not None:
        ca_pem = _read_pem(client_ca, "WM_TLS_CLIENT_CA")
        try:
            ssl.create_default_context(cafile=str(client_ca))
        except (ssl.SSLError, ValueError) as exc:
            raise ConfigurationError(f"WM_TLS_CLIENT_CA: not a CA bundle: {exc}") from None
    return grpc.ssl_server_credentials(
        [(key_pem, cert_pem)],
        root_certificates=ca_pem,
        require_client_auth=ca_pem is not None,
    )
