"""Fleet: many workers against one real relay and a real trainer link, through a set uplink rate.

One ``rulka-server`` process (real TLS), one trainer link (``rulka.net.tls.connect_trainer``: the
trainer's real link, its credit and reassembly) in this process acting as the trainer's intake
and publisher, and ``--workers`` simulated workers spread over ``--procs`` processes (asyncio,
one coroutine per worker). Each simulated worker is its own TLS connection with its own
credentials (``rulka.net.keys.add_worker``): it answers the relay's challenge with its key,
sends signed segments (``rulka.net.wire.make_envelopes``) at a game's rate (one every
``--segment-s``: 200 steps at 20 Hz by default; the payload is a recorded segment, the exact bytes
a simulator worker sent (bench.feed's recorded set of the 48x36 sim run, ``--recorded``; each worker
cycles through it from its own offset), stamped with the worker, a sequence number and the weights
version it ran; ``--recorded none``: ``--segment-bytes`` random bytes instead), reassembles and verifies
what the relay sends, and loads every weights version it receives
(``rulka.net.weights.decode_weights``: signature, zstd, safetensors; by default each worker checks
the signature over its own bytes, and zstd and safetensors run once per worker process and
version, ``--no-share-decode`` runs them per worker: ``SimWorker._decode`` says why).
``--instances-per-worker K`` makes each connection stand for one PC whose ``rulka-worker
--instances K`` drives K games: it sends K times the segments (one every ``--segment-s / K``) and
receives and decodes each version once, as that worker does. With ``--mbit`` the
workers reach the relay through a throttling proxy (bench/throttle.py, its own process): the
relay's upload is that rate, shared by all workers.

The publisher encodes a weights version of ``--params`` parameters (``--network`` presets: the
48x36 sim network, 149,213; the guide-size one, 6,578,333) every ``--publish-s`` seconds, signed,
in ``--dtype`` with zstd, as the trainer publishes them (``--dtype int8``: the opt-in lossy
encoding). ``--weights-streams`` sets the relay's ``network.weights_streams`` (workers sent a
version at once; 0 = all).

Prints one JSON object: the relay's CPU seconds per MB it moved and its peak RSS (VmHWM); per
weights version the seconds until 50/99/100% of the connected workers run it or a newer one;
the policy lag the trainer sees (versions between the weights a segment was played with and the
latest published when it arrived); segments sent, received, lost and duplicated; disconnects by
reason (the relay's counters and the workers' own); the fairness of the intake across workers
(Jain's index of segments received per worker, min/max ratio); and the relay's
``weights_superseded``. The load of the machine (``os.getloadavg``) is recorded with it.

    python -m bench.fleet                          # --scenarios quick: 16 workers, 48x36, 20 Mbit/s, 40 s
    python -m bench.fleet --scenarios fleet256     # 256 workers through 100 Mbit/s
    python -m bench.fleet --scenarios guide_50mbit # 40 workers, guide-size network, 50 Mbit/s
    python -m bench.fleet --scenarios guide_50mbit_pc4 # the same 40 instances as 10 x --instances 4
    python -m bench.fleet --scenarios guide_unthrottled
    python -m bench.fleet --scenarios quick --workers 8 --seconds 20   # flags given win over the preset
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
NETWORKS = {"48x36": 149_213, "float184": 83_213, "guide": 6_578_333}
HEADER = 10


# -- a simulated worker --------------------------------------------------------------------------
class SimWorker:
    """One worker: a TLS connection speaking the relay's frame protocol (as tlspyo does)."""

    def __init__(self, bundle: Path, port: int, args: argparse.Namespace, t_end: float) -> None:
        from rulka.net.keys import load_credentials
        from rulka.net.wire import MessageCounter, Reassembler

        self.creds = load_credentials(bundle, "worker")
        self.name = self.creds.identity
        self.port = port
        self.args = args
        self.t_end = t_end
        self.counter = MessageCounter()
        trainer_key = self.creds.trainer_public
        self.reassembler = Reassembler(lambda s: trainer_key if s == "trainer" else None,
                                       max_message_bytes=256 << 20)
        self.version = -1
        self.loads: list[tuple[int, float]] = []  # (weights version, when it was loaded)
        self.seq = 0
        self.disconnects: dict[str, int] = {}
        self.bad: dict[str, int] = {}
        self.connects = 0
        self.stamp = 0

    def _frame(self, cmd: str, dest: Any, obj: Any) -> bytes:
        from rulka.net.wire import serialize

        self.stamp += 1
        body = serialize([self.stamp, cmd, dest, obj])
        return f"{len(body):<{HEADER}}".encode() + self.creds.password.encode() + body

    async def run(self, ctx: ssl.SSLContext) -> None:
        while time.time() < self.t_end:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port, ssl=ctx,
                                                               server_hostname="localhost", limit=1 << 20)
            except OSError as exc:
                self._lost(f"connect: {type(exc).__name__}")
                await asyncio.sleep(1.0)
                continue
            self.connects += 1
            reason = await self._session(reader, writer)
            writer.close()
            if reason != "end":
                self._lost(reason)
                await asyncio.sleep(0.5)

    def _lost(self, reason: str) -> None:
        self.disconnects[reason] = self.disconnects.get(reason, 0) + 1

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str:
        from rulka.net.wire import challenge_token, deserialize, hello_nonce

        try:
            _, cmd, obj = deserialize(await self._read_frame(reader))
            nonce = hello_nonce(obj) if cmd == "HELLO" else None
            if nonce is None:
                return "no relay hello"
            token = challenge_token(self.name, self.creds.signing_key, nonce)
            writer.write(self._frame("HELLO", None, ["workers", f"w:{self.name}", token]))
            sender = asyncio.create_task(self._send_segments(writer))
            try:
                while True:
                    frame = deserialize(await self._read_frame(reader))
                    if isinstance(frame, list) and len(frame) == 3 and frame[1] == "OBJ":
                        refused = self._handle(frame[2])
                        if refused:
                            return f"refused: {refused}"
            finally:
                sender.cancel()
        except asyncio.CancelledError:
            return "end"
        except (asyncio.IncompleteReadError, ConnectionError, OSError, ssl.SSLError) as exc:
            return "end" if time.time() >= self.t_end else f"connection lost: {type(exc).__name__}"

    async def _read_frame(self, reader: asyncio.StreamReader) -> bytes:
        n = int(await reader.readexactly(HEADER))
        return await reader.readexactly(n)

    def _handle(self, obj: Any) -> str | None:
        from rulka.errors import BadInput
        from rulka.net.wire import deserialize

        env = deserialize(obj)
        if isinstance(env, dict) and "refused" in env:
            return str(env["refused"])
        try:
            msg = self.reassembler.feed(env)
        except BadInput as exc:
            self.bad[exc.reason] = self.bad.get(exc.reason, 0) + 1
            return None
        if msg is None or msg.kind != "weights":
            return None
        try:
            blob = self._decode(msg.payload)
        except BadInput:
            self.bad["weights"] = self.bad.get("weights", 0) + 1
            return None
        self.version = blob.version
        self.loads.append((blob.version, time.time()))
        return None

    def _decode(self, payload: bytes) -> Any:
        """What a worker does with a weights message: check the trainer's signature over this
        connection's own bytes (sha256 of all of them, Ed25519) and the version, then decompress and
        load the tensors. With ``--share-decode`` (the default) a payload whose signature this
        process already checked and decoded for another simulated worker is not decompressed and
        parsed again: its tensors are reused. That skips zstd and safetensors (about 0.03 CPU s per
        guide-size version), which a real worker pays once on its own machine, not 40 times on the
        relay's cores; the signature and version checks still run per worker."""
        from rulka.errors import BadInput
        from rulka.net.weights import WeightsBlob, decode_weights, read_weights_header

        key = self.creds.trainer_public
        if not self.args.share_decode:
            return decode_weights(payload, key, newer_than=self.version)
        meta = read_weights_header(payload, key)  # the signature over these bytes: every worker
        if meta["version"] <= self.version:
            raise BadInput("weights", f"stale version {meta['version']}")
        digest = (meta["run_id"], meta["version"])  # signed by the trainer: one body per version
        cached = _DECODED.get(digest)
        if cached is None:
            _DECODED.clear()  # the newest version only
            cached = _DECODED[digest] = decode_weights(payload, key, newer_than=self.version)
        return WeightsBlob(cached.run_id, cached.version, cached.tensors, cached.header, cached.dtype)

    async def _send_segments(self, writer: asyncio.StreamWriter) -> None:
        import random

        from rulka.net.wire import make_envelopes, serialize

        args = self.args
        # recorded segments as a worker sent them (real sizes), each worker from its own offset; or
        # incompressible bytes, as compressed observations are
        pads = getattr(args, "recorded_payloads", None) or [os.urandom(args.segment_bytes)]
        first = random.randrange(len(pads))
        await asyncio.sleep(random.uniform(0, args.segment_s))  # workers do not start in step
        while time.time() < self.t_end - 1.0:
            pad = pads[(first + self.seq) % len(pads)]
            payload = serialize({"w": self.name, "q": self.seq, "v": self.version, "t": time.time(), "pad": pad})
            for env in make_envelopes("segment", self.name, self.counter.next(), payload,
                                      signing_key=self.creds.signing_key, chunk_bytes=args.chunk_bytes):
                writer.write(self._frame("OBJ", {"trainer": 1}, serialize(env)))
            self.seq += 1
            await writer.drain()
            await asyncio.sleep(args.segment_s)

    def result(self) -> dict[str, Any]:
        return {"name": self.name, "sent": self.seq, "loads": self.loads, "disconnects": self.disconnects,
                "bad": self.bad, "connects": self.connects}


_DECODED: dict[tuple[str, int], Any] = {}  # --share-decode: (run id, version) -> decoded blob


def _client_context(bundle: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(bundle / "client" / "certificate.pem"))
    ctx.check_hostname = True
    return ctx


def run_workers(args: argparse.Namespace) -> int:
    """``--as-workers``: this process runs the named workers until ``--t-end`` and prints their results."""
    import rulka.net.weights  # noqa: F401 - imported (torch) before the run starts, not during it

    bundles = [Path(args.keys) / "bundles" / n for n in args.names.split(",")]
    args.recorded_payloads = recorded_segment_payloads(args)
    print("ready", flush=True)
    t_end = float(sys.stdin.readline())  # the orchestrator starts every process's clock together

    async def main() -> list[dict[str, Any]]:
        workers = [SimWorker(b, args.port, args, t_end) for b in bundles]
        ctx = _client_context(bundles[0])
        tasks = []
        for w in workers:  # connect in a ramp: 256 TLS handshakes at once would time out the relay's HELLO
            tasks.append(asyncio.create_task(w.run(ctx)))
            await asyncio.sleep(args.ramp_s / max(1, len(workers)))
        remaining = t_end - time.time()
        done, pending = await asyncio.wait(tasks, timeout=max(1.0, remaining + 5))
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        return [w.result() for w in workers]

    results = asyncio.run(main())
    print(json.dumps({"cpu_s": time.process_time(), "workers": results}))
    return 0


def recorded_segment_payloads(args: argparse.Namespace) -> list[bytes] | None:
    """The recorded segments' payloads (bench.feed) named by ``args.recorded``; None for ``none``."""
    from bench.feed import recorded_payloads

    folder = getattr(args, "recorded", None)
    if not folder or folder == "none":
        return None
    return [payload for _, _, payload in recorded_payloads(Path(folder))] or None


# -- the trainer side ----------------------------------------------------------------------------
class Intake:
    """The trainer's link: takes segments (granting credit as the trainer does) and publishes."""

    def __init__(self, cfg: dict[str, Any], keys: Path, args: argparse.Namespace) -> None:
        import torch

        from rulka.net.keys import load_credentials
        from rulka.net.tls import connect_trainer

        self.link = connect_trainer(cfg, keys)
        self.creds = load_credentials(keys, "trainer")
        self.args = args
        self.version = 0
        self.published: dict[int, float] = {}
        self.publish_bytes: list[int] = []
        self.received: dict[tuple[str, int], int] = {}
        self.lags: list[int] = []
        self.per_worker: dict[str, int] = {}
        self.bad_payload = 0
        gen = torch.Generator().manual_seed(0)
        n = args.params
        # one matrix of rows of 256 per 1M parameters or less (a network's layers), std 0.02 as
        # initialised weights, and the remainder as one vector (a bias)
        sizes = [min(1 << 20, n - i) // 256 * 256 for i in range(0, n, 1 << 20)]
        self.tensors = {f"layer{i}.weight": torch.randn(k // 256, 256, generator=gen) * 0.02
                        for i, k in enumerate(sizes)}
        self.tensors["last.bias"] = torch.randn(n - sum(sizes), generator=gen) * 0.02
        self.gen = gen
        self.stop = threading.Event()

    def publish(self) -> None:
        from rulka.net.weights import WeightsBlob, encode_weights

        for t in self.tensors.values():  # an optimizer's step: every weight moves a little
            t.add_(t.new_empty(t.shape).normal_(0, 1e-4, generator=self.gen))
        self.version += 1
        blob = encode_weights(WeightsBlob("fleet", self.version, self.tensors, {}, self.args.dtype),
                              self.creds.signing_key)
        self.publish_bytes.append(len(blob))
        self.published[self.version] = time.time()
        self.link.broadcast("weights", blob)

    def take(self, timeout: float) -> None:
        from rulka.net.wire import deserialize

        for msg in self.link.receive(timeout=timeout):
            if msg.kind != "segment":
                continue
            seg = deserialize(msg.payload)
            if not isinstance(seg, dict) or seg.get("w") != msg.sender:
                self.bad_payload += 1
                continue
            key = (msg.sender, int(seg["q"]))
            self.received[key] = self.received.get(key, 0) + 1
            self.per_worker[msg.sender] = self.per_worker.get(msg.sender, 0) + 1
            if seg["v"] >= 1:
                self.lags.append(self.version - int(seg["v"]))

    def loop(self, t_end: float) -> None:
        next_pub = time.time()
        while time.time() < t_end and not self.stop.is_set():
            if time.time() >= next_pub:
                self.publish()
                next_pub += self.args.publish_s
            self.take(min(0.2, max(0.0, next_pub - time.time())))


# -- measurement helpers -------------------------------------------------------------------------
def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_status_mb(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, max(0, int(round(q * (len(values) - 1)))))]


def reach_times(published: dict[int, float], loads: dict[str, list[tuple[int, float]]],
                workers: list[str]) -> list[dict[str, Any]]:
    """Per version: seconds until 50/99/100% of the workers run it or a newer one (None: never)."""
    rows = []
    for v, t_pub in sorted(published.items()):
        times = []
        for w in workers:
            t = min((t for ver, t in loads.get(w, []) if ver >= v), default=None)
            times.append(None if t is None else max(0.0, t - t_pub))
        reached = sorted(t for t in times if t is not None)
        row: dict[str, Any] = {"version": v, "reached": len(reached), "of": len(workers)}
        for label, share in (("p50_s", 0.5), ("p99_s", 0.99), ("p100_s", 1.0)):
            need = max(1, -(-int(share * 100) * len(workers) // 100))
            row[label] = round(reached[need - 1], 2) if len(reached) >= need else None
        rows.append(row)
    return rows


def staleness(published: dict[int, float], loads: dict[str, list[tuple[int, float]]], workers: list[str],
              t_from: float, t_to: float, step_s: float = 1.0) -> dict[str, Any]:
    """How far behind each worker's policy is, sampled every ``step_s``: versions behind the newest
    published, and seconds since the version after the one it runs was published (0 when it runs
    the newest). The issue's bound: at most 2 versions or 60 s behind, whichever is longer."""
    max_v, max_s, samples, over = 0, 0.0, 0, 0
    t = t_from
    while t <= t_to:
        newest = max((v for v, tp in published.items() if tp <= t), default=0)
        for w in workers:
            running = max((v for v, tl in loads.get(w, []) if tl <= t), default=0)
            behind_v = newest - running
            behind_s = t - published[running + 1] if behind_v > 0 else 0.0
            max_v, max_s = max(max_v, behind_v), max(max_s, behind_s)
            samples += 1
            over += behind_v > 2 and behind_s > 60.0
        t += step_s
    return {"max_versions_behind": max_v, "max_seconds_behind": round(max_s, 1), "samples": samples,
            "samples_over_bound": over}


def jain(xs: list[int]) -> float | None:
    if not xs or not any(xs):
        return None
    return round(sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)), 4)


def segment_sizes(args: argparse.Namespace) -> dict[str, Any]:
    """What the segments carried: the recorded set and its payload sizes, or random bytes."""
    payloads = recorded_segment_payloads(args)
    if payloads is None:
        return {"source": "random", "payload_bytes": args.segment_bytes}
    sizes = sorted(len(p) for p in payloads)
    return {"source": str(args.recorded), "recorded_segments": len(sizes),
            "payload_bytes_median": sizes[len(sizes) // 2], "payload_bytes_max": sizes[-1]}


def orchestrate(args: argparse.Namespace) -> dict[str, Any]:
    from rulka.net.keys import add_worker, generate_keys
    from rulka.net.settings import NetworkSettings
    from rulka.net.status import query_status
    from rulka.server.server import Server

    load_before = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="rulka-fleet-"))
    keys = root / "keys"
    generate_keys(keys, ["localhost"])
    names = [f"w{i:03d}" for i in range(args.workers)]
    for n in names:
        add_worker(keys, n)
    net = {"chunk_bytes": args.chunk_bytes, "heartbeat_s": 1.0, "max_message_bytes": 256 << 20}
    if args.weights_streams is not None:
        net["weights_streams"] = args.weights_streams
    streams = NetworkSettings.from_config(net).weights_streams
    srv = Server(net, keys, bind_host="127.0.0.1", port=0).start()
    relay_pid = srv._process.pid  # type: ignore[union-attr]
    proxy = None
    proxy_totals: dict[str, Any] = {}
    port = srv.port
    procs: list[subprocess.Popen[str]] = []
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "1"}
    intake = None
    try:
        if args.mbit > 0:
            proxy = subprocess.Popen([sys.executable, "-m", "bench.throttle", "--target-port", str(srv.port),
                                      "--mbit", str(args.mbit)], stdout=subprocess.PIPE, text=True, env=env,
                                     cwd=REPO_ROOT)
            port = json.loads(proxy.stdout.readline())["port"]  # type: ignore[union-attr]
        cfg = {**net, "host": "localhost", "port": srv.port}
        intake = Intake(cfg, keys, args)
        if not intake.link.wait_connected(60):
            raise RuntimeError("the trainer link did not connect")
        groups = [names[i::args.procs] for i in range(args.procs)]
        for g in groups:
            cmd = [sys.executable, "-m", "bench.fleet", "--as-workers", "--names", ",".join(g), "--keys", str(keys),
                   "--port", str(port), "--segment-bytes", str(args.segment_bytes),
                   "--segment-s", str(args.segment_s / args.instances_per_worker), "--chunk-bytes", str(args.chunk_bytes),
                   "--ramp-s", str(args.ramp_s), "--recorded", getattr(args, "recorded", None) or "none"]
            cmd += [] if args.share_decode else ["--no-share-decode"]
            procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                          cwd=REPO_ROOT))
        for p in procs:
            if p.stdout.readline().strip() != "ready":  # type: ignore[union-attr]
                raise RuntimeError("a worker process did not start")
        cpu0 = proc_cpu_s(relay_pid)
        t0 = time.time()
        t_end = t0 + args.ramp_s + args.seconds
        for p in procs:
            p.stdin.write(f"{t_end}\n")  # type: ignore[union-attr]
            p.stdin.flush()  # type: ignore[union-attr]
        while time.time() < t0 + args.ramp_s:  # every worker connects before the first version
            intake.take(0.2)
        intake.loop(t_end)
        drain_end = time.time() + args.drain_s
        while time.time() < drain_end:
            intake.take(0.2)
        results: list[dict[str, Any]] = []
        workers_cpu = 0.0
        for p in procs:
            out, _ = p.communicate(timeout=60)
            if out.strip():
                got = json.loads(out.strip().splitlines()[-1])
                results += got["workers"]
                workers_cpu += got["cpu_s"]
        cpu = proc_cpu_s(relay_pid) - cpu0
        wall = time.time() - t0
        status = query_status({**cfg}, keys)["server"]
        peak_rss = proc_status_mb(relay_pid, "VmHWM")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        if intake is not None:
            intake.link.close()
        if proxy is not None:
            proxy.terminate()
            out, _ = proxy.communicate(timeout=10)
            lines = out.strip().splitlines() if out else []
            proxy_totals = json.loads(lines[-1]) if lines else {}
        srv.stop()
        shutil.rmtree(root, ignore_errors=True)
    # bytes the relay took in (segments, the trainer's weights) and handed to its sockets (payloads,
    # without TLS and frame overhead). Handed over is not sent: in one 50 Mbit/s run the relay counted
    # 1004 MB to workers where 648 MB crossed the link (proxy bytes_down_mb, and the loads agree);
    # in others they matched within 1%. With a proxy, its bytes_down_mb is what was sent.
    in_mb = sum(c["bytes_in"] for c in status["clients"].values()) / 1e6
    out_mb = sum(c["bytes_out"] for c in status["clients"].values()) / 1e6
    to_workers_mb = sum(c["bytes_out"] for n, c in status["clients"].items() if n != "trainer") / 1e6
    moved_mb = in_mb + out_mb
    sent = {r["name"]: r["sent"] for r in results}
    unique = {(w, q) for (w, q) in intake.received}
    lost = sum(1 for w, n in sent.items() for q in range(n) if (w, q) not in unique)
    duplicated = sum(c - 1 for c in intake.received.values())
    per_worker = [intake.per_worker.get(n, 0) for n in names]
    worker_disc: dict[str, int] = {}
    for r in results:
        for k, v in r["disconnects"].items():
            worker_disc[k] = worker_disc.get(k, 0) + v
    relay_disc = {k: v for k, v in status["bad_inputs"].items()}
    loads = {r["name"]: r["loads"] for r in results}
    lags = intake.lags
    return {
        "benchmark": "fleet",
        "config": {k: v for k, v in vars(args).items() if k not in ("as_workers", "names", "keys", "port")},
        "machine_load_1m": [round(load_before[0], 1), round(os.getloadavg()[0], 1)],
        # `--instances-per-worker K`: each connection stands for one PC running K game instances
        "game_instances": args.workers * args.instances_per_worker,
        "wall_s": round(wall, 1),
        "relay": {"cpu_s": round(cpu, 2), "moved_mb": round(moved_mb, 1), "in_mb": round(in_mb, 1),
                  "out_mb": round(out_mb, 1), "to_workers_mb": round(to_workers_mb, 1),
                  "weights_streams": streams,
                  "cpu_s_per_mb": round(cpu / moved_mb, 4) if moved_mb else None,
                  "peak_rss_mb": round(peak_rss, 1), "weights_versions": status.get("weights_versions"),
                  "weights_superseded": status.get("weights_superseded")},
        # the simulated workers' processes (TLS, reassembly, signature, zstd, safetensors): they share
        # this machine's cores with the relay, so a slow reach here can be theirs, not the relay's
        "workers_cpu_s": round(workers_cpu, 1),
        "weights": {"bytes_per_version": intake.publish_bytes[-1] if intake.publish_bytes else None,
                    "published": len(intake.published),
                    "reach": reach_times(intake.published, loads, names),
                    "loads_per_worker_mean": round(sum(len(v) for v in loads.values()) / max(1, len(loads)), 2)},
        "staleness": staleness(intake.published, loads, names, min(intake.published.values(), default=t_end),
                               t_end) if intake.published else None,
        "policy_lag_versions": {"segments": len(lags), "mean": round(sum(lags) / len(lags), 3) if lags else None,
                                "p50": percentile(lags, 0.5), "p99": percentile(lags, 0.99),
                                "max": max(lags) if lags else None},
        "segments": {"sent": sum(sent.values()), "received_unique": len(unique), "lost": lost,
                     "duplicated": duplicated, "bad_payload": intake.bad_payload, **segment_sizes(args)},
        "disconnects": {"relay_counters": relay_disc, "workers_seen": worker_disc,
                        "reconnects": sum(max(0, r["connects"] - 1) for r in results),
                        "slow_client": relay_disc.get("slow_client", 0)},
        "fairness": {"jain_index": jain(per_worker), "min": min(per_worker, default=0),
                     # workers that joined late in the ramp sent fewer: each one's share of what it sent
                     "min_received_over_sent": round(min((intake.per_worker.get(w, 0) / n for w, n in sent.items() if n),
                                                         default=0.0), 3),
                     "max": max(per_worker, default=0),
                     "min_over_max": round(min(per_worker) / max(per_worker), 3) if per_worker and max(per_worker) else None},
        "worker_bad_inputs": {k: sum(r["bad"].get(k, 0) for r in results) for r in results for k in r["bad"]},
        "workers_reported": len(results),
        # bytes_down: what crossed the throttled link to the workers (TLS records included)
        "proxy": {"mbit": args.mbit, "bytes_down_mb": round(proxy_totals["bytes_down"] / 1e6, 1)
                  if "bytes_down" in proxy_totals else None},
    }


# the three sizes (issue 66) and a quick default; flags given on the command line win
SCENARIOS: dict[str, dict[str, Any]] = {
    "quick": {"workers": 16, "procs": 2, "seconds": 40.0, "ramp_s": 5.0, "network": "48x36", "mbit": 20.0},
    "fleet256": {"workers": 256, "procs": 4, "seconds": 60.0, "ramp_s": 40.0, "network": "48x36", "mbit": 100.0},
    "guide_50mbit": {"workers": 40, "procs": 2, "seconds": 150.0, "ramp_s": 10.0, "network": "guide", "mbit": 50.0},
    # the same 40 game instances as 10 PCs running `rulka-worker --instances 4`: 10 connections
    "guide_50mbit_pc4": {"workers": 10, "instances_per_worker": 4, "procs": 2, "seconds": 150.0, "ramp_s": 10.0,
                         "network": "guide", "mbit": 50.0},
    "guide_unthrottled": {"workers": 40, "procs": 2, "seconds": 60.0, "ramp_s": 10.0, "network": "guide",
                          "mbit": 0.0, "publish_s": 20.0},
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--procs", type=int, default=2, help="processes the simulated workers are spread over")
    parser.add_argument("--seconds", type=float, default=60.0, help="run time after the ramp")
    parser.add_argument("--ramp-s", type=float, default=10.0, help="workers connect spread over this")
    parser.add_argument("--drain-s", type=float, default=5.0)
    parser.add_argument("--network", choices=sorted(NETWORKS), default="48x36", help="weights size preset")
    parser.add_argument("--params", type=int, default=None, help="weights parameters (overrides --network)")
    parser.add_argument("--dtype", choices=["float16", "float32", "int8"], default="float16",
                        help="trainer.weights_dtype (int8: opt-in, lossy)")
    parser.add_argument("--weights-streams", type=int, default=None,
                        help="the relay's network.weights_streams (default: the product's)")
    parser.add_argument("--publish-s", type=float, default=10.0, help="seconds between weights versions")
    parser.add_argument("--mbit", type=float, default=0.0, help="relay upload rate (0: no proxy)")
    parser.add_argument("--segment-bytes", type=int, default=40_000, help="with --recorded none: random bytes per segment")
    parser.add_argument("--recorded", default="",
                        help="recorded segments (bench.feed --record DIR); default: the 48x36 sim run's, recorded once "
                             "into ~/.cache/rulka/bench-segments; none: --segment-bytes random bytes")
    parser.add_argument("--segment-s", type=float, default=10.0, help="a segment every N s per worker (200 steps at 20 Hz)")
    parser.add_argument("--instances-per-worker", type=int, default=1, metavar="K",
                        help="game instances behind each connection, as `rulka-worker --instances K`: the "
                             "connection sends K times the segments and receives each version once")
    parser.add_argument("--chunk-bytes", type=int, default=256 * 1024)
    parser.add_argument("--no-share-decode", dest="share_decode", action="store_false",
                        help="every simulated worker decompresses and parses every version itself "
                             "(default: once per worker process per version; signatures are checked per worker)")
    parser.add_argument("--as-workers", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--names", help=argparse.SUPPRESS)
    parser.add_argument("--keys", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--scenarios", default="quick",
                        help=f"comma-separated presets run one after the other ({', '.join(SCENARIOS)})")
    args = parser.parse_args(argv)
    if args.as_workers:
        return run_workers(args)
    if args.instances_per_worker < 1:
        parser.error("--instances-per-worker must be at least 1")
    given = {a.dest for a in parser._actions if any(o in (argv if argv is not None else sys.argv[1:])
                                                     for o in a.option_strings)}
    if not args.recorded:
        from bench.feed import cached_recording

        args.recorded = str(cached_recording("sim_image"))
    runs = {}
    for name in args.scenarios.split(","):
        run = argparse.Namespace(**vars(args))
        for key, value in SCENARIOS[name].items():
            if key not in given:
                setattr(run, key, value)
        if "params" not in given:
            run.params = NETWORKS[run.network]
        runs[name] = orchestrate(run)
    print(json.dumps({"benchmark": "fleet", "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
