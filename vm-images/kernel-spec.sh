# Sourced by the image builders: what a --kernel SPEC names in Debian's archive.

# The kernel package a SPEC names: a flavour (amd64, rt-amd64: its newest
# ABI) or an ABI (6.1.0-47-amd64). Prints nothing when apt does not know it.
resolve_kernel_package() {
  case $1 in
    [0-9]*.*-*) apt-cache show "linux-image-$1" >/dev/null 2>&1 && echo "linux-image-$1" ;;
    *) apt-cache depends "linux-image-$1" 2>/dev/null |
         sed -n "s/^ *Depends: \(linux-image-[0-9][^ ]*-$1\)\$/\1/p" | head -n1 ;;
  esac
}

# Prints "PACKAGE CANDIDATE-VERSION" per package, in one apt-cache call (each costs ~1 s).
candidate_versions() {
  apt-cache policy "$@" 2>/dev/null | awk '/^[^ ].*:$/ { pkg = substr($1, 1, length($1) - 1) }
    /^ *Candidate: / && $2 != "(none)" { print pkg, $2 }'
}
