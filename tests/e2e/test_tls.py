"""TLS end to end with the real binary: a coordinator serving mutual TLS (certificates
made here with `cryptography`), an agent and a worker over https://, a run submitted
through the CLI, read back through pyarrow.flight (grpc+tls://) and grpcio
(ssl_channel_credentials); plaintext, certificate-less and downgrade attempts fail."""
import datetime
import getpass
import ipaddress
import os
import time

import grpc
import pyarrow.flight as flight
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from conftest import Cluster, duck_count


def _cert(subject_cn, key, issuer_cn, issuer_key, *, ca=False, sans=(), usage=None):
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder()
         .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject_cn)]))
         .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_cn)]))
         .public_key(key.public_key())
         .serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(minutes=5))
         .not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        b = b.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                          content_commitment=False, key_encipherment=False,
                                          data_encipherment=False, key_agreement=False,
                                          encipher_only=False, decipher_only=False), critical=True)
    if sans:
        names = []
        for s in sans:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(s)))
            except ValueError:
                names.append(x509.DNSName(s))
        b = b.add_extension(x509.SubjectAlternativeName(names), critical=False)
    if usage:
        b = b.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _pem(c):
    return c.public_bytes(serialization.Encoding.PEM)


def _key_pem(k):
    return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                           serialization.NoEncryption())


@pytest.fixture
def pki(tmp_path):
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate."""
    d = tmp_path / "pki"
    d.mkdir()
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("benchlake e2e CA", ca_key, "benchlake e2e CA", ca_key, ca=True)
    srv_key = ec.generate_private_key(ec.SECP256R1())
    srv = _cert("coordinator", srv_key, "benchlake e2e CA", ca_key, sans=("127.0.0.1", "localhost"),
                usage=ExtendedKeyUsageOID.SERVER_AUTH)
    cli_key = ec.generate_private_key(ec.SECP256R1())
    cli = _cert("a1", cli_key, "benchlake e2e CA", ca_key, sans=("a1",), usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    files = {"ca": _pem(ca), "server": _pem(srv), "server_key": _key_pem(srv_key),
             "client": _pem(cli), "client_key": _key_pem(cli_key)}
    paths = {}
    for name, data in files.items():
        p = d / f"{name}.pem"
        p.write_bytes(data)
        if name.endswith("_key"):
            os.chmod(p, 0o600)
        paths[name] = str(p)
    paths["bytes"] = files
    return paths


def _client_flags(pki, cert=True):
    f = ["--tls-ca", pki["ca"]]
    if cert:
        f += ["--tls-client-cert", pki["client"], "--tls-client-key", pki["client_key"]]
    return f


def test_cluster_over_mutual_tls(tmp_path, pb, pki):
    c = Cluster(tmp_path)
    url = f"https://127.0.0.1:{c.port}"
    try:
        c._spawn("coordinator", ["coordinator", "--listen", c.addr, "--state", str(tmp_path / "state.db"),
                                 "--lake", c.lake, "--tls-cert", pki["server"], "--tls-key", pki["server_key"],
                                 "--tls-client-ca", pki["ca"]])
        c.wait_port()
        c._spawn("a1", ["agent", "--coordinator", url, "--name", "a1", "--catalog", str(tmp_path / "catalog.toml"),
                        "--work-dir", str(tmp_path / "work" / "a1"), "--poll-ms", "100",
                        "--run-as", getpass.getuser(), *_client_flags(pki)])
        # The worker takes its TLS settings from the environment.
        c._spawn("w1", ["worker", "--coordinator", url, "--name", "w1", "--lake", c.lake, "--concurrency", "1",
                        "--scratch", str(tmp_path / "scratch")],
                 {"BENCHLAKE_TLS_CA": pki["ca"], "BENCHLAKE_TLS_CLIENT_CERT": pki["client"],
                  "BENCHLAKE_TLS_CLIENT_KEY": pki["client_key"]})

        # grpcio with TLS credentials and the client certificate.
        b = pki["bytes"]
        creds = grpc.ssl_channel_credentials(root_certificates=b["ca"], private_key=b["client_key"],
                                             certificate_chain=b["client"])
        ch = grpc.secure_channel(f"127.0.0.1:{c.port}", creds)
        clu = pb["runs_grpc"].ClusterServiceStub(ch)
        runs = pb["runs_grpc"].RunServiceStub(ch)
        deadline = time.time() + 30
        while True:
            try:
                agents = clu.ListAgents(pb["runs"].ListAgentsRequest(), timeout=5).agents
                if any(a.name == "a1" and a.state == "ONLINE" for a in agents):
                    break
            except grpc.RpcError:
                pass
            assert time.time() < deadline, "agent a1 did not register over TLS:\n" + c.log("a1")
            time.sleep(0.1)

        # The CLI over https:// with the CA and the client certificate.
        out = c.cli("run", "submit", "hostinfo", "--watch", "--coordinator", url, *_client_flags(pki)).stdout
        assert "SUCCEEDED" in out, out
        run_id = out.split()[0]
        d = runs.GetRun(pb["runs"].GetRunRequest(run_id=run_id), timeout=10)
        assert d.run.state == pb["common"].RUN_STATE_SUCCEEDED

        # pyarrow.flight over grpc+tls:// on the same port.
        fc = flight.FlightClient(f"grpc+tls://127.0.0.1:{c.port}", tls_root_certs=b["ca"],
                                 cert_chain=b["client"], private_key=b["client_key"])
        only = flight.FlightDescriptor.for_command('{"table": "node_facts", "run_id": "%s"}' % run_id)
        t = fc.do_get(fc.get_flight_info(only).endpoints[0].ticket).read_all()
        assert t.num_rows == 1 and set(t.column("run_id").to_pylist()) == {run_id}
        assert duck_count(c.lake, "node_facts", run_id) == 1

        # Without a client certificate: refused, with an error that says why.
        r = c.cli("run", "list", "--coordinator", url, *_client_flags(pki, cert=False), check=False)
        assert r.returncode != 0 and "client certificate" in r.stderr, r.stderr
        no_cert = grpc.secure_channel(f"127.0.0.1:{c.port}", grpc.ssl_channel_credentials(root_certificates=b["ca"]))
        with pytest.raises(grpc.RpcError) as e:
            pb["runs_grpc"].ClusterServiceStub(no_cert).ListAgents(pb["runs"].ListAgentsRequest(), timeout=5)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        # Plaintext against the TLS port: refused (CLI, grpcio, Flight).
        for addr in (c.addr, f"http://{c.addr}"):
            r = c.cli("run", "list", "--coordinator", addr, check=False)
            assert r.returncode != 0, r.stdout
        with pytest.raises(grpc.RpcError):
            pb["runs_grpc"].ClusterServiceStub(grpc.insecure_channel(c.addr)).ListAgents(
                pb["runs"].ListAgentsRequest(), timeout=5)
        with pytest.raises(flight.FlightError):
            flight.connect(f"grpc://{c.addr}").list_flights(options=flight.FlightCallOptions(timeout=5)).__next__()
        # Trusting no CA given: the system roots do not know ours.
        r = c.cli("run", "list", "--coordinator", url, check=False,
                  env={"SSL_CERT_FILE": pki["client"]})
        assert r.returncode != 0 and "invalid peer certificate" in r.stderr, r.stderr
    finally:
        c.stop()
    assert "TLS handshake failed" in c.log("coordinator")


def test_https_never_downgrades_to_a_plaintext_coordinator(cluster, pki):
    cluster.coordinator()
    r = cluster.cli("run", "list", "--coordinator", f"https://{cluster.addr}", "--tls-ca", pki["ca"], check=False)
    assert r.returncode != 0, r.stdout
    assert "TLS handshake" in r.stderr and "does not speak TLS" in r.stderr, r.stderr
    # The same address in plaintext works.
    cluster.cli("run", "list", "--coordinator", cluster.addr)


def test_coordinator_refuses_a_certificate_without_its_key(tmp_path, pki):
    c = Cluster(tmp_path)
    r = c.cli("coordinator", "--listen", c.addr, "--state", str(tmp_path / "s.db"), "--lake", c.lake,
              "--tls-cert", pki["server"], check=False)
    assert r.returncode != 0 and "--tls-key" in r.stderr, r.stderr
    # A key readable by others earns a warning (the coordinator still starts).
    os.chmod(pki["server_key"], 0o644)
    c._spawn("coordinator", ["coordinator", "--listen", c.addr, "--state", str(tmp_path / "state.db"),
                             "--lake", c.lake, "--tls-cert", pki["server"], "--tls-key", pki["server_key"]])
    try:
        c.wait_port()
        deadline = time.time() + 10
        while "readable by group or others" not in c.log("coordinator"):
            assert time.time() < deadline, c.log("coordinator")
            time.sleep(0.05)
    finally:
        c.stop()
