# The nemesis of raft_jepsen_test.sh (sourced; uses its scheds, all_nodes, start_sched, work,
# prefix): one fault at a time on a scheduler — the Raft leader half the time — then a heal.
#   kill      kill -9, restarted on its data dir after the fault's duration
#   pause     SIGSTOP, then SIGCONT
#   isolate   cut off from every other node (the clients on the host still reach it)
#   minority  (5 schedulers or more) it and another scheduler cut off from the rest together
# Each fault lasts 3–8 s and is followed by 4–7 s of calm; $work/nemesis.log has one line per
# fault: "<unix time> <kind> <nodes> <leader|random> <seconds>".

# The scheduler that reconciles (the Raft leader with a barrier of its term applied), by its own
# metrics; empty when none answers 1 (a paused node does not answer within the second).
nemesis_leader() {
  local i v
  for i in $scheds; do
    v=$(curl -s --max-time 1 "http://$prefix.$i:8080/metrics" 2>/dev/null |
      awk '$1 == "exaserve_scheduler_reconciling" {print $2}')
    if [ "$v" = 1 ]; then echo "$i"; return; fi
  done
}

nemesis_others() {  # every node but the given ones
  local i
  for i in $all_nodes; do case " $* " in *" $i "*) ;; *) printf '%s ' "$i" ;; esac; done
}

# Every scheduler the test started is still running (one that died on its own is a crash).
nemesis_check_alive() {
  local i
  for i in $scheds; do
    kill -0 "$(netns_pid "$i")" 2>/dev/null ||
      fail "scheduler node-$i died on its own: $(tail -5 "$work/n$i.log")"
  done
  if grep -l -E "Check failed|terminate called|AddressSanitizer|Segmentation fault" "$work"/n*.log; then
    fail "a node crashed (logs above)"
  fi
}

nemesis_fault() {  # nemesis_fault KIND TARGET SECONDS; sets nemesis_hit (the nodes faulted)
  local kind=$1 target=$2 seconds=$3 second pid rest
  nemesis_hit=$target
  pid=$(netns_pid "$target")
  case $kind in
    kill)
      kill -9 "$pid"
      sleep "$seconds"
      start_sched "$target"
      ;;
    pause)
      kill -STOP "$pid"
      sleep "$seconds"
      kill -CONT "$pid"
      ;;
    isolate)
      netns_cut "$target" "$(nemesis_others "$target")" || fail "cut node-$target"
      sleep "$seconds"
      netns_heal
      ;;
    minority)
      read -r -a rest <<<"$(for i in $scheds; do [ "$i" = "$target" ] || printf '%s ' "$i"; done)"
      second=${rest[RANDOM % ${#rest[@]}]}
      netns_cut "$target $second" "$(nemesis_others "$target" "$second")" || fail "cut a minority"
      nemesis_hit="$target,$second"
      sleep "$seconds"
      netns_heal
      ;;
  esac
}

nemesis_run() {  # nemesis_run SECONDS: faults until SECONDS from now, the last one healed by then
  local end=$(( $(date +%s) + $1 )) kinds=(kill pause isolate) kind target role seconds
  [ "$SCHEDULERS" -ge 5 ] && kinds+=(minority)
  : >"$work/nemesis.log"
  sleep 5  # the clients start on a healthy cluster
  while [ $(( $(date +%s) + 8 + 5 )) -lt "$end" ]; do
    nemesis_check_alive
    kind=${kinds[RANDOM % ${#kinds[@]}]}
    target="" role=random
    if [ $(( RANDOM % 2 )) = 0 ]; then target=$(nemesis_leader) role=leader; fi
    if [ -z "$target" ]; then
      target=$(echo $scheds | tr ' ' '\n' | sed -n "$(( RANDOM % SCHEDULERS + 1 ))p") role=random
    fi
    seconds=$(( 3 + RANDOM % 6 ))
    nemesis_fault "$kind" "$target" "$seconds"
    echo "$(date +%s) $kind $nemesis_hit $role $seconds" >>"$work/nemesis.log"
    sleep $(( 4 + RANDOM % 4 ))
  done
}

nemesis_heal_all() {  # no fault left: routes restored, every scheduler running
  local i
  netns_heal
  for i in $scheds; do
    kill -CONT "$(netns_pid "$i")" 2>/dev/null || true
  done
}
