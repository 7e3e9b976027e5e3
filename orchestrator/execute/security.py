"""TLS for scheduler, workers and client: a Dask ``Security`` from the spec or the command line.

Each side has one certificate and key signed by the cluster's CA — the spec's
``cluster.tls: {ca_file, cert, key}``, or ``--tls-ca-file/--tls-cert/--tls-key``
— and uses it in every role Dask knows (scheduler, worker, client). Dask's TLS
is mutual: each end checks the other's certificate against the CA, so a
client or worker without a certificate signed by it is refused, and with TLS
configured nothing is sent unencrypted (``require_encryption``).

Paths in the spec are relative to the spec's directory; paths given on the
command line are relative to the current directory. A flag overrides the
spec's field of the same name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..errors import RunError, UsageError
from ..spec.records import Tls
from ..spec.validate import scheduler_problem

FLAGS = {"ca_file": "--tls-ca-file", "cert": "--tls-cert", "key": "--tls-key"}


@dataclass(frozen=True)
class TlsFiles:
    """Absolute paths of the CA certificate, this side's certificate and its key (PEM)."""

    ca_file: str
    cert: str
    key: str


def tls_files(tls: Tls | None, spec_dir: str, ca_file: str | None = None, cert: str | None = None,
              key: str | None = None) -> TlsFiles | None:
    """The TLS files in force: the spec's ``cluster.tls``, overridden field by field by flags; or None."""
    flags = {"ca_file": ca_file, "cert": cert, "key": key}
    given = [name for name, value in flags.items() if value]
    if tls is None and given and len(given) < 3:
        missing = " and ".join(FLAGS[name] for name, value in flags.items() if not value)
        raise UsageError(f"{', '.join(FLAGS[g] for g in given)} needs {missing} too "
                         "(or cluster.tls: {ca_file, cert, key} in the spec)")
    if tls is None and not given:
        return None
    chosen: dict[str, str] = {}
    for name, value in flags.items():
        if value:
            chosen[name] = os.path.abspath(value)
        else:
            assert tls is not None
            chosen[name] = os.path.abspath(os.path.join(spec_dir, getattr(tls, name)))
    for name, path in chosen.items():
        if not os.path.isfile(path):
            source = FLAGS[name] if flags[name] else f"cluster.tls.{name}"
            raise RunError(f"TLS file not found: {path} ({source})")
    return TlsFiles(**chosen)


def make_security(files: TlsFiles | None) -> Any:
    """A ``distributed.Security`` using ``files`` for every role, or None without TLS."""
    if files is None:
        return None
    import ssl

    from distributed import Security

    security = Security(tls_ca_file=files.ca_file, require_encryption=True,
                        tls_client_cert=files.cert, tls_client_key=files.key,
                        tls_scheduler_cert=files.cert, tls_scheduler_key=files.key,
                        tls_worker_cert=files.cert, tls_worker_key=files.key)
    try:  # load the files now: a bad PEM file is an error here, not a hang at connect time
        security.get_connection_args("client")
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise RunError(f"cannot use the TLS files (CA {files.ca_file}, certificate {files.cert}, "
                       f"key {files.key}): {exc}") from None
    return security


def security_for(tls: Tls | None, spec_dir: str, ca_file: str | None = None, cert: str | None = None,
                 key: str | None = None) -> Any:
    """``make_security(tls_files(...))``: the Dask ``Security`` of a run or a worker launcher."""
    return make_security(tls_files(tls, spec_dir, ca_file, cert, key))


def refused(address: str, seconds: float = 2.0) -> bool:
    """True when nothing listens at the scheduler's address (its host answers, but refuses).

    Dask's own connect retries a refused connection until its timeout (30 s by
    default) and then says "Timed out"; a refusal is known at once and says more.
    Anything else (a host that does not answer, a name that does not resolve) is
    left to Dask, which knows how to wait for a scheduler that is starting.
    """
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:  # not a port: validation says so; Dask will too
        return False
    if host is None or port is None:
        return False
    try:
        with socket.create_connection((host, port), timeout=seconds):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


def scheduler_address(address: str, tls: object) -> str:
    """The address to dial: ``tls://`` added to a bare ``host:port`` under TLS; mismatches are errors.

    ``tls`` is anything but None when TLS is configured (a ``Security`` or :class:`TlsFiles`).
    """
    address = address.strip()
    found = scheduler_problem(address)
    if found is not None:  # --scheduler is not checked with the spec: say it here, not as Dask's ValueError
        raise RunError(f"{found[0]} ({found[1]})")
    scheme, sep, _ = address.partition("://")
    if tls is not None:
        if not sep:
            return f"tls://{address}"
        if scheme != "tls":
            raise RunError(f"TLS is configured, but the scheduler address {address} is not tls:// "
                           f"(write tls://{address.partition('://')[2]})")
    elif sep and scheme == "tls":
        raise RunError(f"the scheduler address {address} needs TLS: give cluster.tls in the spec "
                       "or --tls-ca-file, --tls-cert and --tls-key")
    return address
