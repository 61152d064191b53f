#!/usr/bin/env bash
# The CLI walk-through: one grant on a lead sandbox, children within it, a secret handed to a
# child without putting it on a command line, a refusal for a wider policy, a limit reached
# and then raised, the audit log, and stopping the tree.
#
#     openshell gateway start &          # once; the CLI then needs no flags
#     REPORT_TOKEN=... bash examples/cli.sh
#
# Every command exits 0 on success; refusals exit with their own code (5 limit reached,
# 6 policy refused: `openshell --help`), which this script checks with `expect`.
set -euo pipefail

expect() { # expect CODE COMMAND...: runs COMMAND, which must exit with CODE
    local want=$1 got=0
    shift
    "$@" || got=$?
    if [ "$got" != "$want" ]; then echo "expected exit $want, got $got: $*" >&2; exit 1; fi
}

# 1. A lead sandbox and its grant: children one level deep, one at a time at first, and only
#    /usr/bin/python3 may call the MCP door from inside the tree.
openshell sandbox create --name lead \
    --grant-max-depth 1 --grant-max-breadth 1 --grant-max-total 3 \
    --grant-expires 1h --grant-program /usr/bin/python3 -- sleep 600
openshell grant get lead

# 2. A tool child runs commands for its parent; the CLI waits until it is READY.
openshell sandbox create --parent lead --name tools --kind tool --request-id tools-1 -- sleep 600
openshell sandbox exec tools -- uname -s

# 3. Retrying with the same request id returns the first child and creates nothing.
openshell sandbox create --parent lead --name tools --kind tool --request-id tools-1 -- sleep 600

# 4. A second child meets the grant's breadth: LIMIT_REACHED (exit 5), with the limit.
#    `--env REPORT_TOKEN` passes the variable's value from this shell: never on a command
#    line, and never in the gateway's records.
writer=(openshell sandbox create --parent lead --name writer --env REPORT_TOKEN --env GREETING=hello
    -- sh -c 'echo "$GREETING: the writer holds a token of ${#REPORT_TOKEN} characters" > report.txt; exec sleep 600')
expect 5 "${writer[@]}"

# 5. The user raises the limit; the same create now succeeds, with no policy change.
openshell grant update lead --max-breadth 2
"${writer[@]}"

# 6. Read the agent child's file (`-` writes it to standard output). Its main command starts
#    once it is READY: give it a moment to write.
for _ in 1 2 3 4 5 6 7 8 9 10; do
    if openshell sandbox download writer report.txt - 2>/dev/null; then break; fi
    sleep 0.5
done

# 7. A child may never have more than its parent: a policy with network access the lead
#    lacks is refused (exit 6) with a counterexample, and nothing is created.
policy=$(mktemp)
trap 'rm -f "$policy"' EXIT
cat >"$policy" <<'YAML'
version: 1
network_policies:
  pypi:
    endpoints:
      - { host: pypi.org, port: 443 }
    binaries:
      - { path: /usr/bin/python3 }
YAML
expect 6 openshell sandbox create --parent lead --name wide --policy "$policy" -- sleep 600

# 8. The tree, and every create, refusal and grant change in the audit log.
openshell sandbox children lead
openshell audit list --sandbox lead

# 9. Stopping the lead stops its children first.
openshell sandbox stop lead
