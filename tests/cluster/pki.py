"""The control plane's certificates, made at start: one CA, the API server's
serving certificate (loopback names only), client certificates whose subject
is the Kubernetes identity (CN = user, O = groups), and the service-account
signing key. Nothing here is reused between runs."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALID = datetime.timedelta(days=2)


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    parts.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(parts)


class CertificateAuthority:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        subject = _name("jupyter-suspend test cluster CA")
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.cert_file = directory / "ca.crt"
        self.cert_file.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        name: str,
        common_name: str,
        organizations: tuple[str, ...] = (),
        *,
        server_names: tuple[str, ...] = (),
        server_ips: tuple[str, ...] = (),
    ) -> tuple[Path, Path]:
        """A leaf certificate and key, written as NAME.crt / NAME.key."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organizations))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        if server_names or server_ips:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
            alt_names: list[x509.GeneralName] = [x509.DNSName(n) for n in server_names]
            alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        cert_file, key_file = self.directory / f"{name}.crt", self.directory / f"{name}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(_key_pem(key))
        key_file.chmod(0o600)
        return cert_file, key_file


def service_account_key(directory: Path) -> Path:
    """The key kube-apiserver signs service-account tokens with (TokenRequest)
    and verifies them by; the controller-manager needs it too."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path = directory / "sa.key"
    path.write_bytes(_key_pem(key))
    path.chmod(0o600)
    return path
