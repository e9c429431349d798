"""Certificates made by the tests (never committed keys): a CA, server certificates for
127.0.0.1 / localhost, client certificates with a chosen subject, all PEM files in a
directory, with the ``cryptography`` package. EC P-256 keys: quick to make."""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID


@dataclass(frozen=True)
class Pem:
    """A certificate and key on disk: ``cert`` (the chain: leaf, then its CA), ``key``,
    ``both`` (key + chain in one file, as Kafka's PEM keystore holds them)."""

    cert: str
    key: str
    both: str
    subject: str


def _name(subject: str) -> x509.Name:
    return x509.Name.from_rfc4514_string(subject)


def _write(path: str, data: bytes) -> str:
    with open(path, "wb") as fp:
        fp.write(data)
    os.chmod(path, 0o600)
    return path


class TestCa:
    """A certificate authority in ``directory``; ``ca_file`` is its certificate (PEM)."""

    __test__ = False  # not a pytest class

    def __init__(self, directory: str, name: str = "CN=kip848 test CA,O=kip848") -> None:
        self.directory = directory
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )
        tag = name.split(",")[0].split("=")[-1].replace(" ", "-")
        self.ca_file = _write(
            os.path.join(directory, f"{tag}.pem"),
            self.cert.public_bytes(serialization.Encoding.PEM),
        )

    def issue(
        self,
        file_name: str,
        subject: str,
        *,
        server: bool = False,
        client: bool = True,
        days: float = 1.0,
        password: str | None = None,
    ) -> Pem:
        """A certificate for ``subject`` (an RFC 4514 DN) signed by this CA; ``server``: valid
        for 127.0.0.1, ::1 and localhost."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usages = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(subject))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                        x509.IPAddress(ipaddress.ip_address("::1")),
                    ]
                ),
                critical=False,
            )
        cert = builder.sign(self.key, hashes.SHA256())
        encryption: serialization.KeySerializationEncryption = (
            serialization.NoEncryption()
            if password is None
            else serialization.BestAvailableEncryption(password.encode())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
        )
        chain = cert.public_bytes(serialization.Encoding.PEM) + self.cert.public_bytes(
            serialization.Encoding.PEM
        )
        base = os.path.join(self.directory, file_name)
        return Pem(
            cert=_write(f"{base}.crt", chain),
            key=_write(f"{base}.key", key_pem),
            both=_write(f"{base}.pem", key_pem + chain),
            subject=cert.subject.rfc4514_string(),
        )

    def server(self, file_name: str = "server") -> Pem:
        return self.issue(file_name, "CN=localhost,O=kip848", server=True, client=False)

    def client(self, file_name: str, subject: str) -> Pem:
        return self.issue(file_name, subject)
