#!/bin/sh
# vm_budget.sh COSTS BUDGET: the VM tests' declared costs ("seconds name" a line) must add up to no
# more than BUDGET seconds: the suite's time on the CI machine type is bounded (docs/testbed.md,
# "What a run costs"). Prints the sum and the five largest.
costs=$1 budget=$2
total=$(awk '{ s += $1 } END { print s + 0 }' "$costs")
echo "VM tests: $(wc -l < "$costs") declare $total s together; the budget is $budget s. The largest:"
sort -rn "$costs" | head -n 5 | sed 's/^/  /'
[ "$total" -le "$budget" ] || { echo "over budget by $((total - budget)) s: make a test cheaper, or say in docs/testbed.md why the budget grows"; exit 1; }
