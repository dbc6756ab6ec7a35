from __future__ import annotations

import ipaddress
import stat

import pytest
from cryptography import x509

from rulka.cli import main as rulka_main
from rulka.errors import UserError
from rulka.net.keys import add_worker, generate_keys, list_workers, load_credentials, revoke_worker


def mode(p):
    return stat.S_IMODE(p.stat().st_mode)


def test_generate_writes_private_files_and_sans(tmp_path):
    out = tmp_path / "keys"
    generate_keys(out, ["box.lan", "10.0.0.5"])
    for f in ("ca.pem", "ca.key", "server/key.pem", "server/certificate.pem", "client/certificate.pem",
              "password", "trainer.key", "trainer.pub"):
        assert mode(out / f) == 0o600, f
    for d in (out, out / "server", out / "client", out / "workers"):
        assert mode(d) == 0o700
    cert = x509.load_pem_x509_certificate((out / "server/certificate.pem").read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) == {"box.lan", "localhost"}
    assert set(san.get_values_for_type(x509.IPAddress)) == {ipaddress.ip_address("10.0.0.5"),
                                                            ipaddress.ip_address("127.0.0.1")}
    ca = x509.load_pem_x509_certificate((out / "ca.pem").read_bytes())
    cert.verify_directly_issued_by(ca)
    assert (out / "client/certificate.pem").read_bytes() == (out / "ca.pem").read_bytes()
    assert len((out / "password").read_text()) >= 32


def test_generate_refuses_to_overwrite_without_force(tmp_path):
    generate_keys(tmp_path / "k", ["h"])
    pw = (tmp_path / "k/password").read_bytes()
    with pytest.raises(UserError, match="--force"):
        generate_keys(tmp_path / "k", ["h"])
    assert (tmp_path / "k/password").read_bytes() == pw
    generate_keys(tmp_path / "k", ["h"], force=True)
    assert (tmp_path / "k/password").read_bytes() != pw


def test_worker_bundle_has_no_trainer_secret_and_loads(tmp_path):
    keys = tmp_path / "keys"
    generate_keys(keys, ["h"])
    bundle = add_worker(keys, "pc-1")
    names = sorted(str(p.relative_to(bundle)) for p in bundle.rglob("*") if p.is_file())
    assert names == ["client/certificate.pem", "password", "trainer.pub", "worker.key", "worker.name"]
    assert all(mode(p) == 0o600 for p in bundle.rglob("*") if p.is_file())
    creds = load_credentials(bundle, "worker")
    assert creds.identity == "pc-1" and creds.password == (keys / "password").read_text()
    trainer = load_credentials(keys, "trainer")
    assert set(trainer.worker_keys()) == {"pc-1"}
    # the worker's key is the one the trainer has on file
    sig = creds.signing_key.sign(b"m")
    trainer.worker_keys()["pc-1"].verify(sig, b"m")
    with pytest.raises(UserError, match="already enrolled"):
        add_worker(keys, "pc-1")


def test_revoke_and_list(tmp_path):
    keys = tmp_path / "keys"
    generate_keys(keys, ["h"])
    add_worker(keys, "a")
    add_worker(keys, "b")
    revoke_worker(keys, "a")
    assert list_workers(keys) == {"a": "revoked", "b": "enrolled"}
    assert set(load_credentials(keys, "trainer").worker_keys()) == {"b"}
    assert not (keys / "bundles/a").exists()
    with pytest.raises(UserError):
        revoke_worker(keys, "a")


@pytest.mark.parametrize("name", ["", "trainer", "a/b", "../x", "x" * 65])
def test_bad_worker_names(tmp_path, name):
    generate_keys(tmp_path / "k", ["h"])
    with pytest.raises(UserError):
        add_worker(tmp_path / "k", name)


def test_load_errors_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_credentials(tmp_path / "nope", "trainer")
    generate_keys(tmp_path / "k", ["h"])
    with pytest.raises(UserError, match="not a worker bundle"):
        load_credentials(tmp_path / "k", "worker")


def test_cli(tmp_path, capsys):
    out = tmp_path / "keys"
    assert rulka_main(["keys", "generate", "--out", str(out), "--host", "example.org"]) == 0
    assert rulka_main(["keys", "add-worker", "pc1", "--dir", str(out)]) == 0
    assert rulka_main(["keys", "list", "--dir", str(out)]) == 0
    assert "pc1\tenrolled" in capsys.readouterr().out
    assert rulka_main(["keys", "generate", "--out", str(out)]) == 2
    assert "error:" in capsys.readouterr().err
    assert rulka_main(["keys", "revoke-worker", "pc1", "--dir", str(out)]) == 0


def test_keys_list_shows_operators_beside_workers_with_fingerprints(tmp_path, capsys):
    """`rulka keys list` (issue 10): operator keys were missing; each line is role, name, state
    and the fingerprint of the key the bundle holds, so a bundle can be matched to its line."""
    from rulka.net.keys import add_operator, key_fingerprint, load_ed25519_private, load_ed25519_public

    keys = tmp_path / "keys"
    generate_keys(keys, ["h"])
    add_worker(keys, "pc1")
    add_worker(keys, "pc2")
    revoke_worker(keys, "pc2")
    add_operator(keys, "alice")
    (keys / "workers" / "broken.pub").write_text("not a key")
    assert rulka_main(["keys", "list", "--dir", str(keys)]) == 0
    lines = capsys.readouterr().out.splitlines()

    def fp(bundle, kind):
        return key_fingerprint(load_ed25519_private(keys / bundle / f"{kind}.key").public_key())

    assert lines == ["role\tname\tstate\tfingerprint",
                     f"operator\talice\tenrolled\t{fp('operator_bundles/alice', 'operator')}",
                     "worker\tbroken\tenrolled\tunreadable",
                     f"worker\tpc1\tenrolled\t{fp('bundles/pc1', 'worker')}",
                     f"worker\tpc2\trevoked\t{key_fingerprint(load_ed25519_public(keys / 'revoked' / 'pc2.pub'))}"]
    assert len({line.split("\t")[3] for line in lines[1:]}) == 4
