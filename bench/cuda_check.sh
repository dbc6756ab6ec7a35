#!/usr/bin/env bash
# The checks a session lent a GPU machine runs there in one call (BENCHMARKS.md "CUDA (a lent GPU
# machine)" records what they gave), inside DEADLINE seconds (570: the device tool's 10-minute call,
# with a margin; each step's timeout is what is left of it). Everything it writes lands in $OUT
# (default /tmp/cuda_check):
#   log.txt            the GPU, torch, each step's summary, the run's last progress lines
#   learner_cuda.json  bench/learner.py's CUDA rows: AMP; AMP + a prefetching sampler thread; the same
#                      learner through Trainer.run (prefetch on and off)
#   learner_steps_cuda.json
#                      the learner-step rows of issue 67 (--steps, on the guide-size network; each row
#                      also in learner_steps.err as measured): the optimizer's foreach and Adam's
#                      fused kernel, Munchausen's fused target forwards, and the ladder from today's
#                      defaults through bfloat16 autocast, pinned or device batches (memory.batch_device)
#                      to the loss compiled with CUDA graphs (nn.training.compile_mode reduce-overhead),
#                      each rung paired with the one before it in interleaved windows
#   actor_cuda.json    bench/actor.py's CUDA rows (worker.device: cuda): the guide-size and 48x36
#                      networks' batch-1 greedy step, eager fp32 vs the captured fp16 graph, their
#                      agreement, ms per forward of N = 1, 2, 4, 8 observations (the batched design)
#                      and the memory of one process's CUDA context
#   tmnf_fake_cuda.json bench/tmnf_fake.py's instances rows on CUDA: 1, 2, 4 processes, each a TMNF
#                      fake at 160x120 acted on by the guide-size network, actions/s per instance
#                      and device memory (ACTOR_ROWS=0 skips these two)
#   trainer_loop_cuda.json
#                      issue 67's item 3: bench/trainer_loop.py on the guide-size network (config "guide":
#                      batch 512, AMP bfloat16, memory.batch_device auto) with trainer.device $DEVICE: a run
#                      with 4 simulator workers, then resumed with no worker and fed its own recorded
#                      segments by 8 synthetic workers (bench/feed.py: real relay, TLS, credentials) at 1.5x
#                      what the bare learner consumes; "ratio" = the trainer role's updates/s over the bare
#                      learner's, paired in 3 windows (target >= 0.9), with ingest, queue depth, credit waits
#                      (FEED_ROW=0 skips it)
#   run.log, metrics.jsonl, best.json, eval_best.json, eval_final.json
#                      `rulka run` of the guide-size image network (160x120 frames, float MLP 256,
#                      dense 1024, batch 512) on the GPU with AMP bfloat16 and device batches (what
#                      docs/performance.md recommends for a GPU trainer) and the loss compiled with
#                      CUDA graphs (to exercise that path end to end; still to be measured) and
#                      $WORKERS simulator workers (acting on the GPU: worker.device) for $MINUTES minutes (less if DEADLINE is near), then
#                      `rulka eval` of its best policy and of its final weights
# Packages the machine lacks travel as wheels in .whl/ (see the device tool's notes); on a machine
# with rulka installed none are needed (WHEELS=none skips them). Knobs: WORKERS (12), MINUTES (2),
# SECONDS_PER_ROW (6), DEADLINE (570), ACTOR_ROWS (1), DEVICE (cuda; cpu makes a dry run of the same commands on a
# machine without a GPU).
set -u
OUT=${OUT:-/tmp/cuda_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
DEVICE=${DEVICE:-cuda}
WORKERS=${WORKERS:-12}
MINUTES=${MINUTES:-2}
SECONDS_PER_ROW=${SECONDS_PER_ROW:-6}
DEADLINE=${DEADLINE:-570}
SECONDS=0
# a step's timeout: its own bound, or what is left before DEADLINE when that is less (at least 5 s)
left() { local l=$((DEADLINE - SECONDS)); [ "$l" -lt "$1" ] && echo $((l > 5 ? l : 5)) || echo "$1"; }
LOG="$OUT/log.txt"
WHEELS=${WHEELS:-.whl}
if ls "$WHEELS"/*.whl > /dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl \
        || { echo "wheel install failed" | tee -a "$LOG"; exit 1; }
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
{
    date -u
    command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv
    $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.version.cuda)"
    nproc
} 2>&1 | tee -a "$LOG"

echo "== 1. bench/learner.py on $DEVICE ($SECONDS s in)" | tee -a "$LOG"
extra=""
[ "$DEVICE" = cuda ] && extra="--prefetch"
timeout "$(left 150)" $PY -m bench.learner --devices "$DEVICE" --seconds "$SECONDS_PER_ROW" $extra \
    > "$OUT/learner_cuda.json" 2> "$OUT/learner.err"
echo "rc=$? $(tail -c 600 "$OUT/learner.err")" | tee -a "$LOG"
# the learner-step rows (issue 67) in a call of their own: each row also goes to learner_steps.err as
# it is measured, so a call cut short by its timeout keeps the rows it finished
timeout "$(left 270)" $PY -m bench.learner --devices "$DEVICE" --seconds "$SECONDS_PER_ROW" --steps --steps-only \
    --networks linesight_160x120_dense1024 > "$OUT/learner_steps_cuda.json" 2> "$OUT/learner_steps.err"
echo "steps rc=$?" | tee -a "$LOG"
grep -h '^{' "$OUT/learner_steps_cuda.json" > /dev/null 2>&1 || grep -h '"learner_step_row"' "$OUT/learner_steps.err" \
    | $PY -c "import json, sys; print(json.dumps({'steps': [json.loads(l) for l in sys.stdin]}))" > "$OUT/learner_steps_cuda.json"
cat "$OUT/learner_cuda.json" "$OUT/learner_steps_cuda.json" > "$OUT/learner_all.json"
$PY - "$OUT/learner_all.json" <<'EOF' 2>&1 | tee -a "$LOG"
import json, sys
for line in open(sys.argv[1]):
    if not line.strip():
        continue
    d = json.loads(line)
    for r in d.get("results", []):
        print(r["network"], "compiled" if r.get("compiled") else "", "prefetch" if r.get("prefetch") else "",
              r["batches_per_s"], "batches/s", r.get("step_ms"), "ms/step, sample", r["sample_collate_ms"], "ms")
    for r in d.get("trainer_path", []):
        print(r["network"], "trainer path", r["batches_per_s"], "batches/s, over bare", r["over_bare"],
              "prefetch", r.get("prefetch"), "batches", r.get("batch_mode"))
    for r in d.get("steps", []):
        b, a = r.get("before", {}), r.get("after", {})
        print("step", r["step"], r.get("network"), "before", b.get("batches_per_s", b.get("error")),
              "after", a.get("batches_per_s", a.get("error")), "ratio", r.get("ratio"), r.get("ratio_rounds"))
EOF

echo "== 2. unit tests with CUDA branches ($SECONDS s in)" | tee -a "$LOG"
timeout "$(left 120)" $PY -m pytest -q -p no:cacheprovider tests/test_iqn_agent.py tests/test_learner_step.py \
    tests/test_batch_device.py tests/test_deferred_priorities.py 2>&1 | tail -4 | tee -a "$LOG"

timeout "$(left 60)" $PY -m pytest -q -p no:cacheprovider tests/test_acting.py -k "cuda or weights_swap" 2>&1 \
    | tail -4 | tee -a "$LOG"

if [ "${ACTOR_ROWS:-1}" != 0 ]; then
    echo "== 2b. the worker's actor on $DEVICE: bench.actor and bench.tmnf_fake instances ($SECONDS s in)" | tee -a "$LOG"
    timeout "$(left 100)" $PY -m bench.actor --parts paths --devices "$DEVICE" --seconds 1 --rounds 2 --frames 50 \
        --no-compile > "$OUT/actor_cuda.json" 2> "$OUT/actor.err"
    echo "actor rc=$? $(tail -c 300 "$OUT/actor.err")" | tee -a "$LOG"
    timeout "$(left 90)" $PY -m bench.tmnf_fake --parts instances --devices "$DEVICE" --seconds 4 \
        > "$OUT/tmnf_fake_cuda.json" 2> "$OUT/tmnf_fake.err"
    echo "tmnf_fake rc=$? $(tail -c 300 "$OUT/tmnf_fake.err")" | tee -a "$LOG"
    $PY - "$OUT/actor_cuda.json" "$OUT/tmnf_fake_cuda.json" <<'EOF' 2>&1 | tee -a "$LOG"
import json, sys
actor, tmnf = (json.load(open(p)) for p in sys.argv[1:3])
for r in actor["paths"]:
    print("actor", r["network"], r["device"], r["path"], r.get("ms"), "ms", r.get("over_eager"), "x eager,",
          "agrees", r.get("agrees_with_eager"), r.get("ms_per_forward_of_n", ""), r.get("device_used_mb", ""))
for r in tmnf["instances"]:
    print("tmnf_fake", r["device"], r["instances"], "instances:", r["actions_per_s_per_instance"], "actions/s each,",
          "device MB", r.get("device_used_mb_all"), "reserved/process", r.get("torch_reserved_mb_per_process"))
EOF
fi

if [ "${FEED_ROW:-1}" != 0 ]; then
    echo "== 2c. the trainer role fed by synthetic workers, over the bare learner, on $DEVICE ($SECONDS s in)" | tee -a "$LOG"
    timeout "$(left 180)" $PY -m bench.trainer_loop --configs guide --trainer-device "$DEVICE" --workers 4 --seconds 15 \
        --pinning on --paired 3 --feed 1.5x --feeders 8 --feed-procs 4 --no-loaded-baseline \
        > "$OUT/trainer_loop_cuda.json" 2> "$OUT/trainer_loop.err"
    echo "trainer_loop rc=$? $(tail -c 300 "$OUT/trainer_loop.err")" | tee -a "$LOG"
    $PY - "$OUT/trainer_loop_cuda.json" <<'EOF' 2>&1 | tee -a "$LOG"
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    p = r.get("paired", {})
    print("trainer role over bare", r.get("ratio"), r.get("ratio_pairs"), "role", p.get("role_updates_per_s"),
          "bare", p.get("alone_updates_per_s"), "busy", p.get("learner_busy"), "starved", p.get("learner_starved"),
          "other", p.get("learner_other"), "feed", {k: v for k, v in p.get("feed", {}).items() if k != "recorded"},
          p.get("error", ""))
EOF
fi

echo "== 3. rulka run, guide-size image network, $WORKERS workers, $MINUTES min ($SECONDS s in)" | tee -a "$LOG"
RUN=/tmp/cuda_check_run
rm -rf "$RUN"
run_s=$(left 240)
# the run's minutes shrink to what is left before DEADLINE (start-up, stop and the two evals: ~110 s)
run_min=$(awk -v m="$MINUTES" -v l="$((DEADLINE - SECONDS))" 'BEGIN { x = (l - 110) / 60; if (x < m) m = x; if (m < 0.5) m = 0.5; print m }')
echo "run minutes $run_min" | tee -a "$LOG"
timeout "$run_s" $PY -m rulka.cli run configs/sim_iqn.yaml --workers "$WORKERS" --minutes "$run_min" --run-dir "$RUN" \
    --stop-timeout 30 \
    --set trainer.device="$DEVICE" --set worker.device="$DEVICE" --set logging.wandb.enabled=false \
    --set nn.vis.no_image=false --set nn.vis.image_size.width=160 --set nn.vis.image_size.height=120 \
    --set nn.float.mlp.hidden_dim=256 --set nn.decoder.dense_hidden_dimension=1024 \
    --set nn.training.use_jit=true --set nn.training.compile_mode=reduce-overhead --set nn.training.use_amp=true \
    --set nn.training.amp_dtype=bfloat16 --set memory.batch_device=auto --set training.batch_size=512 \
    > "$OUT/run.log" 2>&1
echo "run rc=$?" | tee -a "$LOG"
tail -n 6 "$OUT/run.log" | tee -a "$LOG"
cp "$RUN/metrics.jsonl" "$OUT/" 2> /dev/null
cp "$RUN/best/best.json" "$OUT/" 2> /dev/null
$PY -c "import json,sys; b=json.load(open(sys.argv[1])); print('best: v', b['version'], 'frames', b['frames'], 'updates', b['updates'], {m: v['race_time_ms'] for m, v in b['maps'].items()})" \
    "$RUN/best/best.json" 2>&1 | tee -a "$LOG"
for which in best final; do
    flag=""
    [ "$which" = final ] && flag="--final"
    timeout "$(left 60)" $PY -m rulka.cli eval "$RUN" $flag --episodes 3 --json > "$OUT/eval_$which.json" 2>> "$LOG"
    echo "eval $which rc=$?" | tee -a "$LOG"
    $PY -c "import json,sys; o=json.load(open(sys.argv[1]))['overall']; print('$which:', {k: o[k] for k in ('finished', 'episodes', 'race_time_ms_mean', 'race_time_ms_best', 'return_mean')})" \
        "$OUT/eval_$which.json" 2>&1 | tee -a "$LOG"
done
date -u | tee -a "$LOG"
echo "total $SECONDS s" | tee -a "$LOG"
