#!/usr/bin/env bash
# Regenerate the seed corpora of the fuzz targets, fuzz/corpus/<target>/, from the repository's
# own files:
#   onnx          the example models, and every model the ONNX test suites build
#                 (tests/common/onnx_builder.rs saves them when LIPFP_FUZZ_SEED_DIR is set);
#                 fuzz/run.sh and tests/fuzz_smoke.rs also read the real exports of
#                 tests/corpus/ (models and arrays) in place
#   npy           the example arrays cut to a few rows, in every dtype, order and version
#   npz           a few of those rows as `.npz` test sets (stored, deflated, inputs only)
#   csv           the same rows as CSV test sets (label first, label last, inputs only)
#   policy        lipfp.toml, the policy reference of docs/policy.md and a few variants
#   certificates  files `lipfp certify` / `lipfp check` write for a few example points
# (the last three, and the example models, by the ignored test `write_seed_corpus` of
# tests/fuzz_smoke.rs). Seeds have a file extension; what libFuzzer adds has none and is not
# committed (fuzz/.gitignore).
set -euo pipefail
cd "$(dirname "$0")/.."

# per-file and per-target limits for the ONNX test-suite models
max_model_bytes=4096
max_target_bytes=$((180 * 1024))

for t in onnx npy npz csv policy certificates; do
  mkdir -p "fuzz/corpus/$t"
  find "fuzz/corpus/$t" -maxdepth 1 -type f -name '*.*' -delete
done

cargo test --release -q --test fuzz_smoke -- --ignored --exact write_seed_corpus

models=$(mktemp -d)
trap 'rm -rf "$models"' EXIT
LIPFP_FUZZ_SEED_DIR="$models" cargo test --release -q \
  --test onnx --test oracles -- onnx_spec:: export_shapes:: execution_model:: refusals:: >/dev/null
total=$(du -cb fuzz/corpus/onnx/*.* | tail -1 | cut -f1)
# smallest first, so the budget keeps as many distinct graphs as it can
for f in $(ls -Sr "$models"); do
  size=$(stat -c %s "$models/$f")
  ((size <= max_model_bytes)) || continue
  ((total + size <= max_target_bytes)) || break
  cp "$models/$f" "fuzz/corpus/onnx/test-$f"
  total=$((total + size))
done

for t in onnx npy npz csv policy certificates; do
  printf '%-13s %4d seeds, %7d bytes\n' "$t" \
    "$(find "fuzz/corpus/$t" -maxdepth 1 -type f -name '*.*' | wc -l)" \
    "$(find "fuzz/corpus/$t" -maxdepth 1 -type f -name '*.*' -printf '%s\n' | awk '{s+=$1} END {print s+0}')"
done
