#!/bin/bash
# Decode benchmark on real bundles. For each bundle, every decoder runs in its
# own process (bench_decode_bundle), RUNS times, and the table gives
# min / median / max seconds, instructions/s and PT MB/s at the median,
# the ratio to libipt's block decoder used plainly (the baseline to beat),
# and each process's peak RSS:
#   libipt-insn       libipt's instruction decoder, 1 thread
#   libipt-block      libipt's block decoder used plainly, 1 thread (baseline)
#   kthost 1 thread   kthost's decoder (decode_profile)
#   kthost N threads  the same on every core
#   coverage 1 and N  kthost's coverage fast path (decode_coverage) on 1
#                     thread and on every core; the first of its runs is
#                     checked against the full decoder's coverage (--compare:
#                     any difference stops the benchmark)
#   perf script       perf's decoder on `kthost export`'s perf data, with
#                     --itrace=i1000000i: it walks every instruction but
#                     prints one line per million, so the time is its
#                     decoder's, not its printing's (one line per instruction,
#                     -F ip, ran 1.0 s against 25 s on a 51 M instruction
#                     bundle); its instructions are lines x 1,000,000 (~)
# and kthost's phases (load, image, symbols, split, decode, merge, stitch,
# stack_edges, report) at the median, and peak RSS against the target
# (2 x the largest PSB piece + the text image), with the peak after loading
# the bundle, the image and the symbols, before any decode.
#
# Bundles: those given, or, with none, the two it records: the main job's
# (tests/vm/run-main-job.sh --keep) and a longer syscall workload's, traced
# with `kthost trace --vm` on the test image until it holds >= 200 MB of PT.
#
#   tests/bench/run-decode-bundle-bench.sh BUILD_DIR [BUNDLE...]
#   RUNS=3 (runs per decoder), WORK=/tmp/kthost-decode-bench, NO_PERF=1 skips perf
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: run-decode-bundle-bench.sh BUILD_DIR [BUNDLE...]}" && pwd)
shift
runs=${RUNS:-3}
work=${WORK:-/tmp/kthost-decode-bench}
kthost=$build/host/cli/kthost
bench=$build/tests/bench/bench_decode_bundle
say() { echo "decode-bench: $*" >&2; }
mkdir -p "$work"

record_long() {  # DIR: a bundle of >= 200 MB of PT from a long syscall workload
  local dir=$1 state=$work/vm iterations=${LONG_ITERATIONS:-2500}
  rm -rf "$dir" "$state"
  say "recording the long bundle ($iterations rounds of a syscall workload)"
  "$src/vm-images/ktvm" start --image "$build/vm-image" --state-dir "$state" --smp 2 --accel tcg \
    --boot-timeout 300 --plugin "$build/pt-plugin/ktpt.so,out=$state/pt,trigger=$state/pt-on" >/dev/null
  # shellcheck disable=SC2016  # expanded in the guest
  local workload='i=0; while [ $i -lt '"$iterations"' ]; do cat /proc/self/stat /proc/uptime >/dev/null; ls / /proc/self >/dev/null; i=$((i+1)); done'
  local st=0
  "$kthost" trace --vm "$state/vm.json" -o "$dir" --timeout 1800 -- "$workload" >/dev/null || st=$?
  "$src/vm-images/ktvm" stop --vm "$state/vm.json" >/dev/null 2>&1 || true
  [ $st = 0 ] || { say "kthost trace exited $st"; exit 1; }
  local bytes
  bytes=$(du -sb "$dir/pt" | cut -f1)
  say "long bundle: $((bytes / 1000000)) MB of PT"
  [ "$bytes" -ge 200000000 ] || { say "under 200 MB of PT: raise LONG_ITERATIONS"; exit 1; }
}

if [ $# = 0 ]; then
  say "recording the main job's bundle (tests/vm/run-main-job.sh)"
  rm -rf "$work/main-job"
  "$src/tests/vm/run-main-job.sh" "$build" --keep "$work/main-job" >"$work/main-job.log" 2>&1 ||
    { tail -n 20 "$work/main-job.log"; exit 1; }
  record_long "$work/long"
  set -- "$work/main-job/bundle" "$work/long"
fi

threads=$(nproc)
for bundle in "$@"; do
  name=$(basename "$(dirname "$bundle")")/$(basename "$bundle")
  out=$work/results-$(echo "$name" | tr '/' '-').jsonl
  : >"$out"
  say "$name: libipt-insn, libipt-block, kthost 1 and $threads threads, $runs runs each"
  {
    "$bench" "$bundle" --decoder libipt-insn --runs "$runs"
    "$bench" "$bundle" --decoder libipt-block --runs "$runs"
    "$bench" "$bundle" --decoder kthost --threads 1 --runs "$runs" | sed 's/"decoder":"kthost"/"decoder":"kthost-1"/'
    "$bench" "$bundle" --decoder kthost --threads "$threads" --runs "$runs" |
      sed "s/\"decoder\":\"kthost\"/\"decoder\":\"kthost-$threads\"/"
    "$bench" "$bundle" --decoder coverage --threads 1 --runs "$runs" --compare |
      grep -v '"compare"' | sed 's/"decoder":"coverage"/"decoder":"coverage-1"/'
    "$bench" "$bundle" --decoder coverage --threads "$threads" --runs "$runs" |
      sed "s/\"decoder\":\"coverage\"/\"decoder\":\"coverage-$threads\"/"
  } >>"$out"
  if [ -z "${NO_PERF:-}" ]; then
    say "$name: kthost export, then perf script --itrace=i1000000i, $runs runs"
    rm -rf "$work/perf"
    "$kthost" export "$bundle" -o "$work/perf" --quiet >/dev/null
    python3 - "$work/perf" "$runs" "$bundle" >>"$out" <<'PYEOF'
import json, resource, subprocess, sys, time, os
perf_dir, runs, bundle = sys.argv[1], int(sys.argv[2]), sys.argv[3]
pt = sum(os.path.getsize(os.path.join(bundle, "pt", f)) for f in os.listdir(os.path.join(bundle, "pt")))
for run in range(1, runs + 1):
    t = time.monotonic()
    p = subprocess.run(["bash", "-c", f"set -o pipefail; perf script -i {perf_dir} --itrace=i1000000i | wc -l"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"decode-bench: perf script exited {p.returncode}: {p.stderr[-500:]}")
    print(json.dumps({"decoder": "perf", "run": run, "seconds": time.monotonic() - t, "threads": 1,
                      "insns": int(p.stdout.split()[0]) * 1000000, "pt_bytes": pt}))
print(json.dumps({"decoder": "perf", "peak_rss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
PYEOF
  fi
  python3 - "$out" "$name" <<'PYEOF'
import json, statistics, sys
rows, peak, loaded, info = {}, {}, {}, {}
for line in open(sys.argv[1]):
    j = json.loads(line)
    if "peak_rss_kib" in j:
        peak[j["decoder"]] = j["peak_rss_kib"]
        loaded[j["decoder"]] = j.get("loaded_peak_rss_kib")
        if "largest_piece_bytes" in j:
            info = j
    else:
        rows.setdefault(j["decoder"], []).append(j)
base = statistics.median(r["seconds"] for r in rows["libipt-block"])
print(f"\n== {sys.argv[2]}: {info['pt_bytes'] / 1e6:.1f} MB of PT, largest PSB piece "
      f"{info['largest_piece_bytes'] / 1e3:.0f} KB, text image {info['image_bytes'] / 1e6:.1f} MB")
print(f"{'decoder':14} {'insns':>12} {'min s':>8} {'median s':>9} {'max s':>8} {'M insn/s':>9} {'PT MB/s':>8} "
      f"{'vs block':>9} {'peak RSS':>9} {'loaded':>7}")
for name, rs in rows.items():
    s = [r["seconds"] for r in rs]
    med = statistics.median(s)
    insns = rs[0]["insns"]
    print(f"{name:14} {insns:12d} {min(s):8.2f} {med:9.2f} {max(s):8.2f} {insns / med / 1e6:9.1f} "
          f"{rs[0]['pt_bytes'] / med / 1e6:8.1f} {base / med:8.2f}x {peak.get(name, 0) / 1024:7.0f} MB "
          + (f"{loaded[name] / 1024:4.0f} MB" if loaded.get(name) else "      -"))
for name in [n for n in rows if n.startswith("kthost-") or n.startswith("coverage-")]:
    phases = {}
    for r in rows[name]:
        for k, v in r["phases"].items():
            phases.setdefault(k, []).append(v)
    order = ["load", "image", "symbols", "split", "decode", "merge", "stitch", "stack_edges", "report"]
    print(f"{name} phases (median s): " + "  ".join(f"{k} {statistics.median(phases[k]):.2f}" for k in order if k in phases))
k1 = [n for n in rows if n == "kthost-1"]
kn = [n for n in rows if n.startswith("kthost-") and n != "kthost-1"]
med = lambda n: statistics.median(r["seconds"] for r in rows[n])
if k1:
    print(f"targets: kthost 1 thread / libipt block: {base / med(k1[0]):.2f}x (goal >= 2x)")
if k1 and kn:
    print(f"         kthost {kn[0][7:]} threads / kthost 1 thread: {med(k1[0]) / med(kn[0]):.2f}x (goal >= 1.8x)")
c1 = [n for n in rows if n == "coverage-1"]
cn = [n for n in rows if n.startswith("coverage-") and n != "coverage-1"]
for n in c1 + cn:
    r = rows[n][0]
    print(f"         {n}: {base / med(n):.2f}x libipt block (goal >= 10x); {r['fast_pieces']} of {r['pieces']} pieces "
          f"walked, {r['fallback_bytes'] / 1e6:.1f} MB of PT to the full decoder ({r['fallback_reasons']})")
limit = 2 * info["largest_piece_bytes"] + info["image_bytes"]
worst = max(v for n, v in peak.items() if n.startswith("kthost"))
print(f"         kthost peak RSS {worst / 1024:.0f} MB against 2 x largest piece + image = {limit / 2**20:.0f} MB: "
      f"{worst * 1024 / limit:.1f}x the target")
PYEOF
done
