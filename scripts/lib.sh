# shellcheck shell=bash
# scripts/lib.sh: the helpers the bash scripts of scripts/ share. It is sourced, not run: each
# script sources it from its own directory, before anything else,
#
#   # shellcheck source=scripts/lib.sh
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#   LOG_PREFIX=edge # optional: the settings below, after sourcing
#
# and defines none of these itself (tests/scripts.rs fails on a function defined twice across
# scripts/). What a script wants different it sets in the variables below after sourcing (this
# file resets them, so that none comes from the environment); the helpers read them when called.
#
#   step MESSAGE...         "\n==> MESSAGE" on stdout: a stage of the run, for people and CI logs
#   log MESSAGE...          "[LOG_PREFIX] MESSAGE" on stderr; LOG_PREFIX defaults to the
#                           script's name (cluster, edge, helm, musl-build, real-node)
#   die MESSAGE...          "[LOG_PREFIX] error: MESSAGE" on stderr, exit 1; where the script
#                           sets DIE_PREFIX (e.g. "scripts/test: "), DIE_PREFIX then MESSAGE
#   fail MESSAGE...         a check failed: "[LOG_PREFIX] FAILED: MESSAGE" on stderr (after
#                           "FAIL_CONTEXT: " when the script sets FAIL_CONTEXT, e.g. the binary
#                           under test), then the function named in ON_FAIL if any (the script's
#                           report of what to look at, e.g. the operator's log), exit 1
#   wait_until SECONDS WHAT COMMAND...
#                           runs COMMAND (its output discarded) every POLL_INTERVAL seconds
#                           (default 0.5) until it succeeds; fail "timed out after SECONDSs
#                           waiting for WHAT" after SECONDS
#   kc ARGS...              kubectl: $KUBECTL (default kubectl) with ARGS, against KUBECONFIG,
#                           or against KC_KUBECONFIG when set (scripts/cluster's own)
#   pick_port               prints a TCP port free on 127.0.0.1 now
#   apt_install PACKAGE...  installs Debian packages as CI does, when this runs as root where
#                           apt-get is: "installing Debian packages: PACKAGE..." as a step,
#                           apt-get update (once per run), a quiet install. Elsewhere it installs
#                           nothing and returns 1, for the caller to say what to install
#
# Script-specific functions (usage, cleanup, a script's checks) stay in their scripts, each
# under a name no other script uses.

if ! (return 0 2>/dev/null); then
    echo "scripts/lib.sh is sourced by the scripts in scripts/, not run" >&2
    exit 2
fi

LOG_PREFIX=${0##*/} DIE_PREFIX="" FAIL_CONTEXT="" ON_FAIL="" POLL_INTERVAL=0.5 KC_KUBECONFIG=""
APT_UPDATED=""

step() { printf '\n==> %s\n' "$*"; }

log() { printf '[%s] %s\n' "$LOG_PREFIX" "$*" >&2; }

die() {
    if [[ -n $DIE_PREFIX ]]; then
        printf '%s%s\n' "$DIE_PREFIX" "$*" >&2
    else
        log "error: $*"
    fi
    exit 1
}

fail() {
    log "FAILED: ${FAIL_CONTEXT:+$FAIL_CONTEXT: }$*"
    if [[ -n $ON_FAIL ]]; then "$ON_FAIL" "$@"; fi
    exit 1
}

wait_until() {
    local seconds=$1 what=$2 deadline
    shift 2
    deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || fail "timed out after ${seconds}s waiting for $what"
        sleep "$POLL_INTERVAL"
    done
}

kc() { "${KUBECTL:-kubectl}" ${KC_KUBECONFIG:+--kubeconfig "$KC_KUBECONFIG"} "$@"; }

# crds_established: waits up to 60 s for both CRDs to be Established. A CRD created a moment
# ago may have no conditions yet, which `kubectl wait` takes for an error, not for "not yet":
# it is asked again until then.
crds_established() {
    local deadline=$((SECONDS + 60))
    until kc wait --for=condition=Established --timeout=10s \
        crd/mutations.neiam.org crd/mutantdeployments.neiam.org >/dev/null 2>&1; do
        ((SECONDS < deadline)) || return 1
        sleep 0.5
    done
}

pick_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

apt_install() {
    if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        return 1
    fi
    step "installing Debian packages: $*"
    if [[ -z $APT_UPDATED ]]; then
        apt-get update -qq || return 1
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
