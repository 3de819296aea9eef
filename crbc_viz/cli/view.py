"""``crbc-viz view PATH [--port P] [--host H] [--map T=P ... | --map-file F]``: serve the app on
PATH, a rollout log file, a
folder of trainer dumps or a log store, at http://127.0.0.1:P (the app's pages ship inside the
package: no checkout needed, ``pip install 'crbc-viz[app]'``).

PATH's folder (a file's folder; a folder or store itself) is added to the data folders this
server may read (``CRBC_VIZ_DATA_ROOTS``), and the printed link opens the app on PATH: a file or
an rLLM episodes folder on the Graph page, a store on the Across-training page, another folder
of trainer dumps (one log per train step) ingested into a temporary store (removed when the
server stops) and opened on Across training. ``--map`` / ``--map-file`` read PATH through a field
map (`crbc_viz.io.importers.fieldmap`), as ``ingest`` does: the link carries it as the Data
page's Import options carry theirs (``file=import:format=fieldmap&field_map=...::PATH``), and a
bad map is one line before the server starts. The server settings
are the package's ``streamlit.toml`` (those of the checkout's ``.streamlit/config.toml``),
passed as ``streamlit run`` flags.

``--host`` other than loopback serves the app to every machine that can reach this one, with
no login: one line on stderr says so. Exit status: Streamlit's when it stops (Ctrl-C: 130);
2 when PATH is missing, the port is in use or Streamlit is not installed (one line each)."""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from urllib.parse import urlencode

from ..safetext import term
from ._common import UsageError, add_map_arguments, field_map

HELP = "serve the app on a log file, a folder of trainer dumps or a log store"

DEFAULT_PORT = 8501
DEFAULT_HOST = "127.0.0.1"
#: Settings of the packaged ``streamlit.toml`` that `view` replaces with its own.
_OURS = {"server.port", "server.address", "server.headless", "server.fileWatcherType"}


def add_arguments(p) -> None:
    p.epilog = (
        "exit status: the server's when it stops (130 after Ctrl-C); 2 when PATH is missing, "
        "the port is in use or streamlit is not installed. --host other than 127.0.0.1 lets "
        "anyone who reaches this machine read the data under PATH's folder (no login)."
    )
    p.add_argument(
        "path", metavar="PATH", help="a rollout log file, a folder of trainer dumps or a log store"
    )
    p.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"the port to serve on (default {DEFAULT_PORT})"
    )
    p.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"the address to serve on (default {DEFAULT_HOST}: this machine only; 0.0.0.0 shares it)",
    )
    add_map_arguments(p)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only.

    >>> [is_loopback(h) for h in ("127.0.0.1", "localhost", "::1", "0.0.0.0", "192.168.1.5")]
    [True, True, True, False, False]
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def mapped_key(path: Path, fm) -> str:
    """The app's reference to ``path`` read through the field map ``fm`` (None: ``path``
    itself): the key the Data page's Import options make (``import:<options>::<path>``,
    `crbc_viz.ui.sandbox.read_key`), with the format ``fieldmap`` and the map's text."""
    if fm is None:
        return str(path)
    from ..io.importers.fieldmap import NAME

    return "import:" + urlencode([("format", NAME), ("field_map", str(fm))]) + "::" + str(path)


def target(path: Path, scratch: Path, fm=None) -> tuple[list[Path], str]:
    """The data folders to allow and the app's page + query for ``path`` (resolved, existing):
    a store on the Across-training page; a file or a folder read as one source (rLLM
    episodes) on the Graph page; another folder of trainer dumps ingested first into a
    store in ``scratch`` (an empty folder the caller removes), opened on Across training.
    ``fm``: a field map every log is read through (`mapped_key`; ingested with it).

    Raises:
        LoadError: a folder with no log an importer reads (naming each file).
        UsageError: a field map with a store.
    """
    if path.is_dir() and (path / "store.json").is_file():
        if fm is not None:
            raise UsageError(
                "--map / --map-file: read a log file through a field map; a store holds canonical rows"
            )
        return [path], "training?" + urlencode({"store": str(path)})
    if path.is_file():
        return [path.parent], "graph?" + urlencode({"file": mapped_key(path, fm)})
    from ..io.importers import expand_sources
    from ..io.importers.fieldmap import NAME
    from ..store import ingest

    sources = expand_sources([path], "auto" if fm is None else NAME)
    if len(sources) == 1 and Path(sources[0].path).resolve() == path:
        return [path], "graph?" + urlencode({"file": mapped_key(path, fm)})
    store = scratch / "store"
    report = ingest(store, sources, import_options=None if fm is None else {"field_map": fm})
    print(
        f"crbc-viz view: {len(report.sources)} log(s) of {term(str(path))} read into a temporary store",
        flush=True,
    )
    return [path, scratch], "training?" + urlencode({"store": str(store)})


def streamlit_flags() -> list[str]:
    """The packaged ``streamlit.toml`` as ``--section.key value`` flags (less `_OURS`)."""
    from ..app import STREAMLIT_CONFIG

    with open(STREAMLIT_CONFIG, "rb") as f:
        config = tomllib.load(f)
    flags = []
    for section, values in config.items():
        for key, value in values.items():
            if f"{section}.{key}" in _OURS:
                continue
            text = ("true" if value else "false") if isinstance(value, bool) else str(value)
            flags += [f"--{section}.{key}", text]
    return flags


def check_port(host: str, port: int) -> None:
    """Raise `UsageError` (one line) when ``host:port`` cannot be listened on (a server there)."""
    if not 1 <= port <= 65535:
        raise UsageError(f"--port {port}: give a port in 1..65535")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise UsageError(f"--host {term(host)}: not an address of this machine ({exc.strerror})") from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed server's TIME_WAIT is no clash
        try:
            s.bind(addr)
        except OSError as exc:
            raise UsageError(
                f"port {port} on {term(host)} is in use ({exc.strerror}): give another with --port"
            ) from None


def run(args) -> int:
    from .._extras import ensure

    ensure("streamlit", "crbc-viz view")
    path = Path(args.path).expanduser()
    if not path.exists():
        raise UsageError(f"{term(args.path)}: no such file or folder")
    path = path.resolve()
    fm = field_map(args)  # a bad map: one line, before the port is checked or a log read
    check_port(args.host, args.port)
    with tempfile.TemporaryDirectory(prefix="crbc-viz-view-") as scratch:
        roots, page = target(path, Path(scratch).resolve(), fm)
        if not is_loopback(args.host):
            print(
                f"warning: --host {term(args.host)} serves the app to every machine that can reach this "
                f"one, with no login: anyone who opens it reads the data under {term(str(roots[0]))}, "
                "uploads files and runs estimators on this server",
                file=sys.stderr,
            )
        env = dict(os.environ)
        env["CRBC_VIZ_DATA_ROOTS"] = os.pathsep.join(
            p for p in (env.get("CRBC_VIZ_DATA_ROOTS", ""), *map(str, roots)) if p
        )
        return _serve(args.host, args.port, page, env)


def _serve(host: str, port: int, page: str, env: dict) -> int:
    from ..app import MAIN_SCRIPT

    cmd = [sys.executable, "-m", "streamlit", "run", str(MAIN_SCRIPT), *streamlit_flags()]
    cmd += ["--server.address", host, "--server.port", str(port), "--server.headless", "true"]
    cmd += ["--server.fileWatcherType", "none"]
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    shown = f"[{shown}]" if ":" in shown else shown
    print(f"crbc-viz view: open http://{shown}:{port}/{term(page)}  (Ctrl-C stops the server)", flush=True)
    proc = subprocess.Popen(cmd, env=env)
    # SIGTERM here stops the server too (and the caller's temporary store is removed).
    previous = signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
    try:
        return proc.wait()
    except KeyboardInterrupt:  # the server got the same Ctrl-C: let it stop
        try:
            proc.wait(timeout=10)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            proc.kill()
            proc.wait()
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
