"""``rulka-trainer``: store what workers send, train, publish weights, checkpoint."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rulka.errors import UserError
from rulka.process import (
    exit_quickly,
    follow_launcher,
    role_log_file,
    run_main,
    setup_logging,
    stop_on_ctrl_c,
)
from rulka.trust import add_trust_arguments, apply_trust_arguments

if TYPE_CHECKING:
    from rulka.config import RulkaConfig

log = logging.getLogger("rulka.trainer")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rulka-trainer",
        description=(
            "The rulka trainer (the GPU box): receives episode segments from the workers through "
            "rulka-server, stores them in the replay memory, trains the agent and publishes signed "
            "weights to every worker. Checkpoints go to the run folder; --resume continues a run "
            "where it stopped (no segment is lost or counted twice)."
        ),
        epilog="example: rulka-trainer --config configs/sim_iqn.yaml --keys ~/.rulka/keys --server 127.0.0.1:55555",
    )
    parser.add_argument("--config", required=True, metavar="FILE", help="run configuration YAML")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override a config value, e.g. --set training.batch_size=256 (repeatable)")
    parser.add_argument("--run-dir", default=None, metavar="DIR",
                        help="run folder (default: logging.run_dir/<training.run_name>-<date>)")
    parser.add_argument("--resume", nargs="?", const=True, default=None, metavar="RUN_DIR",
                        help="continue the run in RUN_DIR (or in --run-dir) from its latest checkpoint")
    parser.add_argument("--keys", default=None, metavar="DIR",
                        help="keys folder from `rulka keys generate` (default: network.credentials_dir)")
    parser.add_argument("--server", default=None, metavar="HOST:PORT",
                        help="rulka-server address (default: network.server_host:network.port)")
    parser.add_argument("--minutes", type=float, default=None, help="stop after this many minutes")
    parser.add_argument("--max-updates", type=int, default=None, help="stop after this many updates")
    parser.add_argument("--budget-minutes", type=float, default=None, metavar="M",
                        help="the run's length when something else stops it (rulka run --minutes): times the "
                             "learning-rate cooldown (training.lr_cooldown_fraction); does not stop the trainer")
    parser.add_argument("--budget-frames", type=int, default=None, metavar="N",
                        help="the frames received at which something else stops the run (rulka run --frames): "
                             "times the learning-rate cooldown; does not stop the trainer")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    add_trust_arguments(parser)
    return parser


def default_run_dir(cfg: RulkaConfig) -> Path:
    """``logging.run_dir/<training.run_name>-<YYYYmmdd-HHMMSS>``."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(cfg.logging.run_dir).expanduser() / f"{cfg.training.run_name}-{stamp}"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    apply_trust_arguments(args)
    setup_logging(args.verbose)
    stop_on_ctrl_c()
    follow_launcher()
    exit_quickly()  # stops within about a second of its network process's death, not three
    return run_main(lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from rulka.config import load_config
    from rulka.config.built import check_startable

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    cfg = load_config(args.config, args.overrides)
    check_startable(cfg)
    resume = args.resume is not None
    if isinstance(args.resume, str):
        if args.run_dir and Path(args.run_dir) != Path(args.resume):
            raise UserError("give the run folder once: --resume RUN_DIR or --resume with --run-dir")
        run_dir = Path(args.resume)
    elif args.run_dir:
        run_dir = Path(args.run_dir)
    elif resume:
        raise UserError("--resume needs the run folder: --resume RUN_DIR")
    else:
        run_dir = default_run_dir(cfg)
    if resume and not (run_dir / "checkpoints").is_dir() and not (run_dir / "journal").is_dir():
        raise UserError(f"nothing to resume in {run_dir} (no checkpoints/ or journal/)")
    # what the trainer says stays in its run folder (<run>/logs/trainer.log), also once the terminal is gone
    with role_log_file(run_dir / "logs" / "trainer.log", log, "trainer", args.verbose) as file_only:
        done = _train(args, cfg, run_dir, resume, stop)
        print(done, file=sys.stderr)
        file_only(logging.INFO, done)
    return 0


def _train(args: argparse.Namespace, cfg: RulkaConfig, run_dir: Path, resume: bool, stop: threading.Event) -> str:
    """The run itself; returns its closing line (samples, updates, version, how to resume)."""
    from rulka.net.keys import load_credentials
    from rulka.plugins import network_settings, parse_address

    host, port = parse_address(args.server) if args.server else (None, None)
    keys = Path(args.keys or cfg.network.credentials_dir).expanduser()
    creds = load_credentials(keys, "trainer")

    from rulka.trainer.allocator import keep_freed_memory

    keep_freed_memory()  # before the learner allocates: no page faults for its per-update tensors
    threads = cfg.trainer.torch_threads
    if threads:  # before any torch work: intra-op threads beyond the free cores make every op wait
        import torch

        torch.set_num_threads(int(threads))
    from rulka.net.tls import connect_trainer
    from rulka.trainer.trainer import Trainer

    progress = None
    try:
        from rulka.telemetry import Progress

        progress = Progress("trainer", mode=cfg.logging.progress)
    except ImportError:
        pass
    settings = network_settings(cfg, host=host, port=port)
    # config, credentials, plugins and checkpoint first: a role that cannot start never connects
    from rulka.config.resources import available_memory_bytes, check_replay_fits

    check_replay_fits(cfg, available_memory_bytes(), "this machine has available now")
    try:
        trainer = Trainer(cfg, None, run_dir=run_dir, signing_key=creds.signing_key, resume=resume,
                          progress=progress)
    except MemoryError as exc:
        raise UserError(f"cannot allocate the trainer's memory ({exc}): lower memory.memory_size_schedule "
                        "or trainer.memory_kwargs") from None
    log.info("trainer: run %s in %s", trainer.state.run_id, run_dir)
    try:
        trainer.link = connect_trainer(settings, keys)
        summary = trainer.run(max_updates=args.max_updates,
                              max_seconds=args.minutes * 60 if args.minutes is not None else None, stop_event=stop,
                              budget_seconds=args.budget_minutes * 60 if args.budget_minutes is not None else None,
                              budget_samples=args.budget_frames)
    finally:
        trainer.close()
    return (f"trainer: {summary['samples']} samples, {summary['updates']} updates, weights v{summary['version']}; "
            f"run folder {run_dir} (resume with: rulka-trainer --config {args.config} --resume {run_dir})")


if __name__ == "__main__":
    sys.exit(main())
