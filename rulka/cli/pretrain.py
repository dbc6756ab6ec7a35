"""``rulka pretrain``: recordings and pretraining before an RL run.

``rulka pretrain record CONFIG --out DIR`` drives races with the simulator's scripted driver and
writes them as episode files (``rulka dpo record`` records a saved policy the same way); with
``--tape FILE`` it replays the optimal-race solver's action tapes (``rulka sim optimal``) instead.
``rulka pretrain bc CONFIG EPISODES... --out DIR`` clones the recorded actions into the network
the config trains (IQN or the actor-critic); ``rulka pretrain visual CONFIG EPISODES... --out DIR``
trains its image stem on the recorded frames without labels. Both write a folder for
``nn.init_from_pretrained``; see ``configs/sim_iqn_from_bc.yaml`` for the whole recipe.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("pretrain", help="record expert episodes; behaviour cloning; visual pretraining",
                                   description=__doc__.split("\n\n")[1])
    sub = parser.add_subparsers(dest="pretrain_command", metavar="ACTION", required=True)
    p = sub.add_parser("record", help="record the simulator's scripted driver (or solver tapes) as episode files")
    p.add_argument("config", help="run config (environment.backend: sim)")
    p.add_argument("--out", required=True, help="folder for the episode files")
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--seed", type=int, default=0, help="reset seed of the first episode")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a config key (repeatable)")
    p.add_argument("--start-noise", type=float, default=1.0,
                   help="random start offset: metres sideways and degrees of heading (default 1; 0: the game's start)")
    p.add_argument("--tape", action="append", default=[], metavar="FILE",
                   help="replay this solver tape (`rulka sim optimal`'s JSON) on its track instead of driving "
                        "the scripted driver (repeatable; --episodes, --seed and --start-noise then do nothing)")
    p.set_defaults(func=cmd_record)
    for name, helptext, func in (("bc", "clone recorded actions into the config's network", cmd_bc),
                                 ("visual", "train the config's image stem on recorded frames (no labels)", cmd_visual)):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("config", help="the run config whose network is pretrained")
        p.add_argument("episodes", nargs="+", help="episode files or folders of them")
        p.add_argument("--out", required=True, help="folder to write (for nn.init_from_pretrained)")
        p.add_argument("--updates", type=int, default=2000 if name == "bc" else 1000)
        p.add_argument("--batch-size", type=int, default=None,
                       help="default: 256 (bc), training.batch_size (bc --objective dqfd), 64 (visual)")
        p.add_argument("--lr", type=float, default=1e-3)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                       help="override a config key (repeatable), e.g. nn.init_from_pretrained=DIR")
        if name == "bc":
            p.add_argument("--objective", choices=("bc", "dqfd"), default="bc",
                           help="bc: cross-entropy of the recorded actions (+ IQN's value term); dqfd (IQN): "
                                "DQfD's pre-training, TD + large-margin loss on the recordings (pretrain.margin)")
        p.set_defaults(func=func)


def _config(args: argparse.Namespace) -> Any:
    from rulka.config import load_config
    from rulka.errors import UserError

    cfg = load_config(args.config, overrides=args.overrides)
    if cfg.environment.is_multi_action:
        raise UserError("config key `environment.rl_action_offsets_ms`: rulka pretrain records and clones "
                        "one action per decision; multi-action blocks are not supported there")
    return cfg


def cmd_record(args: argparse.Namespace) -> int:
    from rulka.pretrain.data import record_scripted, record_tapes

    if args.tape:
        paths = record_tapes(_config(args), args.tape, args.out)
        print(f"wrote {len(paths)} episode files to {args.out} (solver tapes)")
        return 0
    paths = record_scripted(_config(args), args.out, args.episodes, seed=args.seed,
                            start_noise=args.start_noise)
    print(f"wrote {len(paths)} episode files to {args.out}")
    return 0


def cmd_bc(args: argparse.Namespace) -> int:
    from rulka.nn.pretrained import save_pretrained
    from rulka.pretrain.bc import bc_return_settings, train_bc
    from rulka.pretrain.data import episode_files, load_steps

    cfg = _config(args)
    if args.objective == "dqfd":
        return _cmd_dqfd(cfg, args)
    horizon, gamma = bc_return_settings(cfg)
    steps = load_steps(episode_files(args.episodes), with_images=not cfg.nn.vis.no_image, horizon=horizon, gamma=gamma)
    res = train_bc(cfg, steps, updates=args.updates, batch_size=args.batch_size or 256, lr=args.lr, seed=args.seed)
    save_pretrained(args.out, res.network.state_dict(), network=res.kind, spec=res.spec, source="bc")
    from rulka.nn.hf import save_hf_parts

    save_hf_parts(res.network, args.out)  # hf_transformer_vis/, hf_transformer_fusion/ (save_pretrained layout)
    summary = {"steps": len(steps), "episodes": steps.episodes, "first_loss": round(res.first_loss, 4),
               "last_loss": round(res.last_loss, 4), "train_accuracy": round(res.train_accuracy, 4),
               "held_out_accuracy": round(res.held_out_accuracy, 4)}
    (Path(args.out) / "bc_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"bc ({res.kind}): {json.dumps(summary)}; wrote {args.out}")
    return 0


def _cmd_dqfd(cfg: Any, args: argparse.Namespace) -> int:
    from rulka.nn.pretrained import save_pretrained
    from rulka.pretrain.dqfd import pretrain_dqfd

    res = pretrain_dqfd(cfg, args.episodes, updates=args.updates, batch_size=args.batch_size or cfg.training.batch_size,
                        lr=args.lr, seed=args.seed)
    save_pretrained(args.out, res.network.state_dict(), network="iqn", spec=res.spec, source="dqfd")
    from rulka.nn.hf import save_hf_parts

    save_hf_parts(res.network, args.out)
    summary = {"objective": "dqfd", "transitions": res.transitions, "updates": args.updates,
               "first_td_loss": round(res.first_loss, 4), "last_td_loss": round(res.last_loss, 4),
               "first_margin_loss": round(res.first_margin, 4), "last_margin_loss": round(res.last_margin, 4),
               "greedy_accuracy": round(res.accuracy, 4)}
    (Path(args.out) / "bc_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"bc --objective dqfd (iqn): {json.dumps(summary)}; wrote {args.out}")
    return 0


def cmd_visual(args: argparse.Namespace) -> int:
    import numpy as np

    from rulka.agents.policy.episodes import read_episode
    from rulka.errors import UserError
    from rulka.nn.pretrained import save_pretrained
    from rulka.pretrain.data import episode_files
    from rulka.pretrain.visual import train_visual

    cfg = _config(args)
    frames = [np.asarray(seg.arrays["obs/img"], np.uint8)
              for f in episode_files(args.episodes) for seg in read_episode(f) if "obs/img" in seg.arrays]
    if not frames:
        raise UserError("the episodes carry no image frames (record with nn.vis.no_image: false)")
    res = train_visual(cfg, np.concatenate(frames), updates=args.updates, batch_size=args.batch_size or 64,
                       lr=args.lr, seed=args.seed)
    save_pretrained(args.out, res.stem, network=res.kind, spec=res.spec, source="visual")
    print(f"visual ({res.kind}): {sum(len(f) for f in frames)} frames, loss {res.first_loss:.5f} -> "
          f"{res.last_loss:.5f}; wrote {args.out}")
    return 0
