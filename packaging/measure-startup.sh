#!/usr/bin/env bash
# Time how long bayescope takes from launch to a visible window, on a virtual X screen.
#
#   bash packaging/measure-startup.sh RUNS [--shot OUT.png] -- COMMAND [ARGS...]
#
# Each run starts COMMAND with an empty HOME on a fresh Xvfb screen and records two moments:
# - window: the main window (a visible window titled "bayescope…" at least 600 px wide, so
#   not the small "Starting bayescope…" picture) is mapped, i.e. a person can use it;
# - settled: after that, the first half second in which the program used under 10% of a CPU,
#   i.e. the engine is imported, the posteriors are loaded and their first results drawn.
# The first run follows a page-cache drop where the kernel allows it (a true cold start);
# otherwise it is the first launch since the files were last read. Prints one line per run
# and the medians of the others, with the CPU time each run had used when its window
# appeared (on a busy machine the wall time stretches with the load; the CPU time hardly
# does). --shot saves a screenshot of the last run's screen 4 s after it settled.
set -euo pipefail
runs=${1:?usage: measure-startup.sh RUNS [--shot OUT.png] -- COMMAND...}
shift
shot=
while [[ $# -gt 0 && $1 != -- ]]; do
  case $1 in
    --shot) shot=$2; shift 2 ;;
    *) echo "measure-startup: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ ${1:-} == -- ]] && shift
[[ $# -gt 0 ]] || { echo "measure-startup: no command given" >&2; exit 2; }

pkgs="xvfb xdotool imagemagick libxcb-cursor0 libxkbcommon-x11-0 libxcb-icccm4 libxcb-image0 libxcb-keysyms1 libxcb-randr0 libxcb-render-util0 libxcb-shape0 libxcb-xinerama0 libxcb-xkb1 fonts-dejavu-core"
if ! dpkg -s $pkgs >/dev/null 2>&1; then
  (apt-get update -qq && apt-get install -y -qq $pkgs) >/dev/null 2>&1 \
    || { echo "measure-startup: could not install: $pkgs" >&2; exit 1; }
fi

disp=
for n in $(seq 150 199); do [[ -e /tmp/.X$n-lock || -e /tmp/.X11-unix/X$n ]] || { disp=:$n; break; }; done
[[ -n $disp ]] || { echo "measure-startup: no free display" >&2; exit 1; }
Xvfb "$disp" -screen 0 1600x1000x24 -nolisten tcp >/dev/null 2>&1 &
xpid=$!
apid=
home=$(mktemp -d)
cleanup() {
  [[ -n $apid ]] && kill "$apid" 2>/dev/null && wait "$apid" 2>/dev/null
  kill "$xpid" 2>/dev/null
  rm -rf "$home"
  true
}
trap cleanup EXIT
sleep 1

times=()
cpus=()
settles=()
for i in $(seq 1 "$runs"); do
  rm -rf "${home:?}"/* "$home"/.[!.]* 2>/dev/null || true
  note=
  if (( i == 1 )); then
    if sync && echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then note=" (page cache dropped: cold)"; else note=" (first launch; page cache could not be dropped here)"; fi
  fi
  t0=$(date +%s.%N)
  HOME=$home DISPLAY=$disp QT_QPA_PLATFORM=xcb "$@" >/tmp/measure-startup-app.log 2>&1 &
  apid=$!
  # CPU time (user + system, seconds) the program has used so far.
  cpu_now() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$apid/stat" 2>/dev/null || echo 0; }
  t1=
  while [[ -z $t1 ]]; do
    kill -0 "$apid" 2>/dev/null || { echo "measure-startup: the program ended; it said:" >&2; tail -20 /tmp/measure-startup-app.log >&2; exit 1; }
    for id in $(DISPLAY=$disp xdotool search --onlyvisible --name '^bayescope' 2>/dev/null); do
      width=$(DISPLAY=$disp xdotool getwindowgeometry --shell "$id" 2>/dev/null | sed -n 's/^WIDTH=//p')
      if (( ${width:-0} >= 600 )); then t1=$(date +%s.%N); break; fi
    done
    if [[ -z $t1 ]]; then
      (( $(awk "BEGIN {print ($(date +%s.%N) - $t0 > 60)}") )) && { echo "measure-startup: no main window within 60 s" >&2; tail -20 /tmp/measure-startup-app.log >&2; exit 1; }
      sleep 0.05
    fi
  done
  cpu=$(cpu_now)
  # Settled: the first half second (five samples 0.1 s apart) with under 0.05 s of CPU used.
  t2= samples=() stamps=()
  while [[ -z $t2 ]]; do
    samples+=("$(cpu_now)"); stamps+=("$(date +%s.%N)")
    n=${#samples[@]}
    if (( n > 5 )) && (( $(awk "BEGIN {print (${samples[n-1]} - ${samples[n-6]} < 0.05)}") )); then t2=${stamps[n-6]}; fi
    (( $(awk "BEGIN {print ($(date +%s.%N) - $t0 > 90)}") )) && { t2=none; break; }
    sleep 0.1
  done
  seconds=$(awk "BEGIN {print $t1 - $t0}")
  settled=$( [[ $t2 == none ]] && echo "not within 90" || awk "BEGIN {printf \"%.2f\", $t2 - $t0}")
  printf 'run %d: window visible after %.2f s (%.2f s of CPU), settled after %s s (load %s)%s\n' \
    "$i" "$seconds" "$cpu" "$settled" "$(cut -d' ' -f1 /proc/loadavg)" "$note"
  cpus+=("$cpu")
  (( i > 1 )) && times+=("$seconds") && settles+=("${settled%% *}")
  if (( i == runs )) && [[ -n $shot ]]; then
    sleep 4
    DISPLAY=$disp import -window root "$shot"
    echo "screenshot: $shot"
  fi
  kill "$apid" 2>/dev/null; wait "$apid" 2>/dev/null || true
  apid=
  sleep 1
done
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
if (( ${#times[@]} )); then
  printf 'median of runs 2-%d (warm): window %.2f s (%.2f s of CPU), settled %s s\n' "$runs" \
    "$(printf '%s\n' "${times[@]}" | median)" "$(printf '%s\n' "${cpus[@]:1}" | median)" \
    "$(printf '%s\n' "${settles[@]}" | grep -v not | median)"
fi
