# Sourced by the ops sh_tests that drive `kernelrl up` (pid in $up; fail()
# defined by the test): wait until a command succeeds, failing early when
# `kernelrl up` has exited.
wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local deadline=$((SECONDS + $1)) what=$2; shift 2
  until "$@"; do
    kill -0 "$up" 2>/dev/null || fail "kernelrl up exited while waiting for $what"
    [ $SECONDS -lt $deadline ] || fail "timed out waiting for $what"
    sleep 0.2
  done
}
