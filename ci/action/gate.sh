#!/usr/bin/env bash
# The action's last step: fails the job with rollprobe's exit code.
set -euo pipefail
case "${RP_EXIT:-}" in
  0) echo "rollprobe: pass" ;;
  '') echo "::error title=rollprobe::rollprobe did not run"; exit 1 ;;
  *) echo "rollprobe: ${RP_VERDICT:-error} (exit $RP_EXIT)"; exit "$RP_EXIT" ;;
esac
