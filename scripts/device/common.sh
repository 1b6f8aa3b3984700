# What the GPU-machine scripts share; sourced, not run (`source scripts/device/common.sh`).

# link_nccl DIR: NCCL for cudarc, which loads it as `libnccl.so` — a name only NCCL's
# development package installs. Finds the system's (libnccl2) or PyTorch's wheel's
# (nvidia/nccl/lib) `libnccl.so.2`, links it under that name in DIR/nccl-lib, first on the
# loader path (only `libnccl.so` there: PyTorch still finds its own `libnccl.so.2`), and sets
# NCCL_SO (empty if none). Keeps NVLink multicast off (NCCL, PyTorch, NVSHMEM): on shared
# machines a program that uses it can put the host's GPUs out of service; nothing here needs it.
link_nccl() {
  NCCL_SO=$( {
    ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF}'
    find /usr/local/cuda*/ /usr/lib/x86_64-linux-gnu \
      $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) \
      -name 'libnccl.so.2' 2>/dev/null
  } | head -1)
  if [[ -n "$NCCL_SO" ]]; then
    mkdir -p "$1/nccl-lib"
    ln -sf "$NCCL_SO" "$1/nccl-lib/libnccl.so"
    export LD_LIBRARY_PATH="$1/nccl-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
}

# cache_len CONTEXT PROMPT_LEN TOKENS: the cache positions a decode benchmark needs — the
# context and the one each timed step writes, or the prompt and the generated tokens — rounded
# up to 64, as `decode_bench` and `decode_tp` compute them (both sides get the same).
cache_len() {
  local need=$(($1 + 1 > $2 + $3 - 1 ? $1 + 1 : $2 + $3 - 1))
  echo $(((need + 63) / 64 * 64))
}

# logged_step NAME COMMAND...: runs COMMAND (at most STEP_TIMEOUT seconds, default 300), its
# output to the terminal and appended to $LOG between lines naming the step, its exit status
# and time (and the total since T0); a failed step's name goes into FAILED.
logged_step() {
  local name=$1
  shift
  echo "=== $name: $*" | tee -a "$LOG"
  local t0=$SECONDS
  timeout "${STEP_TIMEOUT:-300}" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  echo "=== $name: exit $rc in $((SECONDS - t0)) s (total $((SECONDS - T0)) s)" | tee -a "$LOG"
  [[ $rc -eq 0 ]] || FAILED+=("$name")
}
