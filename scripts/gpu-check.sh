#!/usr/bin/env bash
# chatd on a GPU, checked and measured on a bare machine that has a GPU and no
# network (and no Node): the WebGPU exactness check (scripts/webgpu-exactness.ts:
# the CPU provider's tokens, token for token) and the GPU benchmark (npm run bench
# -- --device webgpu: chatd against llama.cpp's Vulkan build on the same GPU, the
# CPU provider and the captured agent turns beside), with the 1.5B-shape random
# model built there by chatd's own converter. See docs/performance.md.
#
# 1. Here, with a network (npm and Debian's apt; a C++ compiler), fill the carried
#    folder, .gpu-carry/ (git-ignored, about 62 MiB: with the repository more than
#    a borrowed machine takes, so a call carries node, node_modules, the debs and
#    the one of graph-capture.tar.xz and llama.cpp-vulkan.tar.xz its steps need):
#      scripts/gpu-check.sh --pack
#    debs/: the Vulkan loader and glvnd (apt-get download libvulkan1 libglvnd0
#    libglx0 libegl1 libgl1 libopengl0 libgles2; NVIDIA's Vulkan driver needs
#    glvnd), and scripts/gpu-carry.ts's Node, node_modules and llama.cpp's Vulkan
#    build (node-llama-cpp's npm libraries, its tools compiled here), and graph
#    capture's runtime (onnxruntime-web's WebGPU build, Dawn's Node binding).
# 2. There, with the repository and .gpu-carry/ copied over, as root (the Vulkan
#    loader's packages are unpacked into / when the machine has no loader):
#      scripts/gpu-check.sh OUT_DIR [--small] [--step STEPS] [--rounds N] [-- BENCH OPTIONS]
#    writes into OUT_DIR: environment.txt, exactness.json, forms.json,
#    steps-webgpu.txt, graph-capture*.json, server-profile.json, bench-webgpu.json,
#    and gpu-check.log.
#    It works in a copy of the repository under $CHATD_GPU_WORK (default
#    /tmp/chatd-gpu-check), where it unpacks what it carried, so the repository
#    itself is left as it was. STEPS, comma-separated, in order (the default,
#    all, is every one): setup unpacks; exactness; prepare builds the models, the
#    slow part (the 1.5B shape in chatd's GPU form; for forms the other GPU forms;
#    for bench the CPU form and llama.cpp's GGUF unless its options leave them
#    out), side by side; forms measures the GPU forms on onnxruntime directly
#    (scripts/bench/gpu-forms.ts, forms.json) and the engine's decode step
#    (bench:steps, steps-webgpu.txt); capture measures the decode step with the
#    WebGPU provider's graph capture, through onnxruntime-web over Dawn's Node
#    binding and through onnxruntime's C API (koffi; scripts/bench/graph-capture.ts,
#    graph-capture.json), and profiles chatd's
#    step node by node and GPU program by program (kernel-profile.ts, in the same
#    JSON: kernel_profile); profile runs the server under V8's profiler
#    (scripts/bench/server-profile.ts, server-profile.json); bench measures.
#    Steps can run in separate calls on the same machine (the work folder stays),
#    e.g. where one command may run 10 minutes: --step setup,exactness,prepare,
#    then --step bench.
#    The default benchmark is one round of one stream and 8, 128 tokens each;
#    BENCH OPTIONS go to npm run bench (e.g. --rounds 3). bench-webgpu.json is
#    written after each measurement (marked partial until the end), so a run cut
#    short still brings back what it measured.
#    --small measures a small model of the same kind
#    (scripts/models/qwen2-small-shape.config.json) without the agent turns: for
#    checking this script itself in minutes, e.g. on Mesa's software renderer.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CARRY="${CHATD_GPU_CARRY:-$ROOT/.gpu-carry}"
WORK="${CHATD_GPU_WORK:-${TMPDIR:-/tmp}/chatd-gpu-check}"
DEBS=(libvulkan1 libglvnd0 libglx0 libegl1 libgl1 libopengl0 libgles2)

if [ "${1:-}" = "--pack" ]; then
  mkdir -p "$CARRY/debs"
  rm -f "$CARRY"/debs/*.deb
  (cd "$CARRY/debs" && apt-get download "${DEBS[@]}")
  PATH="$ROOT/node_modules/.bin:$PATH" node "$ROOT/scripts/gpu-carry.ts" --out "$CARRY"
  exit 0
fi

OUT="${1:-}"
if [ -z "$OUT" ] || [ "${OUT#-}" != "$OUT" ]; then
  echo "usage: scripts/gpu-check.sh OUT_DIR [--small] [--step setup,exactness,prepare,forms,capture,profile,bench|all] [--rounds N] [-- BENCH OPTIONS]" >&2
  echo "       scripts/gpu-check.sh --pack" >&2
  exit 2
fi
shift
SMALL=0
STEP=all
ROUNDS=1
BENCH_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --small) SMALL=1 ;;
    --step) STEP="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    --) shift; BENCH_ARGS=("$@"); break ;;
    *) echo "gpu-check: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[ "$STEP" = all ] && STEP=setup,exactness,prepare,capture,forms,profile,bench
IFS=, read -r -a STEPS <<< "$STEP"
for step in "${STEPS[@]}"; do
  case "$step" in setup|exactness|prepare|forms|capture|profile|bench) ;; *) echo "gpu-check: --step takes setup, exactness, prepare, forms, capture, profile and bench, comma-separated, or all" >&2; exit 2 ;; esac
done
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
exec > >(tee -a "$OUT/gpu-check.log") 2>&1
say () { echo "[gpu-check $(date -u +%H:%M:%S)] $*"; }

# ---- the environment, set again by every step -------------------------------------
export XDG_RUNTIME_DIR="$WORK/xdg"
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
# NVIDIA's ICD file where a bare machine keeps it, when the loader's own folders have none.
if [ -z "${VK_DRIVER_FILES:-}" ] && ! ls /etc/vulkan/icd.d/nvidia_icd*.json /usr/share/vulkan/icd.d/nvidia_icd*.json >/dev/null 2>&1 \
  && [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
# Without a GPU's device node only a software renderer can run WebGPU; llama.cpp leaves those out
# unless told, so both are told to use the same one.
if ! ls /dev/nvidia[0-9]* /dev/dri/renderD* >/dev/null 2>&1; then export GGML_VK_VISIBLE_DEVICES="${GGML_VK_VISIBLE_DEVICES:-0}"; fi
export PATH="$WORK/node/bin:$PATH"
REPO="$WORK/repo"
LDCONFIG="$(command -v ldconfig || echo /sbin/ldconfig)"

setup () {
  for f in node.tar.xz node_modules.tar.xz; do
    [ -f "$CARRY/$f" ] || { echo "gpu-check: $CARRY/$f is missing: run scripts/gpu-check.sh --pack where there is a network, and carry .gpu-carry/ over" >&2; exit 1; }
  done
  # The other two are for one step each, and all four with the repository pass the 64 MiB a
  # borrowed machine takes: carry the one the call needs (capture or bench's llama.cpp).
  for f in graph-capture.tar.xz llama.cpp-vulkan.tar.xz; do
    [ -f "$CARRY/$f" ] || say "$f was not carried: $([ "$f" = graph-capture.tar.xz ] && echo 'the capture step cannot run' || echo 'bench needs -- --no-llama-cpp')"
  done
  if ! "$LDCONFIG" -p | grep -q 'libvulkan\.so\.1 '; then
    [ "$(id -u)" = 0 ] || { echo "gpu-check: the Vulkan loader is not installed, and unpacking its packages into / needs root" >&2; exit 1; }
    say "unpacking the Vulkan loader and glvnd ($(ls "$CARRY"/debs/*.deb | wc -l) packages) into /"
    for f in "$CARRY"/debs/*.deb; do dpkg -x "$f" /; done
    "$LDCONFIG"
  fi
  say "unpacking Node, node_modules and what else was carried into $WORK"
  rm -rf "$WORK/node" "$REPO"
  mkdir -p "$WORK/node" "$REPO/bench-out/llama.cpp-vulkan"
  tar -C "$WORK/node" -xJf "$CARRY/node.tar.xz"
  tar -C "$ROOT" --exclude=./node_modules --exclude=./.gpu-carry --exclude=./bench-out --exclude=./.git --exclude=./.tap -cf - . | tar -C "$REPO" -xf -
  tar -C "$REPO" -xJf "$CARRY/node_modules.tar.xz"
  [ ! -f "$CARRY/graph-capture.tar.xz" ] || tar -C "$REPO" -xJf "$CARRY/graph-capture.tar.xz"
  [ ! -f "$CARRY/llama.cpp-vulkan.tar.xz" ] || tar -C "$REPO/bench-out/llama.cpp-vulkan" -xJf "$CARRY/llama.cpp-vulkan.tar.xz"
  {
    echo "date: $(date -u +%FT%TZ)"
    echo "node: $(node --version)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
    echo "gpu devices: $(ls /dev/nvidia[0-9]* /dev/dri/renderD* 2>/dev/null | tr '\n' ' ')"
    echo "vulkan loader: $("$LDCONFIG" -p | grep -m1 'libvulkan\.so\.1 ' | sed 's/.*=> //')"
    echo "VK_DRIVER_FILES: ${VK_DRIVER_FILES:-unset}; ICD files: $(ls /etc/vulkan/icd.d /usr/share/vulkan/icd.d /usr/local/nvidia/share/vulkan/icd.d 2>/dev/null | grep json | tr '\n' ' ')"
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    # Whether this onnxruntime-node lets the WebGPU provider's graph capture be turned on.
    (cd "$REPO" && node scripts/graph-capture-check.ts)
  } > "$OUT/environment.txt" 2>&1 || true
  cat "$OUT/environment.txt"
}

exactness () {
  say "WebGPU exactness check (stories260k, the CPU's tokens)"
  (cd "$REPO" && node scripts/webgpu-exactness.ts --json "$OUT/exactness.json")
}

MODEL_CONFIG=()
[ "$SMALL" = 1 ] && MODEL_CONFIG=(--model-config scripts/models/qwen2-small-shape.config.json)

prepare () {
  # llama.cpp's model and the CPU form only where the benchmark measures them; the other GPU forms only for forms.
  local parts=(gpu-model) pids=() part failed=0
  if [[ ",$STEP," == *",bench,"* ]]; then
    if [[ " ${BENCH_ARGS[*]} " != *" --no-llama-cpp "* ]]; then
      [ -f "$REPO/bench-out/llama.cpp-vulkan/.chatd-vulkan.json" ] || { echo "gpu-check: llama.cpp's Vulkan build was not carried (llama.cpp-vulkan.tar.xz): carry it, or pass -- --no-llama-cpp" >&2; exit 1; }
      parts+=(llama)
    fi
    [[ " ${BENCH_ARGS[*]} " == *" --no-cpu-compare "* ]] || parts+=(cpu-model)
  fi
  [[ ",$STEP," == *",forms,"* ]] && parts+=(gpu-model-standard gpu-model-causal gpu-model-int8)
  [[ ",$STEP," == *",capture,"* ]] && parts+=(gpu-model-static-decode)
  say "building the models side by side (chatd's converter, llama.cpp's GGUF): ${parts[*]}"
  for part in "${parts[@]}"; do
    (cd "$REPO" && node scripts/bench/gpu-prepare.ts "$part" "${MODEL_CONFIG[@]}") &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  [ "$failed" = 0 ] || { echo "gpu-check: a model could not be built (above)" >&2; exit 1; }
}

forms () {
  local args=(--json "$OUT/forms.json" "${MODEL_CONFIG[@]}")
  [ "$SMALL" = 1 ] && args+=(--prompt 40 --gen 8 --long 124 --long-runs 31,62)
  say "the GPU forms and onnxruntime's WebGPU options, on onnxruntime directly"
  (cd "$REPO" && node scripts/bench/gpu-forms.ts "${args[@]}")
  # The engine's own decode step on the GPU form (its cache layout, no server): between the bare step and the server's.
  local steps=(--device webgpu --gpu --rows 1,8 --steps 64 --no-huge-pages "${MODEL_CONFIG[@]}")
  [ "$SMALL" = 1 ] && steps+=(--steps 8 --prompt 31)
  say "the engine's decode step on the GPU (npm run bench:steps)"
  (cd "$REPO" && node scripts/bench-steps.ts "${steps[@]}") | tee "$OUT/steps-webgpu.txt"
}

capture () {
  [ -d "$REPO/node_modules/onnxruntime-web" ] || { echo "gpu-check: graph capture's runtime was not carried (graph-capture.tar.xz)" >&2; return 1; }
  # The decode step with and without the provider's graph capture, each against the CPU's tokens:
  # one stream, 8 rows together, one stream in a cache as long as the 1.5B's context (does a
  # step's cost follow the buffer's length or the row's?), and one at an agent's context (4,096
  # prompt tokens).
  # The first run has onnxruntime-web without capture too; the others compare capture with chatd's step.
  # Each has onnxruntime's native provider capturing the step too (through its C API: native).
  # Each also profiles 32 more of chatd's steps (--profile-steps): each node's host time and each GPU
  # program's duration, so the report says what of the step is the host's and what the GPU's.
  local runs failed=0 name rows gen len prompt variants
  if [ "$SMALL" = 1 ]; then runs=("graph-capture 1 16 128 24 node,plain,capture,native" "graph-capture-rows 2 16 128 24 node,capture,native")
  else runs=("graph-capture 1 128 1024 24 node,plain,capture,native" "graph-capture-rows 8 64 1024 24 node,capture,native" "graph-capture-long 1 64 16384 24 node,capture,native" "graph-capture-agent 1 64 8192 4096 node,capture,native"); fi
  for run in "${runs[@]}"; do
    read -r name rows gen len prompt variants <<< "$run"
    say "the decode step with the WebGPU provider's graph capture (onnxruntime-web over Dawn's Node binding, and onnxruntime's own through its C API): $rows row(s), a $prompt-token prompt, a $len-position cache"
    (cd "$REPO" && node scripts/bench/graph-capture.ts --json "$OUT/$name.json" --rows "$rows" --prompt "$prompt" --gen "$gen" --max-len "$len" --variants "$variants" --profile-steps 32 "${MODEL_CONFIG[@]}") || failed=1
  done
  return "$failed"
}

profile () {
  local args=(--device webgpu --top 80 --json "$OUT/server-profile.json" "${MODEL_CONFIG[@]}")
  [ "$SMALL" = 1 ] && args+=(--gen 32 --no-agent-turns)
  say "where the server's time goes on the GPU (scripts/bench/server-profile.ts)"
  (cd "$REPO" && node scripts/bench/server-profile.ts "${args[@]}")
}

bench () {
  local args=(--device webgpu --rounds "$ROUNDS" --json "$OUT/bench-webgpu.json" "${MODEL_CONFIG[@]}")
  if [ "$SMALL" = 1 ]; then
    args+=(--prompt 32 --gen 16 --concurrency 1,2 --no-agent-turns)
  else
    args+=(--concurrency 1,8)
  fi
  say "benchmark: chatd on WebGPU (and with the step replayed: --capture), llama.cpp on Vulkan, chatd on the CPU"
  (cd "$REPO" && node scripts/bench.ts "${args[@]}" "${BENCH_ARGS[@]}")
}

status=0
for step in "${STEPS[@]}"; do
  case "$step" in
    setup) setup ;;
    exactness) exactness || status=$? ;;
    prepare) prepare ;;
    forms) forms || status=$? ;;
    capture) capture || status=$? ;;
    profile) profile || status=$? ;;
    bench) bench ;;
  esac
done
say "done; results in $OUT ($(ls "$OUT" | tr '\n' ' '))"
exit "$status"
