"""The emulator's test CA and server certificate, generated once per state directory.

Granian needs a PKCS#8 key. The server certificate names ``localhost``, ``127.0.0.1`` and the bind
host, so clients verify it normally against ``ca.crt`` (no ``verify=False`` anywhere).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class TlsFiles:
    ca_cert: Path
    server_cert: Path
    server_key: Path


def _name(cn: str) -> x509.Name:
    return x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Notee emulator"), x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    )


def _san(hosts: list[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            entries.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(entries)


def ensure_tls(state_dir: str | Path, extra_hosts: list[str] | None = None) -> TlsFiles:
    """Create (or reuse) ``ca.crt``, ``server.crt`` and ``server.key`` under ``state_dir``."""
    root = Path(state_dir)
    root.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(root / "ca.crt", root / "server.crt", root / "server.key")
    hosts = ["localhost", "127.0.0.1", *(h for h in (extra_hosts or []) if h not in ("0.0.0.0", "::", ""))]
    if files.ca_cert.exists() and files.server_cert.exists() and files.server_key.exists():
        cert = x509.load_pem_x509_certificate(files.server_cert.read_bytes())
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        have = {str(v) for v in names.get_values_for_type(x509.DNSName)}
        have |= {str(v) for v in names.get_values_for_type(x509.IPAddress)}
        if set(hosts) <= have and cert.not_valid_after_utc > dt.datetime.now(dt.UTC) + dt.timedelta(days=1):
            return files

    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("Notee emulator test CA"))
        .issuer_name(_name("Notee emulator test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=825))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("localhost"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=825))
        .add_extension(_san(hosts), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    # Created owner-only (never readable by others, not even between write and chmod).
    fd = os.open(files.server_key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # O_CREAT keeps the mode of a file that already exists
    with os.fdopen(fd, "wb") as out:
        out.write(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    files.server_cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return files
