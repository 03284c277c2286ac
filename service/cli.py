"""`evoharness` command line.

    evoharness serve [--host 127.0.0.1] [--port 8000] [--model DIR] [--engine vllm|remote] [--enforce-eager] [--dev]
    evoharness keys new --id ID --role agent|auditor|ops|admin --tenant T | keys hash   (service/auth.py)
    evoharness session new TASK [--domain D] [--mode M] [--bank B] [--max-steps N] [--harness-cap N]
    evoharness session step SID OBSERVATION [-a ACTION ...] [--done] [--won] [--idempotency-key K] [--if-match V]
    evoharness session state SID [--version K] | audit SID [--after N] [--limit N] [--all] | diff SID FROM TO
    evoharness bank show [NAME] | bank consolidate [NAME]

The client commands talk to a running service (--url, default $EVOHARNESS_URL or http://127.0.0.1:8000;
--api-key or $EVOHARNESS_API_KEY) through service.client and print JSON. ALFWorld games against a running
service: `python -m training.envs.alfworld.driver --policy http --url URL --api-key KEY` (the `train` extra).

Without REDIS_URL it starts a private redis-server (data kept in a temp dir for the life of the
process) and says so; that redis-server stops with the process, however it ends. Without --model
it serves the shipped default policy, or, if none is shipped yet, builds the tiny UNTRAINED model
into models/untrained-tiny (a few seconds).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path

log = logging.getLogger("evoharness")


def _ensure_model(path: str) -> None:
    from service.settings import UNTRAINED_DIR

    if Path(path).resolve() == UNTRAINED_DIR.resolve() and not (UNTRAINED_DIR / "config.json").exists():
        from service.policy.bootstrap_model import build_tiny_model

        print(f"[evoharness] building the tiny UNTRAINED model into {UNTRAINED_DIR} (random weights)", flush=True)
        build_tiny_model(UNTRAINED_DIR)


def serve(args: argparse.Namespace) -> int:
    # vLLM-CPU's OpenMP threads: on a small box one per CPU, bound (service.hardware.engine_thread_env); an explicit
    # environment wins.
    from service.hardware import engine_thread_env

    os.environ.update(engine_thread_env(dict(os.environ), sorted(os.sched_getaffinity(0))))
    import uvicorn

    from service.api.app import create_app
    from service.embedded_redis import EmbeddedRedis
    from service.lifetime import signals_exit
    from service.settings import Settings

    overrides = {k: v for k, v in {"model": args.model, "engine": args.engine,
                                   "enforce_eager": args.enforce_eager or None,
                                   "auth": "off" if args.dev else None}.items() if v is not None}
    settings = Settings(**overrides)
    embedded = None
    # The embedded redis-server stops with this process: in `finally` on SIGTERM (here SystemExit), SIGINT
    # (KeyboardInterrupt) or an exception; on SIGKILL or a fatal signal through its PR_SET_PDEATHSIG.
    with signals_exit(signal.SIGTERM):
        try:
            if settings.redis_url is None:
                embedded = EmbeddedRedis().start()
                settings = settings.model_copy(update={"redis_url": embedded.url})
                print(f"[evoharness] REDIS_URL not set: started a private redis-server at {embedded.url} "
                      f"(data in {embedded.dir}, lost when this process exits)", flush=True)
            if settings.engine == "vllm":
                _ensure_model(settings.model)
            label = "UNTRAINED tiny model" if "untrained" in settings.model else "policy"
            print(f"[evoharness] engine={settings.engine} model={settings.model} ({label}) on "
                  f"http://{args.host}:{args.port}", flush=True)
            uvicorn.run(create_app(settings), host=args.host, port=args.port, workers=1, log_level=args.log_level)
        finally:
            if embedded:
                embedded.stop()
    return 0


def _client(args: argparse.Namespace):
    from service.client import EvoHarnessClient

    return EvoHarnessClient(args.url, api_key=args.api_key)


def _print(obj) -> None:
    import json

    print(json.dumps(obj, indent=1, ensure_ascii=False))


def client_command(args: argparse.Namespace) -> int:
    """session/bank subcommands: one client call, JSON on stdout; an API error -> its problem on stderr, exit 1."""
    from dataclasses import asdict

    import httpx

    from service.client import ApiError

    with _client(args) as c:
        try:
            what = f"{args.cmd} {args.action}"
            if what == "session new":
                out = asdict(c.create_session(args.task, domain=args.domain, mode=args.mode, bank=args.bank,
                                              max_steps=args.max_steps, harness_cap=args.harness_cap))
            elif what == "session step":
                out = c.step(args.session_id, args.observation, args.admissible or None, won=args.won or None,
                             done=args.done or None, idempotency_key=args.idempotency_key,
                             if_match=args.if_match).raw
            elif what == "session state":
                out = c.state(args.session_id, args.version)
            elif what == "session audit":
                out = ({"events": c.audit_all(args.session_id), "next": None} if args.all
                       else c.audit(args.session_id, args.after, args.limit))
            elif what == "session diff":
                out = c.diff(args.session_id, args.from_version, args.to_version)
            elif what == "bank show":
                out = c.bank(args.name)
            else:
                out = c.consolidate(args.name)
        except ApiError as e:
            print(f"evoharness: {e}", file=sys.stderr)
            _print(e.problem) if args.verbose else None
            return 1
        except httpx.TransportError as e:
            print(f"evoharness: cannot reach {args.url}: {e}", file=sys.stderr)
            return 2
    _print(out)
    return 0


def _add_client_parsers(sub) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=os.environ.get("EVOHARNESS_URL", "http://127.0.0.1:8000"))
    common.add_argument("--api-key", default=os.environ.get("EVOHARNESS_API_KEY"))
    common.add_argument("-v", "--verbose", action="store_true", help="print the problem+json of an error")

    ses = sub.add_parser("session", help="create, step and inspect sessions").add_subparsers(dest="action",
                                                                                             required=True)
    n = ses.add_parser("new", parents=[common], help="start a session")
    n.add_argument("task")
    n.add_argument("--domain", default="generic")
    n.add_argument("--mode", default="inline", choices=["inline", "always_on", "env_only"])
    n.add_argument("--bank", default="default")
    n.add_argument("--max-steps", type=int, default=None)
    n.add_argument("--harness-cap", type=int, default=None)
    s = ses.add_parser("step", parents=[common], help="send one observation, print the action")
    s.add_argument("session_id")
    s.add_argument("observation")
    s.add_argument("-a", "--admissible", action="append", default=[], metavar="ACTION",
                   help="an admissible action (repeat)")
    s.add_argument("--won", action="store_true")
    s.add_argument("--done", action="store_true")
    s.add_argument("--idempotency-key", default=None)
    s.add_argument("--if-match", type=int, default=None)
    st = ses.add_parser("state", parents=[common], help="current state, or at --version")
    st.add_argument("session_id")
    st.add_argument("--version", type=int, default=None)
    a = ses.add_parser("audit", parents=[common], help="audit events")
    a.add_argument("session_id")
    a.add_argument("--after", type=int, default=0)
    a.add_argument("--limit", type=int, default=100)
    a.add_argument("--all", action="store_true", help="every page")
    d = ses.add_parser("diff", parents=[common], help="JSON Patch between two versions")
    d.add_argument("session_id")
    d.add_argument("from_version", type=int)
    d.add_argument("to_version", type=int)
    for p in (n, s, st, a, d):
        p.set_defaults(func=client_command)

    bank = sub.add_parser("bank", help="Experience banks").add_subparsers(dest="action", required=True)
    for name, hlp in (("show", "entries, controls, pending evidence"), ("consolidate", "run the evolver")):
        b = bank.add_parser(name, parents=[common], help=hlp)
        b.add_argument("name", nargs="?", default="default")
        b.set_defaults(func=client_command)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="evoharness", description="Serve and use a trained harness policy.")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run the HTTP service")
    s.add_argument("--host", default=os.environ.get("EVOHARNESS_HOST", "127.0.0.1"))
    s.add_argument("--port", type=int, default=int(os.environ.get("EVOHARNESS_PORT", "8000")))
    s.add_argument("--model", default=None, help="model directory (default: shipped policy)")
    s.add_argument("--engine", default=None, choices=["vllm", "remote"])
    s.add_argument("--enforce-eager", action="store_true", help="skip torch.compile (fast start, slower decode)")
    s.add_argument("--log-level", default="info")
    s.add_argument("--dev", action="store_true", help="dev mode: auth off (EVOHARNESS_AUTH=off), warns loudly")
    s.set_defaults(func=serve)
    from service.keys_cli import add_parser as add_keys_parser

    add_keys_parser(sub)
    _add_client_parsers(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
