"""``rulka-worker``: run episodes on this PC and send them to the trainer through the server."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rulka.errors import UserError
from rulka.process import (
    KEPT_LOG_BACKUPS,
    KEPT_LOG_BYTES,
    PRIORITIES,
    exit_quickly,
    follow_launcher,
    keep_on_cores,
    log_file_option,
    role_log_file,
    run_main,
    set_process_priority,
    setup_logging,
    stop_on_ctrl_c,
)
from rulka.trust import add_trust_arguments, apply_trust_arguments

if TYPE_CHECKING:
    from rulka.config import RulkaConfig
    from rulka.net.keys import Credentials

log = logging.getLogger("rulka.worker")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rulka-worker",
        description=(
            "A rulka worker: plays episodes with the newest policy the trainer published and sends "
            "them, compressed, to the trainer through rulka-server. It needs only the server address "
            "and its credential bundle (from `rulka keys add-worker NAME`): the env and the network "
            "come with the weights. Unsent episodes are kept on disk and resent after a restart."
        ),
        epilog="example: rulka-worker --server 203.0.113.7:55555 --keys ~/rulka-worker-pc1",
    )
    parser.add_argument("--server", required=True, metavar="HOST:PORT", help="address of rulka-server")
    parser.add_argument("--keys", required=True, metavar="BUNDLE",
                        help="this worker's credential bundle folder (from `rulka keys add-worker`)")
    parser.add_argument("--name", default=None, help="worker name (default: the bundle's name; must match it)")
    parser.add_argument("--config", metavar="FILE", default=None,
                        help="run config to use instead of the one the trainer sends (optional)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override a config value (repeatable; implies a local config)")
    parser.add_argument("--instances", type=_positive_int, default=1, metavar="N",
                        help="game instances this process drives (default 1), each with its own env and copy of "
                             "the network on a thread of its own, sharing one connection: each weights version "
                             "crosses the relay's uplink once per PC, not once per instance. For uplink-limited relays: "
                             "the instances share one interpreter lock (as fast as processes on a quiet CPU, slower "
                             "beside other work: docs/performance.md), and one failing instance stops them all. TMNF: each claims its own instance slot; "
                             "TM2020: 1 only")
    parser.add_argument("--episodes", type=int, default=None,
                        help="stop after this many episodes (over all instances)")
    parser.add_argument("--test", action="store_true",
                        help="evaluation only: greedy actions, episodes marked as evaluation")
    parser.add_argument("--state-dir", default=None, metavar="DIR",
                        help="where sequence numbers and unsent segments are kept "
                             "(default: worker.spill_dir, else ~/.rulka/worker/<name>)")
    parser.add_argument("--random-until-weights", action="store_true",
                        help="act randomly until the first weights arrive (needs a local config)")
    parser.add_argument("--max-steps-per-s", type=float, default=None, metavar="RATE",
                        help="cap env steps per second (for fast gym envs on a small trainer)")
    parser.add_argument("--priority", choices=PRIORITIES, default="normal",
                        help="CPU priority of this worker (default normal; `rulka run` starts its workers "
                             "below_normal so that the trainer on the same cores comes first)")
    parser.add_argument("--cpu-cores", default=None, metavar="LIST",
                        help="keep this worker on these CPU cores, e.g. 2-5 (default: any; `rulka run` keeps its "
                             "workers off the trainer's cores)")
    parser.add_argument("--produced-log", default=None, metavar="FILE",
                        help="append the sequence number of every segment produced to FILE (audits)")
    parser.add_argument("--log-file", default=None, metavar="FILE",
                        help="also keep the log here, with dates (default: worker.log in the state folder, "
                             f"rolled over at {KEPT_LOG_BYTES // 2**20} MB keeping {KEPT_LOG_BACKUPS} older; "
                             "'none': the terminal only)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    add_trust_arguments(parser)
    return parser


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def log_file_path(option: str | None, state_dir: Path) -> Path | None:
    """Where a worker keeps its log: ``--log-file``, else ``worker.log`` in its state folder (kept
    across runs, like its unsent segments: a gaming PC's terminal may be closed by the time
    someone asks why it stopped); ``none`` keeps it on the terminal only."""
    return log_file_option(option, state_dir / "worker.log")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    apply_trust_arguments(args)
    setup_logging(args.verbose)
    code = run_main(lambda: _place(args))  # before any thread starts
    if code:
        return code
    stop_on_ctrl_c()
    follow_launcher()
    exit_quickly()
    return run_main(lambda: _run(args))


def _place(args: argparse.Namespace) -> None:
    """The worker's CPU priority and cores, inherited by every thread and process it starts."""
    set_process_priority(args.priority)
    keep_on_cores(args.cpu_cores)


def limit_inference_threads(threads: int) -> None:
    """Threads for the worker's inference: torch's and numpy's BLAS (float-only IQN actors act in
    numpy). One observation at a time: one thread by default, leaving the cores to the game; left
    alone, OpenBLAS starts a thread per core even for the actor's small matrix products."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(threads)
    threadpool_limits(threads, user_api="blas")


def _run(args: argparse.Namespace) -> int:
    from rulka.config import as_config
    from rulka.net.keys import load_credentials
    from rulka.plugins import parse_address

    # from the very start: a stop request during the (slow) start-up must stop cleanly too
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    host, port = parse_address(args.server)
    cfg = None
    if args.config or args.overrides:
        from rulka.config import load_config
        from rulka.config.built import check_startable

        cfg = load_config(args.config, args.overrides)
        check_startable(cfg, replay=False)  # the replay memory lives on the trainer
        cfg.worker.check_acting()  # worker.device: cuda without a GPU stops here, not at the first weights
        from rulka.worker.episodes import check_instances

        check_instances(cfg, args.instances)  # tm2020 with --instances 2 stops here, before connecting
    creds = load_credentials(args.keys, "worker")
    name = args.name or creds.identity
    if name != creds.identity:
        raise UserError(f"--name {name!r} does not match the bundle's name {creds.identity!r}")
    # this PC's own settings: its config, else the built-in defaults (without a config the run's
    # config arrives with the trainer's weights)
    local = as_config(cfg)
    state_dir = Path(args.state_dir or local.worker.spill_dir or Path.home() / ".rulka" / "worker" / name)

    with role_log_file(log_file_path(args.log_file, state_dir), log, f"worker {name}", args.verbose,
                       max_bytes=KEPT_LOG_BYTES, backups=KEPT_LOG_BACKUPS) as file_only:
        done = _work(args, cfg, local, creds, (host, port), state_dir, stop)
        print(done, file=sys.stderr)
        file_only(logging.INFO, done)
    return 0


def _work(args: argparse.Namespace, cfg: RulkaConfig | None, local: RulkaConfig, creds: Credentials,
          address: tuple[str, int], state_dir: Path, stop: threading.Event) -> str:
    """The worker's run itself: connect, play until told to stop; returns its closing line."""
    from rulka.net.tls import connect_worker
    from rulka.net.weights import decode_weights
    from rulka.plugins import network_settings
    from rulka.worker.worker import Worker

    name, (host, port) = creds.identity, address
    limit_inference_threads(local.worker.torch_threads)
    link = connect_worker(network_settings(cfg, host=host, port=port), args.keys, name)
    try:
        worker = Worker(cfg, link, state_dir=state_dir, test=args.test,
                        act_before_weights="random" if args.random_until_weights else "wait",
                        produced_log=args.produced_log, max_steps_per_s=args.max_steps_per_s,
                        weights_decoder=lambda data: decode_weights(data, creds.trainer_public),
                        instances=args.instances)
    except BaseException:
        link.close()  # a worker that cannot start must not stay connected in its name
        raise
    fatal: list[str] = []
    monitor = threading.Thread(target=_show_progress, args=(worker, stop, local.logging.progress, fatal), daemon=True)
    monitor.start()
    log.info("worker %s -> %s:%d (state in %s%s)", name, host, port, state_dir,
             f", {args.instances} game instances" if args.instances > 1 else "")
    try:
        stats = worker.run(max_episodes=args.episodes, stop_event=stop, drain_timeout_s=30.0)
    finally:
        stop.set()
        worker.close()
    if fatal:
        raise UserError(f"worker {name} stopped: {fatal[0]}")
    left = len(worker.outbox)
    shared = (f" ({args.instances} instances; {stats.weights_received} weights messages received, "
              f"{stats.weights_stale} of them stale, {stats.weights_loaded} loads)" if args.instances > 1 else "")
    return (f"worker {name}: {stats.episodes} episodes, {stats.steps} steps, weights v{stats.weights_version}{shared}"
            + (f", {left} segments kept for the next run in {state_dir}" if left else ""))


def _show_progress(worker: object, stop: threading.Event, progress_mode: str, fatal: list[str]) -> None:
    """Status line once a second (with why the link is down); stops the worker when the server
    refused it for good (revoked, wrong password, a key that is not the enrolled one, an outdated
    client): retrying cannot help. A worker not enrolled on the relay retries (see FATAL_REFUSALS)."""
    from rulka.net.tls import FATAL_REFUSALS

    progress = None
    try:
        from rulka.telemetry import Progress

        progress = Progress("worker", mode=progress_mode)
    except ImportError:
        pass
    link = worker.link  # type: ignore[attr-defined]
    try:
        while not stop.wait(1.0):
            connected = link.connected()
            problem = getattr(link, "problem", "")
            if not connected and getattr(link, "refused", None) in FATAL_REFUSALS:
                fatal.append(problem)
                stop.set()
                return
            if getattr(link, "dead", ""):  # the network process is gone: no retry can reach the server
                fatal.append(f"{link.dead}; start the worker again (what was not acknowledged is kept "
                             "in its state folder and sent then)")
                stop.set()
                return
            if progress is not None:
                s = worker.stats  # type: ignore[attr-defined]
                progress.update(episodes=s.episodes, steps=s.steps, version=s.weights_version,
                                unsent=len(worker.outbox), connected=connected,  # type: ignore[attr-defined]
                                link="ok" if connected else (problem or "connecting"))
    finally:
        if progress is not None:
            progress.close()


if __name__ == "__main__":
    sys.exit(main())
