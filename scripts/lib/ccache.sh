# Sourced by scripts/build.sh and scripts/test.sh (POSIX sh). With
# KTHOST_CCACHE=1 (.ci/run sets it) and ccache installed, the compilers run
# under ccache, whose cache is kept in /var/cache/kthost/ccache beside the
# other caches kthost's tests keep there (the kernel build tree, Debian
# packages). Paths are hashed relative to the source tree, so a fresh clone
# elsewhere hits the same cache: a repeated CI run compiles only what
# changed. Off by default: a developer's build is unchanged.
# Sets KTHOST_LAUNCHER to the CMake arguments for the launcher (empty ones,
# which clear an earlier setting, when it is off).
# shellcheck shell=sh disable=SC2034
kthost_ccache_setup() {  # SRC_DIR
  KTHOST_LAUNCHER="-DCMAKE_C_COMPILER_LAUNCHER= -DCMAKE_CXX_COMPILER_LAUNCHER="
  [ "${KTHOST_CCACHE:-0}" = 1 ] || return 0
  if ! command -v ccache >/dev/null 2>&1; then
    echo "ccache: KTHOST_CCACHE=1 but ccache is not installed (scripts/install-deps.sh); building without it"
    return 0
  fi
  CCACHE_DIR=${CCACHE_DIR:-/var/cache/kthost/ccache}
  CCACHE_BASEDIR=$1
  CCACHE_NOHASHDIR=1
  CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-4G}
  export CCACHE_DIR CCACHE_BASEDIR CCACHE_NOHASHDIR CCACHE_MAXSIZE
  mkdir -p "$CCACHE_DIR"
  KTHOST_LAUNCHER="-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
}

# Zeroes ccache's counters (call before a build) or prints them (after).
kthost_ccache_zero() {
  [ "${KTHOST_CCACHE:-0}" = 1 ] && command -v ccache >/dev/null 2>&1 || return 0
  ccache --zero-stats >/dev/null
}
kthost_ccache_report() {  # WHAT
  [ "${KTHOST_CCACHE:-0}" = 1 ] && command -v ccache >/dev/null 2>&1 || return 0
  ccache --print-stats | awk -v what="$1" -v dir="$CCACHE_DIR" -F'\t' '
    $1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" { hits += $2 }
    $1 == "cache_miss" { misses = $2 }
    END { print "ccache (" what "): " hits + 0 " compiles from the cache, " misses + 0 " compiled (" dir ")" }'
}
