#!/bin/sh
# check_history.sh ROOT: the README, docs/ and every source, script, rule and build file describe the
# system as it is; its history is git's. Fails on a history reference (a numbered work period,
# "session" and a number, or "issue" and a number) in any of them, and prints each with its place.
set -eu
root=$1
pattern='\b[Ii]ssues? #?[0-9]+|\b[Ss]essions? [0-9]+'
found=$(cd "$root" && find README.md docs .ci CMakeLists.txt cmake config preload transport tools tests integration \
          -path '*/build*' -prune -o -type f \
          \( -name '*.md' -o -name '*.cpp' -o -name '*.h' -o -name '*.sh' -o -name '*.py' -o -name '*.yaml' \
             -o -name '*.txt' -o -name '*.cmake' -o -name '*.conf' -o -name '*.java' -o -name '*.json' \
             -o -name run -o -name vm -o -name 'test-all' -o -name 'soak-*' -o -name 'expect-rdma' \) -print 2>/dev/null |
        xargs grep -n -E "$pattern" 2>/dev/null || true)
if [ -n "$found" ]; then
  echo "check_history: history references (say the reason, not the issue or the session; git keeps the story):"
  echo "$found"
  exit 1
fi
echo "check_history: no history reference in README, docs or code"
