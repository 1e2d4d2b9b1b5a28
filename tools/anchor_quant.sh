#!/bin/bash
# Quantized decode, llama.cpp against cctune on the same random 1.1B weights: llama.cpp's Q8_0
# and Q4_0 GGUFs (llama-bench -p 0 -n 64) against cctune's generate recipe with
# Int8WeightOnlyQuantizer and Int4WeightOnlyQuantizer (groupsize 32 and 256), quantizing the
# same bf16 checkpoint at load. Pairs alternate, llama.cpp first, one process at a time, and the
# script prints one DETAIL and one CASE line per case (the style of the side-by-side script of
# the shared anchors folder; see docs/generation.md, "Speed against llama.cpp").
#   tools/anchor_quant.sh GENERATE_BIN [REPS=3]
# GENERATE_BIN: cctune's generate (bazel-bin/recipes/generate of a plain, optimised build).
# Needs the llama.cpp build and the models the anchors' build.sh and make_models.sh leave in
# ${CCTUNE_ANCHORS_CACHE:-$HOME/.cache/cctune-anchors}; makes models/tiny1b-q4_0.gguf there with
# llama-quantize from the f32 GGUF when it is missing.
# Environment: CCTUNE_ANCHORS_CACHE, CCTUNE_ANCHORS_THREADS (default 2), ANCHOR_QUANT_CASES
# (default "q8 q4g32 q4g256"), ANCHOR_QUANT_TOKENS (default 64).
# cctune's decode tokens/s is generate's own "Decode: N-1 tokens, T sec" line of the run with
# max_new_tokens N (the tokens after the first over their time; what llama-bench's tg rate
# times); DETAIL also shows the side-by-side script's estimate (N - 1) / (T_N - T_1) from
# "Time for inference" at max_new_tokens N and 1, which two processes' noise enters.
# llama.cpp's is llama-bench's tg rate (avg_ts). On a shared machine the pairs' ratios scatter
# with the other load (DETAIL prints load1 at the runs' start); DETAIL also gives each
# program's best run and their ratio, the least disturbed figures. Peak RSS from
# /usr/bin/time -v (GB = 1e9 bytes); cctune's includes quantizing at load (the bf16
# checkpoint's pages it read).
set -uo pipefail

log() { echo "[anchor_quant] $*" >&2; }
die() { echo "[anchor_quant] error: $*" >&2; exit 1; }

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
fi
GEN=$(readlink -f "$1")
[ -f "$GEN" ] && [ -x "$GEN" ] || die "not an executable: $1"
REPS=${2:-3}
[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "REPS must be a positive integer, not '$REPS'"
TH=${CCTUNE_ANCHORS_THREADS:-2}
[[ $TH =~ ^[1-9][0-9]*$ ]] || die "CCTUNE_ANCHORS_THREADS must be a positive integer, not '$TH'"
NT=${ANCHOR_QUANT_TOKENS:-64}
[[ $NT =~ ^[1-9][0-9]*$ ]] && [ "$NT" -gt 1 ] || die "ANCHOR_QUANT_TOKENS must be > 1, not '$NT'"
CASES=${ANCHOR_QUANT_CASES:-q8 q4g32 q4g256}
for c in $CASES; do
  case $c in
  q8|q4g32|q4g256) ;;
  *) die "unknown case '$c' in ANCHOR_QUANT_CASES (q8, q4g32, q4g256)" ;;
  esac
done
[ -n "${CASES// /}" ] || die "ANCHOR_QUANT_CASES is empty"
CACHE=${CCTUNE_ANCHORS_CACHE:-$HOME/.cache/cctune-anchors}
LLAMA_BIN=$CACHE/llama.cpp/build/bin
MODELS=$CACHE/models
LB=$LLAMA_BIN/llama-bench
[ -x "$LB" ] || die "llama.cpp is not built in $CACHE (run the anchors' build.sh)"
for f in tiny1b-hf/model.safetensors tiny1b-f32.gguf tiny1b-q8_0.gguf cctune_1b.yaml; do
  [ -f "$MODELS/$f" ] || die "missing $MODELS/$f (run the anchors' make_models.sh)"
done
[ -x /usr/bin/time ] || die "/usr/bin/time is missing (apt-get install time)"
command -v python3 >/dev/null || die "python3 is missing"
CFG=$MODELS/cctune_1b.yaml

if [ ! -f "$MODELS/tiny1b-q4_0.gguf" ]; then
  [ -x "$LLAMA_BIN/llama-quantize" ] || die "missing $LLAMA_BIN/llama-quantize"
  log "llama-quantize tiny1b-f32.gguf -> tiny1b-q4_0.gguf (Q4_0)"
  "$LLAMA_BIN/llama-quantize" "$MODELS/tiny1b-f32.gguf" "$MODELS/tiny1b-q4_0.gguf.tmp" Q4_0 \
    > "$CACHE/quantize_q4_0.log" 2>&1 ||
    { tail -20 "$CACHE/quantize_q4_0.log" >&2; rm -f "$MODELS/tiny1b-q4_0.gguf.tmp";
      die "llama-quantize failed (log: $CACHE/quantize_q4_0.log)"; }
  mv "$MODELS/tiny1b-q4_0.gguf.tmp" "$MODELS/tiny1b-q4_0.gguf"
fi

R=$CACHE/runs/quant-$(date +%Y%m%d-%H%M%S)
mkdir -p "$R"
log "run folder $R"
{ echo "generate: $GEN"; echo "cpu: $(grep -m1 'model name' /proc/cpuinfo)";
  echo "simd: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|amx)' | sort | tr '\n' ' ')";
  echo "reps: $REPS threads: $TH tokens: $NT cases: $CASES"; } > "$R/info.txt"

run() {  # NAME COMMAND...: stdout, stderr and /usr/bin/time -v into $R/NAME.{out,err,time}
  local name=$1 rc l0
  shift
  l0=$(cut -d' ' -f1 /proc/loadavg)
  /usr/bin/time -v -o "$R/$name.time" "$@" > "$R/$name.out" 2> "$R/$name.err"
  rc=$?
  echo "$name rc=$rc load1=$l0" >> "$R/log.txt"
  [ $rc -eq 0 ] || log "warning: $name failed (rc=$rc): $(tail -1 "$R/$name.err")"
  return 0
}
llama() {  # NAME MODEL
  run "$1" env OMP_NUM_THREADS="$TH" "$LB" -m "$MODELS/$2" -p 0 -n "$NT" -t "$TH" -r 1 -o json
}
cct() {  # NAME N OVERRIDE...
  local name=$1 n=$2
  shift 2
  run "$name" env OMP_NUM_THREADS="$TH" "$GEN" --config "$CFG" dtype=bf16 "max_new_tokens=$n" "$@"
}

Q8=cctune.training.quantization.Int8WeightOnlyQuantizer
Q4=cctune.training.quantization.Int4WeightOnlyQuantizer
for i in $(seq 1 "$REPS"); do
  for c in $CASES; do
    log "case $c, pair $i of $REPS"
    case $c in
    q8)
      llama "q8_llama_$i" tiny1b-q8_0.gguf
      cct "q8_cctN_$i" "$NT" "quantizer._component_=$Q8"
      cct "q8_cct1_$i" 1 "quantizer._component_=$Q8" ;;
    q4g32|q4g256)
      g=${c#q4g}
      llama "${c}_llama_$i" tiny1b-q4_0.gguf
      cct "${c}_cctN_$i" "$NT" "quantizer._component_=$Q4" "quantizer.groupsize=$g"
      cct "${c}_cct1_$i" 1 "quantizer._component_=$Q4" "quantizer.groupsize=$g" ;;
    esac
  done
done

python3 - "$R" "$REPS" "$NT" "$CASES" <<'EOF' | tee "$R/summary.txt"
import json, re, statistics, sys

R, REPS, NT, CASES = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split()
WHAT = {"q8": "llama.cpp Q8_0 vs cctune Int8WeightOnlyQuantizer",
        "q4g32": "llama.cpp Q4_0 vs cctune Int4WeightOnlyQuantizer groupsize 32",
        "q4g256": "llama.cpp Q4_0 vs cctune Int4WeightOnlyQuantizer groupsize 256"}


def read(name, ext):
    try:
        with open(f"{R}/{name}.{ext}", encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def rss_gb(name):
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", read(name, "time"))
    return int(m.group(1)) * 1024 / 1e9 if m else None


def llama_tps(name):
    try:
        return float(json.loads(read(name, "out"))[0]["avg_ts"])
    except Exception:
        return None


def cct_secs(name):
    m = re.search(r"Time for inference: ([\d.]+) sec total", read(name, "err"))
    return float(m.group(1)) if m else None


def cct_decode(c, i):
    m = re.search(r"^Decode: (\d+) tokens, ([\d.]+) sec", read(f"{c}_cctN_{i}", "err"), re.M)
    return int(m.group(1)) / float(m.group(2)) if m and float(m.group(2)) > 0 else None


def cct_rate(c, i):
    big, one = cct_secs(f"{c}_cctN_{i}"), cct_secs(f"{c}_cct1_{i}")
    if big is None or one is None or big <= one:
        return None
    m = re.search(r"([\d.]+) tokens/sec", read(f"{c}_cctN_{i}", "err"))
    if m and abs(float(m.group(1)) * big - NT) > 1.5:
        print(f"NOTE {c}_cctN_{i} generated {float(m.group(1)) * big:.0f} of {NT} tokens")
    return (NT - 1) / (big - one)


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, spec):
    return "NA" if x is None else format(x, spec)


def lst(xs, spec):
    return "[" + " ".join(fmt(x, spec) for x in xs) + "]"


lines = []
for c in CASES:
    idx = range(1, REPS + 1)
    lt = [llama_tps(f"{c}_llama_{i}") for i in idx]
    ct = [cct_decode(c, i) for i in idx]
    two = [cct_rate(c, i) for i in idx]
    ratios = [a / b if a and b else None for a, b in zip(ct, lt)]
    bl, bc = max([x for x in lt if x], default=None), max([x for x in ct if x], default=None)
    print(f"DETAIL {c} ({WHAT[c]}, decode {NT} tokens) llamacpp={lst(lt, '.2f')} "
          f"cctune={lst(ct, '.2f')} ratios={lst(ratios, '.3f')} "
          f"cctune_two_run={lst(two, '.2f')} best_llamacpp={fmt(bl, '.2f')} "
          f"best_cctune={fmt(bc, '.2f')} best_ratio={fmt(bc / bl if bc and bl else None, '.3f')}")
    lines.append(f"CASE {c} llamacpp={fmt(med(lt), '.2f')} cctune={fmt(med(ct), '.2f')} "
                 f"ratio={fmt(med(ratios), '.3f')} "
                 f"rss_llamacpp_gb={fmt(med([rss_gb(f'{c}_llama_{i}') for i in idx]), '.3f')} "
                 f"rss_cctune_gb={fmt(med([rss_gb(f'{c}_cctN_{i}') for i in idx]), '.3f')}")
loads = re.findall(r"load1=([\d.]+)", read("log", "txt"))
if loads:
    print(f"DETAIL load1 at the runs' start: min {min(map(float, loads)):.2f} "
          f"max {max(map(float, loads)):.2f}")
for line in lines:
    print(line)
EOF
echo "RUN dir=$R wall_s=$SECONDS threads=$TH reps=$REPS"
