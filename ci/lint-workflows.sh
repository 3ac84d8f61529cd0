#!/usr/bin/env bash
# Lints the GitHub automation (issue 33): zizmor (GitHub Actions security linter: unpinned
# actions, persisted credentials, template injection, excessive permissions, ...) at medium
# severity and up, and the JSON schemas of GitHub workflows, actions and Dependabot's config.
# Any finding or schema error exits non-zero. Runs offline once the pinned tools are installed.
#
#   bash ci/lint-workflows.sh PYTHON    # PYTHON: a virtual environment's python
set -euo pipefail
cd "$(dirname "$0")/.."

if (($# != 1)); then
  echo "usage: $0 PYTHON (a virtual environment's python)" >&2
  exit 2
fi
python="$1"
bin="$(dirname "$python")"

"$python" -m pip install -q --disable-pip-version-check -r ci/lint-requirements.txt

workflows=(.github/workflows/*.yml)

echo "zizmor: ${workflows[*]} ci/action.yml .github/dependabot.yml"
"$bin/zizmor" --offline --min-severity medium .github/workflows/ ci/ .github/dependabot.yml
# the example workflow users copy (not collected from ci/, which zizmor reads as an action);
# its config only lets the OWNER/lipfp placeholder through
echo "zizmor: ci/workflow-example.yml"
"$bin/zizmor" --offline --min-severity medium --config ci/zizmor-example.yml ci/workflow-example.yml

# check-jsonschema's vendored schemas: no network needed
"$bin/check-jsonschema" --builtin-schema vendor.github-workflows "${workflows[@]}" ci/workflow-example.yml
"$bin/check-jsonschema" --builtin-schema vendor.github-actions ci/action.yml
"$bin/check-jsonschema" --builtin-schema vendor.dependabot .github/dependabot.yml
echo "workflows, action and Dependabot config: clean"
