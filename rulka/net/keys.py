"""Credentials: the TLS certificate authority, the relay password, and the signing keys.

Layout of a keys folder made by ``rulka keys generate --out DIR`` (the trainer's and server's):

- ``ca.pem`` / ``ca.key``: a self-signed certificate authority (the key only signs the server
  certificate; keep it, or regenerate everything).
- ``server/certificate.pem`` + ``server/key.pem``: the relay's TLS certificate, with the host
  names / IPs the user gave as subject alternative names (plus localhost and 127.0.0.1).
- ``client/certificate.pem``: the CA certificate clients verify the relay against.
- ``password``: the relay password (tlspyo sends it with every frame, inside TLS).
- ``trainer.key`` / ``trainer.pub``: the trainer's Ed25519 key pair. The trainer signs every
  message it sends (weights, acks); workers accept only what verifies against ``trainer.pub``.
- ``workers/<name>.pub``: enrolled workers' Ed25519 public keys; ``revoked/<name>.pub`` revoked.
- ``bundles/<name>/``: what ``add-worker`` made for a worker: copy that folder to the gaming PC.
- ``operators/<name>.pub`` and ``operator_bundles/<name>/``: what ``add-operator`` made for
  someone who may read ``rulka status`` (the relay's report names every address) without the
  trainer's keys; an operator's identity on the wire is ``op:<name>`` and it joins no channel.

A worker bundle holds ``client/certificate.pem``, ``password``, ``trainer.pub``, ``worker.key``
(its own Ed25519 private key) and ``worker.name``; never the trainer's private key, so a stolen
worker credential cannot publish weights that workers accept.

The server needs ``server/``, ``password``, ``trainer.pub`` and ``workers/`` (it checks who
joins which channel but cannot forge messages: it holds no private signing key).
Secrets are written 0600 inside 0700 folders; nothing is overwritten without ``force``.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.x509.oid import NameOID

from rulka.errors import UserError

log = logging.getLogger(__name__)

DEFAULT_HOSTS = ("localhost", "127.0.0.1")
OPERATOR_PREFIX = "op:"  # worker names cannot hold ':', so no worker can take an operator's identity
CERT_DAYS = 3650
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def check_worker_name(name: str) -> str:
    """Return ``name`` if it is a valid worker name (letters, digits, ``_.-``, <= 64 chars)."""
    if not isinstance(name, str) or not _NAME_RE.match(name) or name == "trainer":
        raise UserError(f"worker name {name!r} is not valid: use letters, digits, '_', '.', '-' "
                        "(at most 64 characters, not 'trainer')")
    return name


# -- writing files -----------------------------------------------------------------------------
def _mkdir_private(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)


def _write_private(path: Path, data: bytes, *, force: bool) -> None:
    if path.exists() and not force:
        raise UserError(f"{path} already exists; pass --force to overwrite it")
    _mkdir_private(path.parent)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def _ed25519_private_pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _ed25519_public_pem(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


_DAMAGED = "copy it again from the keys folder (or the worker's bundle), or run `rulka keys generate`"


def _read_file(path: Path, what: str) -> bytes:
    """The bytes of ``path``; UserError (one line) if it is missing or unreadable."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise UserError(f"{what} {path} not found") from None
    except OSError as exc:
        raise UserError(f"cannot read {what} {path}: {exc.strerror or exc}") from None


def _read_text(path: Path, what: str) -> str:
    try:
        return _read_file(path, what).decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path} is damaged (not text): {_DAMAGED}") from None


def _load_private(path: Path, what: str = "key file") -> object:
    from cryptography.exceptions import UnsupportedAlgorithm

    data = _read_file(path, what)
    try:
        return serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise UserError(f"{path} is not a readable PEM private key (damaged or wrong file): {_DAMAGED}") from None


def load_ed25519_private(path: Path) -> Ed25519PrivateKey:
    """Read an Ed25519 private key (PEM); UserError if missing, damaged or of another type."""
    key = _load_private(path)
    if not isinstance(key, Ed25519PrivateKey):
        raise UserError(f"{path} is not an Ed25519 private key")
    return key


def load_ed25519_public(path: Path) -> Ed25519PublicKey:
    """Read an Ed25519 public key (PEM); UserError if missing, damaged or of another type."""
    from cryptography.exceptions import UnsupportedAlgorithm

    data = _read_file(path, "key file")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise UserError(f"{path} is not a readable PEM public key (damaged or wrong file): {_DAMAGED}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise UserError(f"{path} is not an Ed25519 public key")
    return key


def _san_entry(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def generate_keys(out: Path, hosts: list[str], *, force: bool = False,
                  include_defaults: bool = True) -> list[Path]:
    """Write a full keys folder (see the module docstring) and return the files written.

    ``hosts``: the names / IPs clients will use to reach the server; localhost and 127.0.0.1
    are added unless ``include_defaults`` is False.
    """
    out = Path(out)
    names: list[str] = []
    for h in [*hosts, *(DEFAULT_HOSTS if include_defaults else ())]:
        h = h.strip()
        if h and h not in names:
            names.append(h)
    if not names:
        raise UserError("give at least one --host (the name or IP workers use to reach the server)")
    targets = [out / "ca.pem", out / "ca.key", out / "server" / "certificate.pem", out / "server" / "key.pem",
               out / "client" / "certificate.pem", out / "password", out / "trainer.key", out / "trainer.pub"]
    existing = [p for p in targets if p.exists()]
    if existing and not force:
        raise UserError(f"{existing[0]} already exists; pass --force to overwrite the keys in {out}")
    now = datetime.datetime.now(datetime.UTC)
    start = now - datetime.timedelta(minutes=5)
    end = now + datetime.timedelta(days=CERT_DAYS)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rulka CA")])
    ca_cert = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    srv_key = ec.generate_private_key(ec.SECP256R1())
    srv_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name).public_key(srv_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName([_san_entry(h) for h in names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_fmt = (pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    trainer_key = Ed25519PrivateKey.generate()
    files = {
        out / "ca.pem": ca_cert.public_bytes(pem),
        out / "ca.key": ca_key.private_bytes(*key_fmt),
        out / "server" / "certificate.pem": srv_cert.public_bytes(pem),
        out / "server" / "key.pem": srv_key.private_bytes(*key_fmt),
        out / "client" / "certificate.pem": ca_cert.public_bytes(pem),
        out / "password": secrets.token_urlsafe(32).encode(),
        out / "trainer.key": _ed25519_private_pem(trainer_key),
        out / "trainer.pub": _ed25519_public_pem(trainer_key.public_key()),
    }
    _mkdir_private(out)
    for path, data in files.items():
        _write_private(path, data, force=True)
    for sub in ("workers", "revoked", "bundles"):
        _mkdir_private(out / sub)
    return list(files)


def add_worker(keys_dir: Path, name: str, *, force: bool = False) -> Path:
    """Enrol worker ``name``: write ``workers/<name>.pub`` and the bundle folder; return the bundle."""
    bundle = _enrol(Path(keys_dir), name, "worker", "workers", "bundles", force=force)
    revoked = Path(keys_dir) / "revoked" / f"{name}.pub"
    if revoked.exists():
        revoked.unlink()  # re-enrolment with a new key lifts the old revocation
    return bundle


def add_operator(keys_dir: Path, name: str, *, force: bool = False) -> Path:
    """Enrol operator ``name`` (may read ``rulka status``, nothing else): write
    ``operators/<name>.pub`` and the bundle folder ``operator_bundles/<name>/``; return the bundle.
    Delete ``operators/<name>.pub`` to shut the operator out."""
    return _enrol(Path(keys_dir), name, "operator", "operators", "operator_bundles", force=force)


def _enrol(keys_dir: Path, name: str, kind: str, pub_folder: str, bundles: str, *, force: bool) -> Path:
    """A new key pair for ``name``: the public key in ``<pub_folder>/<name>.pub``, the bundle
    (``<kind>.key``, ``<kind>.name``, the password, the trainer's public key, the CA certificate)
    in ``<bundles>/<name>/``."""
    check_worker_name(name)
    _require_trainer_dir(keys_dir)
    pub_path = keys_dir / pub_folder / f"{name}.pub"
    bundle = keys_dir / bundles / name
    if (pub_path.exists() or bundle.exists()) and not force:
        raise UserError(f"{kind} {name!r} is already enrolled in {keys_dir}; pass --force to replace its key")
    key = Ed25519PrivateKey.generate()
    _write_private(bundle / f"{kind}.key", _ed25519_private_pem(key), force=True)
    _write_private(bundle / f"{kind}.name", name.encode(), force=True)
    for rel in ("password", "trainer.pub", "client/certificate.pem"):
        _write_private(bundle / rel, (keys_dir / rel).read_bytes(), force=True)
    _write_private(pub_path, _ed25519_public_pem(key.public_key()), force=True)
    return bundle


def revoke_worker(keys_dir: Path, name: str) -> None:
    """Move the worker's public key to ``revoked/`` and delete its bundle; running trainers and
    servers pick the change up within a few seconds."""
    keys_dir = Path(keys_dir)
    check_worker_name(name)
    pub_path = keys_dir / "workers" / f"{name}.pub"
    if not pub_path.exists():
        raise UserError(f"worker {name!r} is not enrolled in {keys_dir}")
    _mkdir_private(keys_dir / "revoked")
    os.replace(pub_path, keys_dir / "revoked" / f"{name}.pub")
    bundle = keys_dir / "bundles" / name
    if bundle.is_dir():
        for p in sorted(bundle.rglob("*"), reverse=True):
            p.rmdir() if p.is_dir() else p.unlink()
        bundle.rmdir()


def list_workers(keys_dir: Path) -> dict[str, str]:
    """Enrolled and revoked workers: name -> "enrolled" | "revoked"."""
    return {name: state for role, name, state, _ in list_keys(keys_dir) if role == "worker"}


def raw_key(key: Ed25519PublicKey) -> bytes:
    """The 32 raw bytes of an Ed25519 public key (to compare two keys)."""
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_fingerprint(key: Ed25519PublicKey) -> str:
    """``sha256:`` and the first 16 hex digits of the SHA-256 of the raw public key: enough to
    tell whether a bundle's key is the one enrolled."""
    digest = hashes.Hash(hashes.SHA256())
    digest.update(raw_key(key))
    return "sha256:" + digest.finalize().hex()[:16]


def list_keys(keys_dir: Path) -> list[tuple[str, str, str, str]]:
    """Every worker and operator key in ``keys_dir`` as (role, name, state, fingerprint), sorted
    by role then name: workers "enrolled" or "revoked", operators "enrolled" (deleting
    ``operators/<name>.pub`` shuts one out); the fingerprint is "unreadable" for a damaged key."""
    keys_dir = Path(keys_dir)
    found: dict[tuple[str, str], tuple[str, Path]] = {}
    for role, state, sub in (("worker", "revoked", "revoked"), ("worker", "enrolled", "workers"),
                             ("operator", "enrolled", "operators")):
        folder = keys_dir / sub
        if folder.is_dir():
            for p in folder.glob("*.pub"):
                found[(role, p.stem)] = (state, p)  # enrolled again after a revoke: enrolled wins
    out = []
    for (role, name), (state, path) in sorted(found.items()):
        try:
            fingerprint = key_fingerprint(load_ed25519_public(path))
        except UserError:
            fingerprint = "unreadable"
        out.append((role, name, state, fingerprint))
    return out


def _require_trainer_dir(keys_dir: Path) -> None:
    if not (keys_dir / "trainer.key").exists() or not (keys_dir / "password").exists():
        raise UserError(f"{keys_dir} is not a keys folder made by `rulka keys generate` "
                        "(no trainer.key / password)")


# -- loading ------------------------------------------------------------------------------------
KEY_FILE_READ_BYTES = 64 * 1024  # a public key file is a few hundred bytes


@dataclass
class Credentials:
    """What one role loaded from its keys folder or worker bundle.

    ``identity`` is "trainer", "server" or the worker's name; ``signing_key`` signs what this
    role sends (None for the server); ``worker_keys()`` reads the enrolled, non-revoked workers'
    public keys afresh (trainer and server folders only).
    """

    root: Path
    identity: str
    password: str
    client_tls_dir: Path
    server_tls_dir: Path | None
    trainer_public: Ed25519PublicKey
    signing_key: Ed25519PrivateKey | None

    def worker_keys(self) -> dict[str, Ed25519PublicKey]:
        folder = self.root / "workers"
        out: dict[str, Ed25519PublicKey] = {}
        if folder.is_dir():
            for p in folder.glob("*.pub"):
                try:
                    out[p.stem] = load_ed25519_public(p)
                except UserError as exc:
                    log.warning("worker %s is not enrolled while its key is unreadable: %s", p.stem, exc)
                    continue  # an unreadable key enrols nobody
        return out

    def operator_key(self, identity: str) -> Ed25519PublicKey | None:
        """The public key of operator identity ``op:<name>`` (None: not enrolled)."""
        if not identity.startswith(OPERATOR_PREFIX):
            return None
        try:
            name = check_worker_name(identity[len(OPERATOR_PREFIX):])
            return load_ed25519_public(self.root / "operators" / f"{name}.pub")
        except UserError:
            return None

    def keys_fingerprint(self) -> bytes:
        """A SHA-256 over the names and contents of every key in ``workers/``, ``revoked/`` and
        ``operators/``: it changes when a key is enrolled, revoked, removed, or overwritten or
        emptied in place (which a folder's modification time does not show). Cheap enough to
        take every half second: each file is read up to ``KEY_FILE_READ_BYTES``, its size
        counted beyond."""
        digest = hashes.Hash(hashes.SHA256())
        for sub in ("workers", "revoked", "operators"):
            folder = self.root / sub
            try:
                names = sorted(p.name for p in folder.iterdir() if p.suffix == ".pub")
            except OSError:  # no such folder (a worker bundle, a relay without operators)
                continue
            for name in names:
                digest.update(f"{sub}/{name}\0".encode())
                try:
                    with open(folder / name, "rb") as f:
                        data = f.read(KEY_FILE_READ_BYTES)
                        size = os.fstat(f.fileno()).st_size
                except OSError as exc:  # unreadable now: the key loads as absent, which counts
                    data, size = f"unreadable: {exc.errno}".encode(), -1
                digest.update(len(data).to_bytes(8, "big") + data + size.to_bytes(8, "big", signed=True))
        return digest.finalize()


def _read_password(root: Path) -> str:
    try:
        pw = (root / "password").read_bytes().decode("utf-8").strip()
    except FileNotFoundError:
        raise UserError(f"no 'password' file in {root}: run `rulka keys generate` or copy the worker bundle") from None
    except OSError as exc:
        raise UserError(f"cannot read {root / 'password'}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        pw = ""
    if not pw or "\n" in pw or not pw.isprintable():
        raise UserError(f"{root / 'password'} is empty or malformed: {_DAMAGED}")
    return pw


def _load_certificate(path: Path) -> x509.Certificate:
    data = _read_file(path, "certificate")
    try:
        return x509.load_pem_x509_certificate(data)
    except ValueError:
        raise UserError(f"{path} is not a PEM certificate (damaged or wrong file): {_DAMAGED}") from None


def check_certificate(path: Path) -> None:
    """Raise UserError unless ``path`` holds a readable PEM certificate (the CA a client trusts)."""
    if not Path(path).exists():
        raise UserError(f"{path} is missing: copy the whole worker bundle or keys folder")
    _load_certificate(path)


def check_server_tls(folder: Path) -> None:
    """Raise UserError (one line) unless ``folder`` holds the relay's certificate and the private
    key that belongs to it, both readable."""
    for name in ("certificate.pem", "key.pem"):
        if not (folder / name).exists():
            raise UserError(f"{folder / name} is missing: the server needs the keys folder from `rulka keys generate`")
    cert = _load_certificate(folder / "certificate.pem")
    key = _load_private(folder / "key.pem")
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if key.public_key().public_bytes(*spki) != cert.public_key().public_bytes(*spki):  # type: ignore[attr-defined]
        raise UserError(f"{folder / 'key.pem'} is not the key of {folder / 'certificate.pem'}: copy both from the "
                        "same `rulka keys generate` folder")


def load_credentials(path: str | os.PathLike[str], role: str) -> Credentials:
    """Load the credentials ``role`` ("trainer", "server", "worker" or "operator") needs from ``path``.

    A worker reads a bundle folder (made by ``rulka keys add-worker``), an operator its bundle
    (``rulka keys add-operator``); trainer and server read the folder made by ``rulka keys
    generate``. Raises UserError naming what is missing.
    """
    root = Path(path).expanduser()
    if not root.is_dir():
        raise UserError(f"keys folder {root} does not exist (make one with `rulka keys generate`)")
    password = _read_password(root)
    trainer_public = load_ed25519_public(root / "trainer.pub")
    client_dir = root / "client"
    if role in ("worker", "trainer", "operator"):
        check_certificate(client_dir / "certificate.pem")
    if role in ("worker", "operator"):
        if not (root / f"{role}.key").exists():
            raise UserError(f"{root} is not a {role} bundle (no {role}.key): use the folder "
                            f"`rulka keys add-{role} NAME` printed")
        name = _read_text(root / f"{role}.name", "name file").strip() if (root / f"{role}.name").exists() else ""
        check_worker_name(name)
        identity = OPERATOR_PREFIX + name if role == "operator" else name
        return Credentials(root, identity, password, client_dir, None, trainer_public,
                           load_ed25519_private(root / f"{role}.key"))
    if role == "trainer":
        return Credentials(root, "trainer", password, client_dir, root / "server", trainer_public,
                           load_ed25519_private(root / "trainer.key"))
    if role == "server":
        check_server_tls(root / "server")
        return Credentials(root, "server", password, client_dir, root / "server", trainer_public, None)
    raise ValueError(f"unknown role {role!r}")
