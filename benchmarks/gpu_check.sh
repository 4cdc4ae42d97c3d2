#!/usr/bin/env bash
# One GPU check: `streamvid bench` on the Qwen2.5-VL-3B and -7B architectures (random weights: speed does not depend
# on weight values) in bfloat16 on 448 x 448 frames at 2 fps, each with streams of 1, 5 and 30 minutes, the
# re-encoding baseline (16 / 32 / 64 frames) and 30 s live with a question a second; then many streams on one engine
# for the 7B architecture (`bench --streams 1,8,32`: real time at 1 fps per stream with a question every 5 s, and
# saturated, batched against one forward per stream). About 8-10 minutes on one H100/H200-class GPU in all (each
# part is bounded by `timeout`).
#
#   bash benchmarks/gpu_check.sh                      # writes runs/gpu_check/<arch>/bench.json, prints summaries
#   ARCHES=tiny DEVICE=cpu DTYPE=float32 BENCH_ARGS="--minutes 0.2 --interference-s 2 --repeats 1 --questions 1" \
#       bash benchmarks/gpu_check.sh                  # the same script on a CPU with the bundled model (its test)
#
# Needs the package installed (pip install -e . -c constraints.txt; transformers >= 5.24, carried as wheels to a
# machine without network). Exit status: non-zero if any arch fails.
set -uo pipefail
cd "$(dirname "$0")/.."
ARCHES=${ARCHES:-"3b 7b"}
DEVICE=${DEVICE:-cuda}
DTYPE=${DTYPE:-bfloat16}
OUT=${OUT:-runs/gpu_check}
PER_ARCH_S=${PER_ARCH_S:-280}
BENCH_ARGS=${BENCH_ARGS:-"--minutes 1 5 30 --questions 5 --repeats 3 --interference-s 30"}
STREAMS_ARCH=${STREAMS_ARCH:-7b}
STREAMS_ARGS=${STREAMS_ARGS:-"--quick --streams 1,8,32 --fps 1"}
STREAMS_S=${STREAMS_S:-300}
python - <<'PY'
import platform, torch, transformers
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
print(f"gpu_check: torch {torch.__version__}, transformers {transformers.__version__}, python "
      f"{platform.python_version()}, {gpu}", flush=True)
PY
status=0
for arch in $ARCHES; do
    px=448
    echo "gpu_check: --arch $arch --device $DEVICE --dtype $DTYPE --frame-px $px $BENCH_ARGS" >&2
    # shellcheck disable=SC2086
    if ! timeout "$PER_ARCH_S" python -m streamvid.cli bench --arch "$arch" --device "$DEVICE" --dtype "$DTYPE" \
            --frame-px "$px" $BENCH_ARGS --out "$OUT/$arch" --json; then
        echo "gpu_check: $arch failed or ran past ${PER_ARCH_S}s" >&2
        status=1
    fi
done
if [ -n "$STREAMS_ARCH" ]; then
    echo "gpu_check: --arch $STREAMS_ARCH --device $DEVICE --dtype $DTYPE --frame-px 448 $STREAMS_ARGS" >&2
    # shellcheck disable=SC2086
    if ! timeout "$STREAMS_S" python -m streamvid.cli bench --arch "$STREAMS_ARCH" --device "$DEVICE" \
            --dtype "$DTYPE" --frame-px 448 $STREAMS_ARGS --out "$OUT/${STREAMS_ARCH}_streams" --json; then
        echo "gpu_check: $STREAMS_ARCH streams failed or ran past ${STREAMS_S}s" >&2
        status=1
    fi
fi
exit $status
