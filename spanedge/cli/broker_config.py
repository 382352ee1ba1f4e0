"""The ``spanedge broker-config`` command: per-site MQTT identities, ACLs and Mosquitto configs from sites.yaml.

Files written to ``--out`` (see :mod:`spanedge.broker_acl` for what the ACLs allow):

* ``passwords``: the Mosquitto password file of every identity (hashed; one file for every broker);
* ``credentials/<user>``: each identity's password in clear (mode 0600), to hand to that site
  only, in the variable its ``password_env`` names; kept when the command runs again, so
  re-running it rotates nothing (delete a file to give that identity a new password);
* ``acl`` and ``mosquitto.conf``: the ACL and a config snippet of the hub's broker;
* ``<site>/acl`` and ``<site>/mosquitto.conf`` for the broker of every other address in sites.yaml
  (named after its first site).
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from spanedge.cli.errors import fail, write_output
from spanedge.cli.params import PATH, Command, option


@click.command("broker-config", cls=Command)
@option("--sites", type=PATH, required=True, help="the fleet's sites.yaml")
@option("--out", type=PATH, required=True, help="directory for the password file, credentials, ACLs and configs")
@option("--port", default=8883, help="the TLS listener port in the mosquitto.conf snippets")
@option("--cafile", default="/etc/mosquitto/certs/ca.pem", help="CA certificate path on the broker")
@option("--certfile", default="/etc/mosquitto/certs/server.pem", help="server certificate path on the broker")
@option("--keyfile", default="/etc/mosquitto/certs/server-key.pem", help="server key path on the broker")
@option("--observer", multiple=True, help="a read-only identity (monitoring); repeat for several")
@option(
    "--local-topic",
    multiple=True,
    help="a topic local MQTT sinks publish to on a broker several sites share; repeat for several",
)
def broker_config(
    sites: Path,
    out: Path,
    port: int,
    cafile: str,
    certfile: str,
    keyfile: str,
    observer: tuple[str, ...],
    local_topic: tuple[str, ...],
) -> None:
    """Write Mosquitto password and ACL files giving every site its own MQTT identity (its name).

    A spoke may publish only its own data, dead-letter, heartbeat and probe topics and read only its own plan;
    hubs read and write everything. Each site's processes connect to every broker with their site name as
    username and their password in the variable their sites.yaml's password_env names, over TLS.
    """
    from spanedge.broker_acl import acl_text, broker_groups, identities, mosquitto_conf, new_password, password_file
    from spanedge.errors import SpanEdgeError
    from spanedge.sites import Tier, load_sites

    try:
        fleet = load_sites(sites)
        users = identities(fleet, list(observer))
    except (SpanEdgeError, ValueError) as exc:
        raise fail(exc) from None
    credentials_dir = out / "credentials"
    try:
        credentials_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        msg = f"cannot create {credentials_dir}: {exc.strerror}; pass --out in a writable directory"
        raise fail(msg) from None
    passwords: dict[str, str] = {}
    for user in users:
        path = credentials_dir / user
        if path.is_file() and path.read_text().strip():
            passwords[user] = path.read_text().strip()
            continue
        passwords[user] = new_password()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(passwords[user] + "\n")
    password_path = out / "passwords"
    write_output(password_path, password_file(passwords))
    password_path.chmod(0o600)
    hubs = {s.name for s in fleet.sites.values() if s.tier is Tier.HUB}
    written = []
    top_taken = False
    for local in broker_groups(fleet).values():
        top = bool(hubs & set(local)) and not top_taken  # the (first) hub broker's files go to --out itself
        top_taken = top_taken or top
        directory = out if top else out / local[0]
        directory.mkdir(parents=True, exist_ok=True)
        acl_path = directory / "acl"
        write_output(acl_path, acl_text(fleet, local, observers=list(observer), local_topics=list(local_topic)))
        conf = mosquitto_conf(
            port=port,
            acl_file=str(acl_path.resolve()),
            password_file=str(password_path.resolve()),
            cafile=cafile,
            certfile=certfile,
            keyfile=keyfile,
        )
        write_output(directory / "mosquitto.conf", f"# broker of {', '.join(local)}\n{conf}")
        written.append(f"{directory / 'mosquitto.conf'} (broker of {', '.join(local)})")
    click.echo(f"wrote {password_path} ({len(users)} identities) and credentials in {credentials_dir}")
    for line in written:
        click.echo(f"wrote {line}")
