"""One line, exit 2, for the mistakes an operator makes first when starting a component.

Each check says what is wrong and what to do. A traceback is printed only with `--debug`
(or a debug `-v` level); any other failure is one line too, exit 1, naming `--debug`.
"""

import asyncio
import errno
import logging
import os
import socket
import ssl
from collections.abc import Coroutine
from typing import Any, NoReturn

import typer

USAGE_EXIT = 2


def fail(command: str, message: str, code: int = USAGE_EXIT) -> NoReturn:
    typer.echo(f"pyhami {command}: {message}", err=True)
    raise typer.Exit(code)


def check_port_free(host: str, port: int, flag: str, command: str) -> None:
    """Refuse to start when `host:port` is taken, before connecting anywhere (port 0: any)."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
        try:
            probe.bind((host, port))
        except OSError as err:
            fail(command, f"{flag} {host}:{port}: {_port_problem(err)}")


def _port_problem(err: OSError) -> str:
    if err.errno == errno.EADDRINUSE:
        return "the port is in use by another process: stop it or choose another port"
    if err.errno == errno.EACCES:
        return "permission denied (ports below 1024 need privileges): choose a port >= 1024"
    if err.errno == errno.EADDRNOTAVAIL:
        return "no interface of this host has that address: use 0.0.0.0 or one of its addresses"
    return f"cannot listen: {err.strerror or err}"


def check_certificate(cert_file: str, key_file: str, flags: str, command: str) -> None:
    """Both files readable and a matching PEM certificate and key (none: plain HTTP)."""
    if not cert_file or not key_file:
        return
    for path in (cert_file, key_file):
        try:
            with open(path, "rb"):
                pass
        except OSError as err:
            fail(command, f"cannot read {path}: {err.strerror}: check {flags} and the mount")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert_file, key_file)
    except ssl.SSLError as err:
        fail(
            command,
            f"{cert_file} and {key_file} are not a PEM certificate and its key "
            f"({err.reason or err}): check {flags}",
        )


def kubeconfig_problem(path: str | None) -> str | None:
    """Why the kubeconfig named by `path` (else $KUBECONFIG, a list) cannot be read, or None."""
    named = path or os.environ.get("KUBECONFIG", "")
    for file in filter(None, named.split(os.pathsep)):
        try:
            with open(file, "rb"):
                pass
        except OSError as err:
            why = err.strerror or err
            return f"kubeconfig {file}: cannot read: {why}: check --kubeconfig or KUBECONFIG"
    return None


def check_kubeconfig(path: str | None, command: str) -> None:
    """Refuse to start on a named kubeconfig that cannot be read; quiet the search otherwise."""
    problem = kubeconfig_problem(path)
    if problem is not None:
        fail(command, problem)
    quiet_kubeconfig_search()


def quiet_kubeconfig_search() -> None:
    """kubernetes-asyncio warns for each place it looks for a kubeconfig; the one-line error
    that follows says what matters."""
    logging.getLogger("kubernetes_asyncio.config.kube_config").setLevel(logging.ERROR)


def startup_problem(err: BaseException) -> str | None:
    """The one-line description of a known startup failure, or None."""
    from kubernetes_asyncio.config import ConfigException

    if isinstance(err, ConfigException):
        return (
            f"no cluster to talk to ({str(err).rstrip('.')}): set KUBECONFIG to a kubeconfig "
            "file, or run in a pod with a service account (in-cluster config)"
        )
    if isinstance(err, OSError) and err.errno in (errno.EADDRINUSE, errno.EACCES):
        return f"{err.strerror}: {_port_problem(err)}"
    return None


def run_service(
    command: str,
    main: Coroutine[Any, Any, None],
    *,
    debug: bool,
    debug_hint: str = "--debug",
    usage_errors: tuple[type[Exception], ...] = (),
) -> None:
    """Run a component until it stops; a startup failure is one line unless `debug`.

    `usage_errors` carry their own message naming the bad flag or file: exit 2 with it."""
    try:
        asyncio.run(main)
    except KeyboardInterrupt:
        pass
    except usage_errors as err:
        fail(command, str(err))
    except Exception as err:
        if debug:
            raise
        known = startup_problem(err)
        if known is not None:
            fail(command, known)
        what = str(err) if type(err) is RuntimeError else f"{type(err).__name__}: {err}"
        fail(command, f"{what} ({debug_hint} shows where)", code=1)
