#!/usr/bin/env bash
# Run lipfp's fuzz targets (cargo-fuzz, nightly Rust): fuzz/run.sh [SECONDS] [TARGET...]
#
#   SECONDS  per target (default 600)
#   TARGET   onnx, npy, npz, csv, policy, certificates, vnnlib (default: all seven)
#   JOBS     environment: targets run at once (default 2)
#
# Each target starts from its corpus fuzz/corpus/<target>/ (the committed seeds, plus what
# earlier runs added; see fuzz/make_corpus.sh; the onnx and npy targets also read the real
# exports of tests/corpus/) with its dictionary fuzz/dict/<target>.dict,
# 10 s per input and 2 GiB of memory at most. Logs go to fuzz/logs/<target>.log, crashing
# inputs to fuzz/artifacts/<target>/. A summary line per target (executions, executions per
# second, coverage) ends the run; the exit status is 1 when a target found a crash, a leak, a
# timeout or an out-of-memory input.
#
# Needs the nightly toolchain and cargo-fuzz: rustup toolchain install nightly;
# cargo install cargo-fuzz.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

seconds=${1:-600}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(onnx npy npz csv policy certificates vnnlib)
jobs=${JOBS:-2}

# scratch directories of fuzzers that are no longer running (see fuzz/src/lib.rs, Scratch)
for d in /dev/shm/lipfp-fuzz-* "${TMPDIR:-/tmp}"/lipfp-fuzz-*; do
  [[ -d $d ]] || continue
  pid=${d#*lipfp-fuzz-}
  pid=${pid%%-*}
  kill -0 "$pid" 2>/dev/null || rm -rf "$d"
done

cargo +nightly fuzz build
mkdir -p fuzz/logs

run_one() {
  local t=$1
  mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
  # one thread per fuzzer: rayon's pool would only compete with the other fuzzers
  # the real exports of tests/corpus/ (models, inputs, labels) seed the onnx and npy targets
  # in place (libFuzzer writes what it finds to the first directory only)
  local extra=()
  case $t in onnx | npy) extra=("$root/tests/corpus") ;; esac
  RAYON_NUM_THREADS=1 cargo +nightly fuzz run "$t" "$root/fuzz/corpus/$t" "${extra[@]}" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -dict="$root/fuzz/dict/$t.dict" -print_final_stats=1 \
    >"fuzz/logs/$t.log" 2>&1
}

status=0
pids=()
names=()
for t in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs)); do
    sleep 1
  done
  run_one "$t" &
  pids+=($!)
  names+=("$t")
done
for k in "${!pids[@]}"; do
  if ! wait "${pids[$k]}"; then
    status=1
    echo "${names[$k]}: FAILED (fuzz/logs/${names[$k]}.log, fuzz/artifacts/${names[$k]}/)"
  fi
done

for t in "${targets[@]}"; do
  log=fuzz/logs/$t.log
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  speed=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 | grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9]+[a-zA-Z]*' || true)
  printf '%-13s executions %10s  exec/s %6s  %s\n' "$t" "${execs:-?}" "${speed:-?}" "${last:-?}"
done
exit $status
