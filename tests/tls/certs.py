"""Throwaway PKI for the TLS tests: a CA, a server certificate (localhost, 127.0.0.1) and client certificates."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path: Path, cert: x509.Certificate, key) -> None:
    path.with_suffix(".pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    path.with_suffix(".key").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                           serialization.PrivateFormat.PKCS8,
                                                           serialization.NoEncryption()))


@dataclass
class Pki:
    """Files (PEM) of one certificate authority and the certificates it signed."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path  # CN=client-role
    client_key: Path
    elsewhere_cert: Path  # a server certificate of another host name (hostname verification)
    elsewhere_key: Path


def _issue(directory: Path, name: str, cn: str, ca_cert, ca_key, *, sans=(), server: bool) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca_cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                                     else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    _write(directory / name, cert, key)
    return directory / f"{name}.pem", directory / f"{name}.key"


def _authority(directory: Path, name: str):
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .sign(key, hashes.SHA256()))
    _write(directory / name, cert, key)
    return cert, key


def make_pki(directory: Path, name: str = "ca") -> Pki:
    """A fresh CA in ``directory`` and the certificates the tests use."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_cert, ca_key = _authority(directory, name)
    local = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    server = _issue(directory, f"{name}-server", "localhost", ca_cert, ca_key, sans=local, server=True)
    client = _issue(directory, f"{name}-client", "client-role", ca_cert, ca_key, server=False)
    other = _issue(directory, f"{name}-elsewhere", "broker.example.com", ca_cert, ca_key,
                   sans=[x509.DNSName("broker.example.com")], server=True)
    return Pki(directory / f"{name}.pem", *server, *client, *other)


def issue_client(directory: Path, ca: Path, cn: str) -> tuple[Path, Path]:
    """A client certificate (CN=``cn``) signed by the CA ``ca`` of ``make_pki``: its (certificate, key) files."""
    ca_cert = x509.load_pem_x509_certificate(ca.read_bytes())
    ca_key = serialization.load_pem_private_key(ca.with_suffix(".key").read_bytes(), password=None)
    return _issue(directory, f"client-{cn}", cn, ca_cert, ca_key, server=False)
