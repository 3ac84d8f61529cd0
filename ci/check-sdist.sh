#!/usr/bin/env bash
# The source distribution is real: `maturin sdist`, then `pip install` of it into a fresh
# virtual environment (pip builds it with the Rust toolchain and m4, nothing else of this
# checkout), then `lipfp check` on the root policy with the installed binary. A cold release
# build of lipfp and GMP (about 5 minutes on 2 cores: 302 s from `pip install` to the installed
# binary, 305 s to the root check's verdict), so it runs in the release workflow's sdist job and
# on demand, not in every `.ci/run`.
#
#   ci/check-sdist.sh [OUT]    (OUT: where the sdist and the environments go; default target/sdist)
#
# Prints the sdist's name and the seconds from `pip install` to the verdict.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-target/sdist}"
command -v cargo >/dev/null 2>&1 || { echo "check-sdist: needs a Rust toolchain (cargo)"; exit 2; }
command -v m4 >/dev/null 2>&1 || { echo "check-sdist: needs m4 (GMP's build)"; exit 2; }

rm -rf "$out"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
python3 -m venv "$out/maturin-venv"
"$out/maturin-venv/bin/python" -m pip install -q --disable-pip-version-check -r ci/wheel-requirements.txt
"$out/maturin-venv/bin/maturin" sdist --out "$out/dist"
sdist="$(ls "$out"/dist/lipfp-*.tar.gz)"
echo "sdist: $sdist ($(du -h "$sdist" | cut -f1))"

# a fresh environment: pip unpacks the sdist in a temporary folder and builds it there (PEP 517,
# the build backend pyproject.toml names), so nothing of this checkout but the sdist is used
python3 -m venv "$out/venv"
start=$(date +%s)
CARGO_TARGET_DIR="$out/cargo-target" "$out/venv/bin/python" -m pip install \
  --disable-pip-version-check --no-cache-dir "$sdist"
built=$(date +%s)
"$out/venv/bin/lipfp" --version
"$out/venv/bin/lipfp" check -q --config lipfp.toml
echo "sdist: pip install $((built - start)) s, lipfp check on the root policy passed, $(($(date +%s) - start)) s in all"
