"""``rulka tm``: tools for the TrackMania backends on a gaming PC: install the game-side plugin,
check the setup, record the reference line the rewards follow (``--game tmnf`` or ``tm2020``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rulka.errors import UserError

GAMES = ("tmnf", "tm2020")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "tm",
        help="TrackMania tools: install the game plugin, check the setup, record a reference line",
        description=("Tools for a gaming PC: install rulka's game-side plugin, check that the game, the plugin "
                     "and the controls answer, and record the reference line (one lap) the rewards follow."),
    )
    sub = parser.add_subparsers(dest="tm_command", metavar="TM_COMMAND")
    parser.set_defaults(func=lambda args: (parser.print_help(), 0)[1])

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--game", choices=GAMES, required=True, help="tmnf (TMInterface) or tm2020 (Openplanet)")
        p.add_argument("--config", default=None, metavar="YAML", help="run config whose environment section to use")
        p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                       help="override a config key (repeatable)")

    p = sub.add_parser("install-plugin", help="copy rulka's game plugin where the game loads it",
                       description=("tmnf: copy rulka's TMInterface plugin (RulkaLink.as) into the folder of "
                                    "user.target_python_link_path (Documents/TMInterface/Plugins). "
                                    "tm2020: copy rulka's Openplanet plugin into OpenplanetNext/Plugins/rulka_telemetry."))
    common(p)
    p.add_argument("--dest", type=Path, default=None, metavar="DIR", help="plugin folder (default: the game's)")
    p.set_defaults(func=cmd_install_plugin)

    p = sub.add_parser("check", help="check the game window, the plugin and the controls",
                       description="tmnf: the launcher (TMLoader / Wine script), TMInterface, rulka's plugin, the "
                                   "tracks folder and the instance ports. tm2020: the plugin streams telemetry, the "
                                   "window is found and sized, the gamepad driver answers. Exits non-zero when "
                                   "something is missing.")
    common(p)
    p.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for telemetry (default 5)")
    p.add_argument("--fake", action="store_true", help="check against rulka's fake game (plugin protocol only)")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("record-line", help="drive one lap; write the reference line the rewards follow",
                       description=("tm2020: respawn, drive one lap to the finish; positions from the plugin are "
                                    "resampled every environment.distance_between_checkpoints metres and written "
                                    "as a rulka reference line (set environment.tm2020.reference_line to it)."))
    common(p)
    p.add_argument("--out", type=Path, required=True, metavar="FILE", help="output .json (or .npy)")
    p.add_argument("--fake", action="store_true",
                   help="record from rulka's fake game driven by the scripted driver (a demonstration)")
    p.add_argument("--map", default=None, help="tmnf: map path relative to Tracks/Challenges (a sim track with --fake)")
    p.add_argument("--port", type=int, default=None, help="tmnf: the game's plugin port (default: user.base_tmi_port)")
    p.add_argument("--wait", type=float, default=600.0, help="tmnf: seconds to wait for the game and the finish")
    p.set_defaults(func=cmd_record_line)

    p = sub.add_parser("doctor", help="a short scripted drive that checks what only the game can show",
                       description=("Start a race, accelerate, steer left, give up; check the frame size and format, "
                                    "the race start, the give up (clock back to zero), speed units, the lateral "
                                    "axis's handedness, the step pace, the focus, TM2020's pause flag and (TMNF) the "
                                    "state blob against TMInterface's API. Prints PASS/FAIL per check with the values "
                                    "seen and writes a JSON report to attach to a bug report. Exits 1 when a check "
                                    "fails. Use a map whose start is a straight road of 60 m or more."))
    common(p)
    p.add_argument("--fake", action="store_true", help="run against rulka's fake game")
    p.add_argument("--report", type=Path, default=None, metavar="FILE",
                   help="JSON report (default: rulka-doctor-<game>.json here)")
    p.add_argument("--port", type=int, default=None, help="tmnf: the game's plugin port (default: user.base_tmi_port)")
    p.set_defaults(func=cmd_doctor)


def _config(args: argparse.Namespace) -> Any:
    from rulka.config import load_config

    return load_config(args.config, overrides=list(args.overrides))


def cmd_install_plugin(args: argparse.Namespace) -> int:
    if args.game == "tmnf":
        from rulka.envs.tmnf import tools

        print(f"installed rulka's TMInterface plugin as {tools.install_plugin(_config(args), args.dest)}")
        print("start the game with TMLoader (TMInterface 2.1.x profile); then: rulka tm check --game tmnf")
        return 0
    from rulka.envs.tm2020.tools import install_plugin

    target = install_plugin(args.dest)
    print(f"installed rulka's Openplanet plugin in {target}")
    print("in the game: Openplanet (F3) -> Developer -> Load plugin -> 'rulka telemetry' "
          "(unsigned plugins need Developer signature mode); then: rulka tm check --game tm2020")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    if args.game == "tmnf":
        from rulka.envs.tmnf import tools

        rows = tools.check(_config(args))
        for what, ok, detail in rows:
            print(f"{'ok  ' if ok else 'FAIL'} {what}: {detail}")
        return 0 if all(ok for _, ok, _ in rows) else 1
    from rulka.envs.tm2020.tools import check

    tm = _config(args).environment.tm2020
    if args.fake:
        from rulka.envs.tm2020.fake import FakeTM2020

        with FakeTM2020() as game:
            results = check(tm, args.timeout, port=game.port)
        results = [r for r in results if r.item == "plugin"]
    else:
        results = check(tm, args.timeout)
    for r in results:
        print(f"{'ok  ' if r.ok else 'FAIL'} {r.item}: {r.message}")
    return 0 if all(r.ok for r in results) else 1


def cmd_record_line(args: argparse.Namespace) -> int:
    if args.game == "tmnf":
        from rulka.envs.tmnf import tools

        cfg = _config(args)
        if not args.map:
            raise UserError("rulka tm record-line --game tmnf needs --map (the map to load and drive)")
        port = args.port if args.port is not None else cfg.user.base_tmi_port
        npy, js, race_time = tools.record_line(cfg, args.out, args.map, port, fake=args.fake, wait_s=args.wait)
        print(f"recorded {args.map}: race time {race_time / 1000:.2f} s -> {npy} and {js} "
              "(set map_cycle.entries[].reference_line_path to either)")
        return 0
    from rulka.envs.tm2020.telemetry import TelemetryClient
    from rulka.envs.tm2020.tools import record_line

    cfg = _config(args)
    tm = cfg.environment.tm2020
    spacing = cfg.environment.distance_between_checkpoints
    if not args.fake:
        with TelemetryClient(tm.plugin_host, tm.plugin_port) as client:
            record_line(client, args.out, spacing, on_progress=print)
        return 0
    from rulka.envs.tm2020.fake import FakeTM2020

    with FakeTM2020(track=cfg.environment.track, time_scale=4.0, countdown_s=0.5) as game, \
            TelemetryClient(port=game.port) as client:
        client.wait_newer(None, 10.0)
        game.press_reset()
        game.start_autopilot()
        try:
            record_line(client, args.out, spacing, start_timeout_s=30, lap_timeout_s=300, on_progress=print)
        finally:
            game.stop_autopilot()
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from rulka.cli import tm_doctor
    from rulka.config import load_config

    # the doctor's drive must not be cut short by the rewards' cut-offs (no new virtual checkpoint
    # on a stand-in line, a finish): its checks read the car
    sets = ["environment.cutoff_rollout_if_no_vcp_passed_within_duration_ms=600000", *args.overrides]
    if args.fake and args.game == "tmnf":
        sets = ["environment.game_launch=fake", "map_cycle.entries=[]", *sets]
    elif args.fake:
        sets = ["environment.tm2020.capture=fake", "environment.tm2020.control=fake",
                "environment.tm2020.reference_line=null", *sets]
    cfg = load_config(args.config, overrides=sets)
    if args.game == "tmnf":
        if cfg.environment.backend != "tmnf":
            cfg = load_config(args.config, overrides=["environment.backend=tmnf", *sets])
        port = args.port if args.port is not None else (None if args.fake else cfg.user.base_tmi_port)
        if not args.fake and cfg.environment.game_launch == "launch":
            cfg = load_config(args.config, overrides=[*sets, "environment.game_launch=attach"])
        report = tm_doctor.doctor_tmnf(cfg, port=port)
    else:
        if cfg.environment.backend != "tm2020":
            cfg = load_config(args.config, overrides=["environment.backend=tm2020", *sets])
        report = tm_doctor.doctor_tm2020(cfg)
    print(tm_doctor.render(report))
    path = tm_doctor.write_report(report, args.report or Path(f"rulka-doctor-{args.game}.json"))
    print(f"report: {path}")
    return 1 if report.failed or report.error else 0
