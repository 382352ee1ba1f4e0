"""The ``spanedge broker-config`` command: per-site MQTT identities, ACLs and whole Mosquitto configs from sites.yaml.

Files written to ``--out`` (see :mod:`spanedge.broker_acl` for what the ACLs allow and
:mod:`spanedge.cli.broker_files` for who owns what):

* ``passwords``: the Mosquitto password file of every identity (hashed; one file for every broker);
* ``credentials/<user>``: each identity's password in clear (mode 0600), to hand to that site
  only, in the variable its ``password_env`` names; kept when the command runs again, so
  re-running it rotates nothing (delete a file to give that identity a new password);
* with ``--identity certificate`` instead: ``certs/<user>/`` with the identity's key, its
  certificate issued by the hub's CA for its name, and the CA certificate, kept in the same way;
* ``acl``, ``mosquitto.conf``, ``tls/`` and ``data/`` of the hub's broker;
* ``<site>/acl``, ``<site>/mosquitto.conf``, ``<site>/tls/`` and ``<site>/data/`` for the broker of every
  other address in sites.yaml (named after its first site).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from spanedge.cli.errors import fail
from spanedge.cli.params import PATH, Command, option

if TYPE_CHECKING:
    from spanedge.ca import CertificateAuthority
    from spanedge.cli.broker_files import BrokerFiles
    from spanedge.sites import Sites


@dataclass(frozen=True)
class Layout:
    """Where the files are here and where the broker finds them, and how its clients log in."""

    out: Path
    broker_dir: Path
    data_dir: Path | None
    bind: str | None
    certificates: bool
    tls_hosts: tuple[str, ...]
    ca_paths: tuple[str, str, str]  # cafile, certfile, keyfile on the broker, without --ca-dir


@click.command("broker-config", cls=Command)
@option("--sites", type=PATH, required=True, help="the fleet's sites.yaml")
@option("--out", type=PATH, required=True, help="directory for the password file, credentials, ACLs and configs")
@option("--bind", help="the address every listener binds to  [default: the broker's host in sites.yaml]")
@option("--ca-dir", type=PATH, help="the hub's CA directory: issue each broker's certificate and refuse revoked sites")
@option("--tls-host", multiple=True, help="another name or address of the brokers in their certificates; repeat")
@option(
    "--identity",
    type=click.Choice(["password", "certificate"]),
    default="password",
    help="how a site proves its name: a password, or a client certificate of the CA whose common name is the site",
)
@option("--broker-dir", type=PATH, help="where the brokers find --out  [default: --out]")
@option("--broker-ca-dir", type=PATH, help="where the brokers find --ca-dir  [default: --ca-dir]")
@option("--data-dir", type=PATH, help="the brokers' persistence directory  [default: data/ beside each config]")
@option(
    "--broker-owner",
    help="USER[:GROUP] the brokers run as, given the files they read  [default: mosquitto when run as root]",
)
@option("--cafile", default="/etc/mosquitto/certs/ca.pem", help="CA certificate path on the broker, without --ca-dir")
@option("--certfile", default="/etc/mosquitto/certs/server.pem", help="server certificate path, without --ca-dir")
@option("--keyfile", default="/etc/mosquitto/certs/server-key.pem", help="server key path, without --ca-dir")
@option("--observer", multiple=True, help="a read-only identity (monitoring); repeat for several")
@option(
    "--local-topic",
    multiple=True,
    help="a topic local MQTT sinks publish to on a broker several sites share; repeat for several",
)
def broker_config(
    sites: Path,
    out: Path,
    bind: str | None,
    ca_dir: Path | None,
    tls_host: tuple[str, ...],
    identity: str,
    broker_dir: Path | None,
    broker_ca_dir: Path | None,
    data_dir: Path | None,
    broker_owner: str | None,
    cafile: str,
    certfile: str,
    keyfile: str,
    observer: tuple[str, ...],
    local_topic: tuple[str, ...],
) -> None:
    """Write a whole Mosquitto config per broker of sites.yaml, giving every site its own MQTT identity (its name).

    Each broker gets one TLS listener on its host and port in sites.yaml, persistence, the queue and
    in-flight limits, no anonymous access, the ACL and, per --identity, the password file or client
    certificates of the hub's CA. A spoke may publish only its own data, dead-letter, heartbeat and probe
    topics and read only its own plan; hubs read and write everything.
    """
    from spanedge.broker_acl import identities
    from spanedge.ca import CertificateAuthority
    from spanedge.cli.broker_files import BrokerFiles, BrokerOwner
    from spanedge.errors import SpanEdgeError
    from spanedge.sites import load_sites

    if identity == "certificate" and ca_dir is None:
        msg = "--identity certificate needs --ca-dir, the hub's CA that issues the sites' certificates"
        raise fail(msg)
    try:
        fleet = load_sites(sites)
        users = identities(fleet, list(observer))
        _check_tls(fleet)
        owner = BrokerOwner.parse(broker_owner) if broker_owner else BrokerOwner.default()
        files = BrokerFiles(owner)
        files.directory(out)
        ca = CertificateAuthority.open(ca_dir) if ca_dir is not None else None
        layout = Layout(
            out=out,
            broker_dir=broker_dir or out.resolve(),
            data_dir=data_dir,
            bind=bind,
            certificates=identity == "certificate",
            tls_hosts=tls_host,
            ca_paths=(cafile, certfile, keyfile),
        )
        if layout.certificates and ca is not None:
            handed = _client_certificates(ca, out / "certs", users)
        else:
            handed = _passwords(files, out, users)
        written = _brokers(fleet, files, layout, ca, broker_ca_dir, observer, local_topic)
    except (SpanEdgeError, ValueError) as exc:
        raise fail(exc) from None
    except OSError as exc:
        msg = f"cannot write {exc.filename}: {exc.strerror}; pass --out in a writable directory"
        raise fail(msg) from None
    click.echo(f"wrote {handed} ({len(users)} identities)")
    for line in written:
        click.echo(f"wrote {line}")
    if owner is not None:
        click.echo(f"the files the brokers read belong to uid {owner.uid}, the account they run as")


def _check_tls(fleet: Sites) -> None:
    for name, site in fleet.sites.items():
        broker = site.mqtt()
        if broker.scheme != "mqtts":
            msg = (
                f"sites.yaml: site {name!r} names broker {broker.url}, without TLS, but the configs written "
                f"listen with TLS only; write it as mqtts://{broker.host}:{broker.port}"
            )
            raise ValueError(msg)


def _passwords(files: BrokerFiles, out: Path, users: list[str]) -> str:
    """Read or make each identity's password (``credentials/<user>``) and write the hashed ``passwords``."""
    from spanedge.broker_acl import new_password, password_file
    from spanedge.private_files import open_private, private_dir

    credentials = private_dir(out / "credentials")
    passwords: dict[str, str] = {}
    for user in users:
        path = credentials / user
        kept = path.read_text().strip() if path.is_file() else ""
        passwords[user] = kept or new_password()
        if not kept:
            with open_private(path, "w") as handle:
                handle.write(passwords[user] + "\n")
    files.secret(out / "passwords", password_file(passwords).encode())
    return f"{out / 'passwords'} and the passwords in {credentials}"


def _client_certificates(ca: CertificateAuthority, certs: Path, users: list[str]) -> str:
    """Issue each identity a key and a client certificate (``certs/<user>/``) unless it holds one."""
    from spanedge.ca import new_request
    from spanedge.private_files import private_dir, write_private

    for user in users:
        directory = private_dir(certs / user)
        if (directory / "cert.pem").is_file() and (directory / "key.pem").is_file():
            continue
        csr, key = new_request(user)
        write_private(directory / "key.pem", key)
        write_private(directory / "cert.pem", ca.issue_client(user, csr))
        write_private(directory / "ca.pem", ca.cert_pem)
    return f"the client certificates in {certs}"


def _brokers(
    fleet: Sites,
    files: BrokerFiles,
    layout: Layout,
    ca: CertificateAuthority | None,
    broker_ca_dir: Path | None,
    observers: tuple[str, ...],
    local_topics: tuple[str, ...],
) -> list[str]:
    """Write the ACL, TLS files and config of each broker; return what was written."""
    from spanedge.broker_acl import acl_text, broker_groups, mosquitto_conf
    from spanedge.sites import Tier

    hubs = {s.name for s in fleet.sites.values() if s.tier is Tier.HUB}
    crl = None
    if ca is not None:
        files.reach_crl(ca.directory)
        crl = str((broker_ca_dir or ca.directory.resolve()) / ca.crl_file.name)
    written = []
    top_taken = False
    for local in broker_groups(fleet).values():
        top = bool(hubs & set(local)) and not top_taken  # the (first) hub broker's files go to --out itself
        top_taken = top_taken or top
        relative = Path() if top else Path(local[0])
        here = files.directory(layout.out / relative)
        there = layout.broker_dir / relative  # the same directory as the broker sees it
        broker = fleet.site(local[0]).mqtt()
        acl = acl_text(fleet, local, observers=list(observers), local_topics=list(local_topics))
        files.secret(here / "acl", acl.encode())
        cafile, certfile, keyfile = layout.ca_paths
        if ca is not None:
            tls = _server_files(ca, files, here / "tls", (broker.host, *layout.tls_hosts))
            cafile, certfile, keyfile = (str(there / "tls" / p.name) for p in tls)
        if layout.data_dir is None:
            files.data_dir(here / "data")
        data = layout.data_dir / relative if layout.data_dir is not None else there / "data"
        conf = mosquitto_conf(
            port=broker.port,
            bind=layout.bind or broker.host,
            acl_file=str(there / "acl"),
            password_file=None if layout.certificates else str(layout.broker_dir / "passwords"),
            cafile=cafile,
            certfile=certfile,
            keyfile=keyfile,
            crlfile=crl,
            certificate_identity=layout.certificates,
            persistence_location=str(data),
            user=files.owner.user if files.owner is not None else None,
        )
        header = f"# Mosquitto broker of {', '.join(local)}, written by 'spanedge broker-config' from sites.yaml.\n"
        files.public(here / "mosquitto.conf", (header + conf).encode())
        written.append(f"{here / 'mosquitto.conf'} (broker of {', '.join(local)}, {broker.host}:{broker.port})")
    return written


def _server_files(ca: CertificateAuthority, files: BrokerFiles, directory: Path, hosts: tuple[str, ...]) -> list[Path]:
    """A fresh server certificate of the CA for ``hosts``: ``[ca.pem, server.pem, server-key.pem]`` in ``directory``."""
    cert, key = ca.issue_server(tuple(dict.fromkeys(hosts)))
    files.directory(directory)
    return [
        files.public(directory / "ca.pem", ca.cert_pem),
        files.public(directory / "server.pem", cert),
        files.secret(directory / "server-key.pem", key),
    ]
