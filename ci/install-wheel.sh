#!/usr/bin/env bash
# Installs a released lipfp wheel, checked against the release's SHA256SUMS (ci/action.yml's
# `install: auto|wheel`; tests/cli/install_script.rs runs it offline against a local release).
#
#   ci/install-wheel.sh --version TAG --base URL --bin-dir DIR [--work DIR] [--platform OS-ARCH]
#                       [--require-wheel]
#
#   --base      where releases are downloaded from: URL/TAG/SHA256SUMS and URL/TAG/<wheel>
#               (GitHub: https://github.com/OWNER/lipfp/releases/download; a file:// URL works)
#   --bin-dir   where `lipfp` is linked (the action: ~/.cargo/bin)
#   --work      download and virtual-environment folder, new or empty (default: a new folder in
#               $RUNNER_TEMP or /tmp)
#   --platform  `uname -s`-`uname -m` to pick the wheel for (default: this machine's)
#   --require-wheel
#               a release without a verified wheel for the platform is an error (else: fall back)
#
# SHA256SUMS is the release's index: every line `<sha256>  <file>`. The wheel for the platform
# is the one it lists, downloaded and checked before anything is installed. Outcomes:
#   exit 0, `installed=true`   the wheel matched its sum, is installed and `lipfp --version` ran;
#   exit 0, `installed=false`  no wheel to install (the tag is a commit, the release has no
#                              SHA256SUMS, or it lists no wheel for the platform): build from
#                              source (an error with --require-wheel);
#   exit 1                     a malformed SHA256SUMS, a wheel it lists that cannot be downloaded,
#                              or one that does not match its sum: nothing is installed.
# `installed=...` is appended to $GITHUB_OUTPUT when set, and always printed.
set -euo pipefail

version="" base="" bin_dir="" work="" require=false
platform="$(uname -s)-$(uname -m)"
while (($#)); do
  case "$1" in
    --version) version="$2"; shift 2 ;;
    --base) base="$2"; shift 2 ;;
    --bin-dir) bin_dir="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --platform) platform="$2"; shift 2 ;;
    --require-wheel) require=true; shift ;;
    *) echo "::error title=lipfp::install-wheel.sh: unknown argument '$1'"; exit 2 ;;
  esac
done
if [ -z "$version" ] || [ -z "$base" ] || [ -z "$bin_dir" ]; then
  echo "::error title=lipfp::install-wheel.sh needs --version, --base and --bin-dir"
  exit 2
fi

outcome() {
  echo "installed=$1"
  if [ -n "${GITHUB_OUTPUT:-}" ]; then
    echo "installed=$1" >> "$GITHUB_OUTPUT"
  fi
}
fail() {
  echo "::error title=lipfp::$1; nothing was installed"
  exit 1
}
no_wheel() {
  if [ "$require" = true ]; then
    fail "$1 (install: wheel requires a verified wheel)"
  fi
  echo "::notice title=lipfp::$1; building lipfp from source"
  outcome false
  exit 0
}

if ! [[ "$version" =~ ^[A-Za-z0-9._+-]+$ ]]; then
  fail "version '$version' is not a tag name"
fi
if [[ "$version" =~ ^[0-9a-f]{7,40}$ ]]; then
  no_wheel "version $version is a commit, not a release tag"
fi
case "$platform" in
  Linux-x86_64) pattern='-(manylinux[^-]*|linux)_x86_64\.whl$' ;;
  Linux-aarch64) pattern='-(manylinux[^-]*|linux)_aarch64\.whl$' ;;
  Darwin-x86_64) pattern='macosx_.*_x86_64\.whl$' ;;
  Darwin-arm64) pattern='macosx_.*_arm64\.whl$' ;;
  MINGW*-x86_64 | MSYS*-x86_64) pattern='win_amd64\.whl$' ;;
  *) no_wheel "no wheel is built for $platform" ;;
esac

url="${base%/}/${version}"
if [ -z "$work" ]; then
  work="$(mktemp -d "${RUNNER_TEMP:-/tmp}/lipfp-wheel.XXXXXX")"
elif [ -e "$work" ] && [ -n "$(ls -A "$work")" ]; then
  fail "--work $work is not empty"
fi
mkdir -p "$work"
curl -fsSL "$url/SHA256SUMS" -o "$work/SHA256SUMS" 2>/dev/null \
  || no_wheel "the release $version has no SHA256SUMS ($url/SHA256SUMS), so no wheel can be verified"

# every line `<64 hex digits><two spaces or space-star><file name>`: anything else is refused
sum_line='^[0-9a-f]{64} [ *][A-Za-z0-9._+-]+$'
line_no=0
while IFS= read -r line || [ -n "$line" ]; do
  line_no=$((line_no + 1))
  if ! [[ "$line" =~ $sum_line ]]; then
    fail "SHA256SUMS of $version, line $line_no, is not '<sha256>  <file>': '${line:0:120}'"
  fi
done < "$work/SHA256SUMS"

wheel="$(awk '{sub(/^\*/, "", $2); print $2}' "$work/SHA256SUMS" | grep -E -e "$pattern" | head -n1 || true)"
[ -n "$wheel" ] || no_wheel "the release $version has no wheel for $platform"
curl -fsSL "$url/$wheel" -o "$work/$wheel" 2>/dev/null \
  || fail "SHA256SUMS of $version lists $wheel, but $url/$wheel cannot be downloaded"

expected="$(awk -v w="$wheel" '{f = $2; sub(/^\*/, "", f)} f == w {print $1; exit}' "$work/SHA256SUMS")"
actual="$(sha256sum "$work/$wheel" | cut -d' ' -f1)"
if [ "$expected" != "$actual" ]; then
  rm -f "$work/$wheel"
  fail "$wheel does not match the release's SHA256SUMS (expected $expected, got $actual)"
fi

# only a verified wheel reaches pip, which installs it alone (no index: it has no dependencies)
python3 -m venv "$work/venv" 2>/dev/null || python -m venv "$work/venv"
if [ -x "$work/venv/bin/python" ]; then py="$work/venv/bin/python"; else py="$work/venv/Scripts/python.exe"; fi
"$py" -m pip install -q --disable-pip-version-check --no-index "$work/$wheel"
mkdir -p "$bin_dir"
if [ -x "$work/venv/bin/lipfp" ]; then
  ln -sf "$work/venv/bin/lipfp" "$bin_dir/lipfp"
else
  cp "$work/venv/Scripts/lipfp.exe" "$bin_dir/lipfp.exe"
fi
"$bin_dir/lipfp" --version
outcome true
