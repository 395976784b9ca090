# shellcheck shell=bash
# Shell helpers of the agent's VM tests (run-agent.sh, run-agent-pod.sh),
# sourced by them. The caller defines K (the kthost binary), say() and
# failed=0.

# check WHAT CONDITION-COMMAND...: runs the condition, says ok or FAIL, and
# sets failed=1 on FAIL.
check() {
  local what=$1
  shift
  # shellcheck disable=SC2034  # failed is the caller's
  if "$@"; then say "ok    $what"; else say "FAIL  $what"; failed=1; fi
}

# agent_domain_field SOCKET DOMAIN FIELD: the field of the domain's live (not
# ended) tracer in the status of the agent on SOCKET.
agent_domain_field() {
  "$K" agent --status --json --socket "$1" | python3 -c '
import json, sys
s = json.load(sys.stdin)
live = [d for d in s["domains"] if d["name"] == sys.argv[1] and d["state"] != "ended"]
print(live[-1][sys.argv[2]] if live else "")' "$2" "$3"
}

# agent_wait_ready SOCKET LOG DOMAIN...: until each domain has a tracer whose
# guest helper is ready (240 s in all); else prints the status and the tail
# of the agent's LOG and exits 1.
agent_wait_ready() {
  local sock=$1 log=$2 d deadline=$((SECONDS + 240))
  shift 2
  for d in "$@"; do
    until [ "$(agent_domain_field "$sock" "$d" ready 2>/dev/null)" = True ]; do
      if [ $SECONDS -ge $deadline ]; then
        say "domain $d never became ready under the agent"; "$K" agent --status --socket "$sock" || true
        tail -n 40 "$log"; exit 1
      fi
      sleep 1
    done
  done
}
