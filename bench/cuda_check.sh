#!/usr/bin/env bash
# The checks a session lent a GPU machine runs there in one call (BENCHMARKS.md "CUDA (a lent GPU
# machine)" records what they gave). Everything it writes lands in $OUT (default /tmp/cuda_check):
#   log.txt            the GPU, torch, the CUDA unit tests' summary, the run's last progress lines
#   learner_cuda.json  bench/learner.py's CUDA rows: AMP; AMP + a prefetching sampler thread;
#                      AMP + torch.compile; the same learner through Trainer.run
#   run.log, metrics.jsonl, best.json, eval_best.json, eval_final.json
#                      `rulka run` of the guide-size image network (160x120 frames, float MLP 256,
#                      dense 1024, batch 512, torch.compile and AMP on) on the GPU with $WORKERS
#                      simulator workers for $MINUTES minutes, then `rulka eval` of its best policy
#                      and of its final weights (torch.compile is on here to exercise that path end to
#                      end, though the learner rows measured it slower than eager: docs/performance.md)
# Packages the machine lacks travel as wheels in .whl/ (see the device tool's notes); on a machine
# with rulka installed none are needed (WHEELS=none skips them). Knobs: WORKERS (12), MINUTES (2.5), SECONDS_PER_ROW (6),
# DEVICE (cuda; cpu makes a dry run of the same commands on a machine without a GPU).
set -u
OUT=${OUT:-/tmp/cuda_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
DEVICE=${DEVICE:-cuda}
WORKERS=${WORKERS:-12}
MINUTES=${MINUTES:-2.5}
SECONDS_PER_ROW=${SECONDS_PER_ROW:-6}
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

echo "== 1. unit tests with CUDA branches" | tee -a "$LOG"
timeout 150 $PY -m pytest -q -p no:cacheprovider tests/test_iqn_agent.py 2>&1 | tail -4 | tee -a "$LOG"

echo "== 2. bench/learner.py on $DEVICE" | tee -a "$LOG"
extra=""
[ "$DEVICE" = cuda ] && extra="--compile --prefetch"
timeout 300 $PY bench/learner.py --devices "$DEVICE" --seconds "$SECONDS_PER_ROW" $extra \
    > "$OUT/learner_cuda.json" 2> "$OUT/learner.err"
echo "rc=$? $(tail -c 600 "$OUT/learner.err")" | tee -a "$LOG"
$PY - "$OUT/learner_cuda.json" <<'EOF' 2>&1 | tee -a "$LOG"
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    for r in d["results"]:
        print(r["network"], "compiled" if r.get("compiled") else "", "prefetch" if r.get("prefetch") else "",
              r["batches_per_s"], "batches/s", r.get("step_ms"), "ms/step, sample", r["sample_collate_ms"], "ms")
    for r in d["trainer_path"]:
        print(r["network"], "trainer path", r["batches_per_s"], "batches/s, over bare", r["over_bare"])
EOF

echo "== 3. rulka run, guide-size image network, $WORKERS workers, $MINUTES min" | tee -a "$LOG"
RUN=/tmp/cuda_check_run
rm -rf "$RUN"
timeout 420 $PY -m rulka.cli run configs/sim_iqn.yaml --workers "$WORKERS" --minutes "$MINUTES" --run-dir "$RUN" \
    --stop-timeout 40 \
    --set trainer.device="$DEVICE" --set logging.wandb.enabled=false \
    --set nn.vis.no_image=false --set nn.vis.image_size.width=160 --set nn.vis.image_size.height=120 \
    --set nn.float.mlp.hidden_dim=256 --set nn.decoder.dense_hidden_dimension=1024 \
    --set nn.training.use_jit=true --set nn.training.use_amp=true --set training.batch_size=512 \
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
    timeout 120 $PY -m rulka.cli eval "$RUN" $flag --episodes 3 --json > "$OUT/eval_$which.json" 2>> "$LOG"
    echo "eval $which rc=$?" | tee -a "$LOG"
    $PY -c "import json,sys; o=json.load(open(sys.argv[1]))['overall']; print('$which:', {k: o[k] for k in ('finished', 'episodes', 'race_time_ms_mean', 'race_time_ms_best', 'return_mean')})" \
        "$OUT/eval_$which.json" 2>&1 | tee -a "$LOG"
done
date -u | tee -a "$LOG"
