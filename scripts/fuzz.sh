#!/usr/bin/env bash
# Runs every fuzz target of the module for a while each (default 10s):
#   scripts/fuzz.sh [DURATION] [PATTERN]
# e.g. scripts/fuzz.sh 10m 'ParseToken|GitCredential'. New crashers are
# written to the package's testdata/fuzz/<Target>/ by go test, where the
# plain test run replays them from then on.
set -euo pipefail
cd "$(dirname "$0")/.."
time=${1:-10s}
pattern=${2:-.}
status=0
while IFS=: read -r file target; do
  pkg=./$(dirname "$file")
  [[ $target =~ $pattern ]] || continue
  echo "== $pkg $target ($time)"
  if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$time" -parallel 1 "$pkg"; then
    status=1
  fi
done < <(grep -rn --include='*_test.go' -e '^func Fuzz[A-Za-z0-9_]*' . | sed -E 's#^\./([^:]+):[0-9]+:func (Fuzz[A-Za-z0-9_]+).*#\1:\2#')
exit $status
