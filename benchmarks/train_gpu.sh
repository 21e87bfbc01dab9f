#!/usr/bin/env bash
# Trainer checks on one lent GPU machine, run from the repository root; prints a PASS/FAIL/SKIP table (under 8 minutes).
#   bash benchmarks/gpu_wheels.sh        # here, with PyPI: v1's own pure-Python dependencies into .whl/ (~7 MiB)
#   bash benchmarks/train_gpu.sh         # there (no network): installs .whl/ into /tmp/site, then the checks
#   bash benchmarks/train_gpu.sh --cpu   # the same checks on CPU with a tiny model (the script's own dry run)
# Checks: bf16 training steps, gradient checkpointing, FSDP2 under torchrun (1 rank per GPU, at most 2; gloo on --cpu),
# flash-attn steps and the vLLM recipe only where they import (SKIP with the reason otherwise).
# Exit status: 1 when any check failed.
set -uo pipefail
cd "$(dirname "$0")/.."
CPU=0
[ "${1:-}" = "--cpu" ] && CPU=1
LOGS=/tmp/v1_train_gpu && rm -rf "$LOGS" && mkdir -p "$LOGS"
PY_TAG=$(python3 -c "import sys; print(f'{sys.version_info[0]}{sys.version_info[1]}')")
if compgen -G ".whl/*.whl" > /dev/null && [ "$CPU" = 1 ] && [ "$PY_TAG" != 312 ]; then
    echo "note: .whl/ holds cp312 wheels and this is Python $PY_TAG: the dry run uses this environment's packages"
elif compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "FAIL: pip install of .whl/ into /tmp/site"; exit 1; }
    export PYTHONPATH="/tmp/site:$PWD"
else
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
SIZE=()
if [ "$CPU" = 1 ]; then
    export CUDA_VISIBLE_DEVICES=""
    SIZE=(--hidden 64 --layers 2 --vocab 512 --samples 8 --micro 4 --prompt 16 --completion 16)
    GPUS=2  # two gloo ranks
else
    GPUS=$(python3 -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
    [ "$GPUS" -ge 1 ] || { echo "FAIL: torch sees no CUDA GPU (use --cpu for the dry run)"; exit 1; }
    [ "$GPUS" -gt 2 ] && GPUS=2
fi
NAMES=() STATES=() NOTES=()
record() { NAMES+=("$1"); STATES+=("$2"); NOTES+=("$3"); echo "[$2] $1: $3"; }
check() {  # check NAME SECONDS COMMAND...: PASS when it exits 0 within SECONDS, with its last output line as the note
    local name=$1 seconds=$2; shift 2
    local log="$LOGS/${name// /_}.log"
    echo "== $name: $*"
    if timeout "$seconds" "$@" > "$log" 2>&1; then
        record "$name" PASS "$(grep -v '^\s*$' "$log" | tail -1 | cut -c1-160)"
    else
        local status=$?
        tail -15 "$log"
        record "$name" FAIL "exit $status$([ $status = 124 ] && echo " (over ${seconds} s)") - log $log"
    fi
}
check "bf16 steps" 120 python3 benchmarks/train_gpu.py --steps 5 "${SIZE[@]}"
check "gradient checkpointing" 120 python3 benchmarks/train_gpu.py --steps 3 --gradient-checkpointing "${SIZE[@]}"
check "FSDP2 torchrun x$GPUS" 180 python3 -m torch.distributed.run --standalone --nproc-per-node "$GPUS" \
    benchmarks/train_gpu.py --fsdp --steps 3 "${SIZE[@]}"
why=$(python3 -c "import flash_attn" 2>&1 | tail -1)
if [ "$CPU" = 1 ]; then
    record "flash-attn steps" SKIP "CPU dry run"
elif [ -z "$why" ]; then
    check "flash-attn steps" 120 python3 benchmarks/train_gpu.py --steps 3 --attention flash_attention_2
else
    record "flash-attn steps" SKIP "flash_attn does not import: $why"
fi
why=$(python3 -c "import vllm" 2>&1 | tail -1)
if [ "$CPU" = 1 ]; then
    record "vLLM recipe" SKIP "CPU dry run (tests/train/test_distributed.py runs vLLM's CPU build)"
elif [ -n "$why" ]; then
    record "vLLM recipe" SKIP "vllm does not import: $why"
else
    # one trainer rank on GPU 0; vLLM on GPU 1 when there is one, else beside it on GPU 0 with 40% of its memory
    python3 - "$GPUS" "$LOGS/vllm.toml" <<'PY' || record "vLLM config" FAIL "could not write $LOGS/vllm.toml"
import sys
from v1.train import TrainConfig
gpus, out = int(sys.argv[1]), sys.argv[2]
config = TrainConfig.load("configs/train/tiny_first_letter_vllm.toml")
share = ["--gpu-memory-utilization", "0.4"] if gpus < 2 else []
inference = config.inference.model_copy(update={"gpus": [1 if gpus >= 2 else 0], "vllm_args": [*config.inference.vllm_args, *share]})
open(out, "w").write(config.model_copy(update={"inference": inference}).to_toml())
PY
    check "vLLM recipe" 300 python3 -m v1.train "$LOGS/vllm.toml" --max-steps 5 --output-dir "$LOGS/vllm_out" --no-progress
fi
echo
printf '%-26s %-5s %s\n' CHECK STATE NOTE
failed=0
for i in "${!NAMES[@]}"; do
    printf '%-26s %-5s %s\n' "${NAMES[$i]}" "${STATES[$i]}" "${NOTES[$i]}"
    [ "${STATES[$i]}" = FAIL ] && failed=1
done
exit $failed
