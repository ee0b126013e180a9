# The scripted worker's normal run (no model): fix the bug in /workspace,
# run the tests, propose the fix as a git_commit through autonomic-effect.
# Runs inside the domain; AUTONOMIC_EPOCH and AUTONOMIC_LEASE_ID come from
# the kernel, BASE_OID is passed by the scenario.
set -eu
cd /workspace
sed -i 's/\$((\$2 + \$3 + 1))/$(($2 + $3))/' src/calc.sh
make -s test
git diff > /tmp/fix.patch
autonomic-effect prepare -kind git_commit -target-id calc \
	-target "{\"base_oid\":\"$BASE_OID\",\"ref\":\"refs/heads/main\",\"message\":\"Fix add: no off-by-one\"}" \
	-payload /tmp/fix.patch
