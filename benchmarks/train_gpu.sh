#!/usr/bin/env bash
# Trainer checks on one lent GPU machine, run from the repository root; prints a PASS/FAIL table; any FAIL exits 1.
#   bash benchmarks/train_gpu.sh --install   # a GPU node with a registry: first the README's GPU command (grep'd from
#                                            # README.md, so they never drift), failing loudly if pip does
#   bash benchmarks/gpu_wheels.sh            # or, for a machine without network: v1's own pure-Python deps into .whl/
#   bash benchmarks/train_gpu.sh             # there: installs .whl/ into /tmp/site, then the checks
#   bash benchmarks/train_gpu.sh --cpu       # the same checks on CPU with a tiny model (the script's own dry run)
# Checks: bf16 training steps, gradient checkpointing, FSDP2 under torchrun (1 rank per GPU, at most 2; gloo on --cpu),
# the tiny recipe with v1's built-in inference (checkpoint, --resume, export), a new FSDP2 run from a pretrained folder, flash-attn steps, and the vLLM recipe with the NCCL weight sync in bf16, a checkpoint and --resume from it.
# On a GPU, flash-attn or vLLM that does not import is a FAIL with the reason, not a skip.
set -uo pipefail
cd "$(dirname "$0")/.."
CPU=0 INSTALL=0
[ "${1:-}" = "--cpu" ] && CPU=1
[ "${1:-}" = "--install" ] && INSTALL=1
if [ "$INSTALL" = 1 ]; then
    GPU_COMMAND=$(grep -E '^python -m pip install -e "\.\[train,vllm\]" wheel && ' README.md) \
        || { echo "FAIL: README.md has no GPU install command"; exit 1; }
    echo "== install: $GPU_COMMAND"
    bash -c "set -e; $GPU_COMMAND" || { echo "FAIL: the README's GPU command: $GPU_COMMAND"; exit 1; }
fi
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
# The tiny recipe end to end with v1's built-in inference (no vLLM): RL steps in the training dtype (bf16 on a GPU),
# a checkpoint every 2 steps, --resume to 6 steps, then the last checkpoint exported as one Hugging Face folder.
python3 - "$LOGS/tiny.toml" "$LOGS/tiny_out" "$CPU" <<'PY' || record "tiny config" FAIL "could not write $LOGS/tiny.toml"
import sys
from v1.train import TrainConfig
out, output_dir, cpu = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
config = TrainConfig.load("configs/train/tiny_first_letter.toml")
model = config.model.model_copy(update={"dtype": "float32" if cpu else "bfloat16"})
update = {"model": model, "output_dir": output_dir, "checkpoint_every": 2}
open(out, "w").write(config.model_copy(update=update).to_toml())
PY
check "v1 train tiny" 300 python3 -m v1.cli train "$LOGS/tiny.toml" --max-steps 4 --no-progress
check "v1 train tiny resume" 240 python3 -m v1.cli train "$LOGS/tiny.toml" --resume --max-steps 6 --no-progress
steps=$(wc -l < "$LOGS/tiny_out/metrics.jsonl" 2>/dev/null || echo 0)
[ "$steps" = 6 ] && record "tiny metrics" PASS "6 steps in metrics.jsonl" \
    || record "tiny metrics" FAIL "metrics.jsonl has $steps lines, expected 6"
check "v1 train export" 120 python3 -m v1.cli train export "$LOGS/tiny_out/checkpoints/step_6" "$LOGS/tiny_export"
# A new FSDP2 run from a save_pretrained folder (bf16 safetensors): each rank reads its own rows from the file.
python3 - "$LOGS/pretrained.toml" "$LOGS/pretrained" "$LOGS/pretrained_out" "$CPU" <<'PY' || record "pretrained config" FAIL "could not write $LOGS/pretrained.toml"
import sys
import torch
from v1.inference import build_tiny_model
from v1.train import TrainConfig
out, folder, output_dir, cpu = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
config = TrainConfig.load("configs/train/tiny_first_letter.toml")
model, tokenizer = build_tiny_model(config.model.tiny)
model.to(torch.bfloat16).save_pretrained(folder)
tokenizer.save_pretrained(folder)
model_config = config.model.model_copy(update={"tiny": None, "path": folder, "dtype": "float32" if cpu else "bfloat16"})
update = {"model": model_config, "output_dir": output_dir}
open(out, "w").write(config.model_copy(update=update).to_toml())
PY
check "FSDP2 x$GPUS from a pretrained folder" 240 python3 -m torch.distributed.run --standalone --nproc-per-node "$GPUS" \
    -m v1.train "$LOGS/pretrained.toml" --max-steps 2 --no-progress
why=$(python3 -c "import flash_attn" 2>&1 | tail -1)
if [ "$CPU" = 1 ]; then
    record "flash-attn steps" SKIP "CPU dry run"
elif [ -z "$why" ]; then
    check "flash-attn steps" 120 python3 benchmarks/train_gpu.py --steps 3 --attention flash_attention_2
else
    record "flash-attn steps" FAIL "flash_attn does not import: $why (install with --install)"
fi
why=$(python3 -c "import vllm" 2>&1 | tail -1)
if [ "$CPU" = 1 ]; then
    record "vLLM recipe" SKIP "CPU dry run (tests/train/test_distributed.py runs vLLM's CPU build)"
elif [ -n "$why" ]; then
    record "vLLM recipe" FAIL "vllm does not import: $why (install with --install)"
else
    # Trainer ranks on GPUs 0..R-1 (NCCL takes one GPU per rank): 2 with 3 GPUs or more, else 1; vLLM on the next GPU,
    # or beside rank 0 on GPU 0 with 40% of its memory on a one-GPU machine. bf16, the NCCL weight sync, a checkpoint
    # every 2 steps, then --resume for 2 more.
    ALL=$(python3 -c "import torch; print(torch.cuda.device_count())")
    RANKS=$([ "$ALL" -ge 3 ] && echo 2 || echo 1)
    python3 - "$ALL" "$RANKS" "$LOGS/vllm.toml" "$LOGS/vllm_out" <<'PY' || record "vLLM config" FAIL "could not write $LOGS/vllm.toml"
import sys
from v1.train import TrainConfig
gpus, ranks, out, output_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
config = TrainConfig.load("configs/train/tiny_first_letter_vllm.toml")
share = ["--gpu-memory-utilization", "0.4"] if gpus <= ranks else []
inference = config.inference.model_copy(
    update={"gpus": [ranks if gpus > ranks else 0], "weight_sync": "vllm_nccl", "vllm_args": [*config.inference.vllm_args, *share]}
)
model = config.model.model_copy(update={"dtype": "bfloat16"})
update = {"inference": inference, "model": model, "output_dir": output_dir, "checkpoint_every": 2}
open(out, "w").write(config.model_copy(update=update).to_toml())
PY
    check "vLLM x$RANKS ranks, NCCL sync" 300 python3 -m v1.cli train "$LOGS/vllm.toml" --nproc "$RANKS" --max-steps 4 --no-progress
    check "vLLM resume" 240 python3 -m v1.cli train "$LOGS/vllm.toml" --nproc "$RANKS" --resume --max-steps 6 --no-progress
    steps=$(wc -l < "$LOGS/vllm_out/metrics.jsonl" 2>/dev/null || echo 0)
    [ "$steps" = 6 ] && record "vLLM metrics" PASS "6 steps in metrics.jsonl" \
        || record "vLLM metrics" FAIL "metrics.jsonl has $steps lines, expected 6"
fi
echo
printf '%-26s %-5s %s\n' CHECK STATE NOTE
failed=0
for i in "${!NAMES[@]}"; do
    printf '%-26s %-5s %s\n' "${NAMES[$i]}" "${STATES[$i]}" "${NOTES[$i]}"
    [ "${STATES[$i]}" = FAIL ] && failed=1
done
exit $failed
