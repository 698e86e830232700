"""`oar demo` and `oar web`: registered into the `oar` command by `add_web_commands`.

Everything heavy (the web framework, the store, torch) is imported inside the commands, so
that `oar --help` and the other subcommands never pay for the web app.
"""
from __future__ import annotations

import argparse
import socket
import time
from dataclasses import dataclass

from oar_attrib.extras import require_extra
from oar_attrib.commands import INTERRUPTED, add_dataclass_args, add_dtype_arg, dataclass_from_args, option
from oar_attrib.console import say
from oar_attrib.errors import OARError

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8765


@dataclass(frozen=True)
class ServeSettings:
    """Where `oar demo` and `oar web` listen (the live attribution's limit, --max-live-tokens,
    is `WebSettings.max_live_tokens`'s flag)."""

    host: str = option(DEFAULT_HOST, f"address to listen on (default: {DEFAULT_HOST}, this machine only)")
    port: int = option(DEFAULT_PORT, f"port to listen on, 0 for any free one (default: {DEFAULT_PORT})")


@dataclass(frozen=True)
class DemoBuild:
    """How `oar demo` makes its store (what the store holds is `demo.DemoConfig`)."""

    rebuild: bool = option(False, "rebuild the cached demo store", action="store_true")
    build_only: bool = option(False, "build the store, print its path, exit", action="store_true")
    no_progress: bool = option(False, "hide the progress bars", action="store_true")


@dataclass(frozen=True, kw_only=True)  # --store, required, comes first
class WebSource:
    """What `oar web` serves: a run store, the model of the live attribution, and `oar align`
    results."""

    store: str = option(help="path of a run store (.db)")
    model: str | None = option(None, "bundled name or checkpoint folder for live attribution (default: none)")
    align: tuple[str, ...] | None = option(
        None, "folders of `oar align` results to show under /align (a run's folder, or a folder "
              "of them, e.g. docs/experiments/align)", nargs="+", metavar="DIR")
    dtype: str = option("float32", flag=None)  # the live model's: add_dtype_arg


def _listen(host: str, port: int) -> socket.socket:
    """A bound, listening socket, so that a busy port fails here with a clear message and
    the printed URL is the one being served (port 0 picks a free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto TCP, not 0: asyncio turns Nagle off (TCP_NODELAY) only on connections whose socket
    # says TCP; with it on, every keep-alive response after the first waited ~40 ms for an ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise OARError(f"cannot listen on {host}:{port} ({err.strerror}); pass another --port "
                       "(or --port 0 for any free one)") from None
    sock.listen(128)
    return sock


def server_config(app):
    """uvicorn's settings for `app`. A request uvicorn cannot parse is answered 400 by uvicorn
    itself, before any middleware runs; that answer gets the app's security headers too."""
    import h11
    import uvicorn
    from uvicorn.protocols.http.h11_impl import H11Protocol

    from .security import HEADERS

    class SecureH11Protocol(H11Protocol):
        def send_400_response(self, msg: str) -> None:  # uvicorn's own, plus HEADERS
            headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close"),
                       *HEADERS]
            for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
                          h11.Data(data=msg.encode("ascii")), h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
            self.transport.close()

    return uvicorn.Config(app, log_level="warning", lifespan="on", http=SecureH11Protocol)


def serve(app, host: str, port: int, *, started: float | None = None, on_ready=None) -> bool:
    """Serve `app` until Ctrl+C; print its URL once it answers (after the lifespan ran), then
    call `on_ready()`. Ctrl+C stops it with one line; True when it did (the command then exits
    130, as every `oar` command ended by Ctrl-C)."""
    import uvicorn

    sock = _listen(host, port)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{sock.getsockname()[1]}/"

    class Server(uvicorn.Server):
        async def startup(self, sockets=None):
            await super().startup(sockets=sockets)
            if self.started:
                took = "" if started is None else f" (ready in {time.perf_counter() - started:.1f} s)"
                print(f"oar-attrib web app: {url}{took}  (Ctrl+C to stop)", flush=True)
                if on_ready is not None:
                    on_ready()

    try:
        Server(server_config(app)).run(sockets=[sock])
    except KeyboardInterrupt:  # how a server is stopped; uvicorn re-raises it once shut down
        print("oar-attrib web app: stopped", flush=True)
        return True
    finally:
        sock.close()
    return False


def _is_loopback(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a name: only localhost is known to be this machine
        return host == "localhost"


def _settings(host: str, web=None, align: tuple[str, ...] | None = None):
    """The `WebSettings` the app is served with: `web` (its flags: --max-live-tokens; default:
    every default) with the Host headers `host` is reached by and the `oar align` folders."""
    from dataclasses import replace

    from .settings import LOOPBACK_HOSTS, WebSettings

    web = web or WebSettings()
    if align:
        web = replace(web, align_results=tuple(align))
    if _is_loopback(host):  # 127.0.0.0/8 and ::1: the Host check stays, with this address too
        shown = f"[{host.strip('[]')}]" if ":" in host else host
        return replace(web, allowed_hosts=tuple(dict.fromkeys((*LOOPBACK_HOSTS, shown))))
    say(f"warning: serving on {host}: anyone who can reach this machine can read the store")
    return replace(web, allowed_hosts=("*",))


def _web_settings(args: argparse.Namespace):
    """The `WebSettings` of the flags (--max-live-tokens; the rest at their defaults)."""
    from .settings import WebSettings

    return dataclass_from_args(WebSettings, args)


def _cmd_demo(args: argparse.Namespace) -> int:
    from oar_attrib.webapp.demo import DemoConfig

    return run_demo(dataclass_from_args(DemoConfig, args, methods=tuple(args.methods)),
                    dataclass_from_args(DemoBuild, args), dataclass_from_args(ServeSettings, args),
                    _web_settings(args))


def run_demo(config, build: DemoBuild, listen: ServeSettings, web=None) -> int:
    """`oar demo` on the objects its flags made: what the store holds (`demo.DemoConfig`), how
    it is made, where it is served, and the app's `WebSettings` (default: every default)."""
    if not build.build_only:  # building the store needs the core only; serving it, the web app
        require_extra("web", "oar demo")
    from oar_attrib.webapp.demo import demo_complete, prepare_demo_store
    from oar_attrib.webapp.demo_fill import ensure_demo_store, start_fill
    from oar_attrib.webapp.progress import Progress

    started = time.perf_counter()
    if build.build_only:
        path, built = ensure_demo_store(config, rebuild=build.rebuild, progress=not build.no_progress)
        state = f"built in {time.perf_counter() - started:.0f} s" if built else "cached"
        say(f"demo store: {path} ({state})")
        return 0
    path = prepare_demo_store(config, rebuild=build.rebuild)
    complete = demo_complete(path)
    later = "" if complete else ("; it is filled in the background (the fill says how long when each of its "
                                 "stages starts; the pages show how far)")
    say(f"demo store: {path}{later}")
    from .main import create_app

    app = create_app(path, model=config.model, settings=_settings(listen.host, web),
                     dtype=config.dtype, progress=Progress.of_store(path))
    filler = None if complete else start_fill(path, config)
    try:
        interrupted = serve(app, listen.host, listen.port, started=started)
    finally:
        if filler is not None and filler.poll() is None:
            filler.terminate()
            filler.wait(timeout=30)
    if filler is not None and not demo_complete(path):
        say(f"oar demo: the background fill stopped ({Progress.of_store(path).read().where()}); the next "
            "`oar demo` resumes it where it stopped")
    return INTERRUPTED if interrupted else 0


def _cmd_web(args: argparse.Namespace) -> int:
    return run_web(dataclass_from_args(WebSource, args), dataclass_from_args(ServeSettings, args),
                   _web_settings(args))


def run_web(source: WebSource, listen: ServeSettings, web=None) -> int:
    """`oar web` on the objects its flags made: what is served (with the live model's dtype),
    where, and the app's `WebSettings` (default: every default)."""
    require_extra("web", "oar web")
    from .main import create_app

    started = time.perf_counter()
    app = create_app(source.store, model=source.model, dtype=source.dtype,
                     settings=_settings(listen.host, web, source.align))
    return INTERRUPTED if serve(app, listen.host, listen.port, started=started) else 0


def _add_serve_args(parser: argparse.ArgumentParser) -> None:
    """--host, --port (`ServeSettings`) and --max-live-tokens (`WebSettings`, its owner)."""
    from .settings import WebSettings

    add_dataclass_args(parser, ServeSettings)
    add_dataclass_args(parser, WebSettings, names=("max_live_tokens",))


def add_web_commands(subparsers) -> None:
    """Register `oar demo` and `oar web` on the `oar` command's subparsers."""
    from oar_attrib.webapp.demo import DemoConfig

    demo = subparsers.add_parser(
        "demo", help="build (once, cached) a demo store from the bundled model and serve the web app",
        description="Samples right and wrong traces of the bundled model on held-out arithmetic "
                    "problems, attributes them with every method, labels them with the oracle, "
                    "and serves the trace browser. The store is cached; later runs start at once.")
    add_dataclass_args(demo, DemoConfig)
    _add_serve_args(demo)
    add_dataclass_args(demo, DemoBuild)
    demo.set_defaults(func=_cmd_demo)

    web = subparsers.add_parser("web", help="serve the web app over a run store")
    add_dataclass_args(web, WebSource)
    add_dtype_arg(web)
    _add_serve_args(web)
    web.set_defaults(func=_cmd_web)
