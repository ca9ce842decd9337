#!/usr/bin/env bash
# The action's run step: runs rollprobe with the inputs (RP_* in the env),
# writes the report, JUnit and HTML page to a directory for the upload step,
# and sets the step's outputs. It exits 0 whatever rollprobe said, so the
# upload step and the outputs see every run; the gate step fails the job.
#
# rollprobe itself writes verdict, failed, sent, report, junit and html to
# $GITHUB_OUTPUT; this adds exit-code (the process's own, also when
# rollprobe wrote nothing) and report-dir.
set -uo pipefail

dir=${RUNNER_TEMP:-${TMPDIR:-/tmp}}/rollprobe-report
rm -rf "$dir"
mkdir -p "$dir"
out=${GITHUB_OUTPUT:?GITHUB_OUTPUT is not set: not on a GitHub runner}

args=("${RP_COMMAND:-run}")
case "${RP_COMMAND:-run}" in
  run)
    args+=(--deployment "${RP_DEPLOYMENT:-}")
    [ -z "${RP_TARGET:-}" ] || args+=(--target "$RP_TARGET")
    case "${RP_TRIGGER:-restart}" in
      restart) args+=(--restart) ;;
      watch) args+=(--watch) ;;
      image=*) args+=(--image "${RP_TRIGGER#image=}") ;;
      patch=*) args+=(--patch "${RP_TRIGGER#patch=}") ;;
      scale=*) args+=(--scale "${RP_TRIGGER#scale=}") ;;
      *) echo "::error title=rollprobe::trigger ${RP_TRIGGER}: want restart, watch, image=CONTAINER=IMAGE, patch=PATCH or scale=N" ;
         printf 'exit-code=2\nverdict=error\nreport-dir=\n' >>"$out"; exit 0 ;;
    esac
    ;;
  probe)
    args+=("${RP_TARGET:-}" --duration "${RP_DURATION:-30s}")
    ;;
esac
[ -z "${RP_NAMESPACE:-}" ] || args+=(--namespace "$RP_NAMESPACE")
[ -z "${RP_CONN:-}" ] || args+=(--conn "$RP_CONN")
[ "${RP_PROBERS:-0}" = 0 ] || args+=(--probers "$RP_PROBERS")
args+=(--rate "${RP_RATE:-200}" --max-failures "${RP_BUDGET:-0}" --ui plain
  --report "$dir/report.json" --junit "$dir/junit.xml" --html "$dir/report.html")
read -r -a extra <<<"${RP_ARGS:-}"
args+=("${extra[@]}")

echo "rollprobe ${args[*]}"
rollprobe "${args[@]}"
code=$?
{
  echo "exit-code=$code"
  echo "report-dir=$dir"
  grep -q '^verdict=' "$out" || echo "verdict=error"
} >>"$out"
exit 0
