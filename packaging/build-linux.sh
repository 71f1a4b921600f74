#!/usr/bin/env bash
# Build bayescope's Linux packages from this checkout, then test them.
#
#   bash packaging/build-linux.sh [--no-install-test]
#
# The build takes its sources only from git: the commit BAYESCOPE_BUILD_REF (default HEAD)
# is exported with `git archive` into build/linux/src and frozen from there, so nothing
# untracked or uncommitted (a test posterior left in resources/models, an edited file) can
# slip into the package. It refuses to start while resources/models holds untracked files.
#
# 1. a build environment outside the checkout (${BAYESCOPE_BUILD_ROOT:-~/.cache/bayescope-build}/env-<key>):
#    the CPU-only torch 2.13.0 wheel, the app's dependencies from pyproject.toml (never
#    torchvision) and PyInstaller (packaging/build-requirements.txt); reused while those files
#    are unchanged;
# 2. the one-folder app with PyInstaller (packaging/bayescope.spec; trims in packaging/bundle.py;
#    the PYZ of compiled modules stored uncompressed, which xz then packs better than zlib),
#    then the shared libraries stripped of their static symbol tables (each checked to load);
# 3. `bayescope --self-test` on the built folder;
# 4. dist/linux/bayescope-<version>-linux-x86_64.tar.gz (the portable folder) and
#    dist/linux/bayescope_<version>_amd64.deb (app in /opt/bayescope, /usr/bin launchers,
#    desktop entry, hicolor icons; xz -9 extreme);
# 5. unless --no-install-test (or not root): `dpkg -i` the .deb, run `bayescope --self-test`
#    from /usr/bin with no network and an empty HOME, then `dpkg -r` and check nothing is left;
# 6. dist/linux/build-report.md: wall time, sizes, what takes the space, what each trim saved.
set -euo pipefail
# The whole script is one block, read before it runs: editing the checkout during a build
# cannot change the running build.
{
start_s=$(date +%s)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
install_test=1
[[ ${1:-} == --no-install-test ]] && install_test=0

# Only tracked files are packaged: refuse to build beside untracked posteriors.
# (safe.directory: under sudo, as in the release workflow, root runs git in a user's checkout.)
git_() { git -c safe.directory="$root" -C "$root" "$@"; }
command -v git >/dev/null && git_ rev-parse --git-dir >/dev/null 2>&1 \
  || { echo "build-linux.sh builds from a git checkout (it exports the commit to build)" >&2; exit 1; }
untracked=$(git_ ls-files --others -- resources/models)
if [[ -n $untracked ]]; then
  echo "resources/models holds files git does not track; the package bundles tracked posteriors only." >&2
  echo "Commit them or move them away:" >&2
  printf '  %s\n' $untracked >&2
  exit 1
fi
for tool in dpkg-deb strip readelf objdump tar; do
  command -v "$tool" >/dev/null || { echo "build-linux.sh needs $tool (apt-get install binutils dpkg tar)" >&2; exit 1; }
done
log() { printf '== %s (%ds)\n' "$*" $(($(date +%s) - start_s)) >&2; }
quiet() { "$@" 2> >(grep -v "^WARNING: Location" >&2) >/dev/null; }

build_root=${BAYESCOPE_BUILD_ROOT:-$HOME/.cache/bayescope-build}
work=$root/build/linux
out=$root/dist/linux
python=${PYTHON:-python3}

# ---------------------------------------------------------------- 0. sources, from git only
ref=${BAYESCOPE_BUILD_REF:-HEAD}
commit=$(git_ rev-parse --verify "$ref^{commit}")
if ! git_ diff --quiet "$commit" -- 2>/dev/null; then
  echo "note: the working tree differs from $ref; the build uses the committed files of ${commit:0:12} only" >&2
fi
rm -rf "$work" "$out"
mkdir -p "$work/src" "$out"
git_ archive --format=tar "$commit" | tar -x -C "$work/src"
src=$work/src
version=$("$python" "$src/packaging/bundle.py" version)
log "sources: commit ${commit:0:12} ($(git_ log -1 --format=%cd --date=iso-strict "$commit")) exported to $src"

# ---------------------------------------------------------------- 1. build environment
cd "$src"
key=$(cat pyproject.toml packaging/build-requirements.txt <("$python" packaging/bundle.py requirements) <("$python" -VV) | sha256sum | cut -c1-16)
env=$build_root/env-$key
if [[ ! -f $env/.complete ]]; then
  log "setting up the build environment $env (first time: a few minutes)"
  rm -rf "$env"
  mkdir -p "$build_root"
  "$python" -m venv "$env"
  quiet "$env/bin/pip" install --upgrade pip "setuptools>=68" wheel
  # The CPU build of torch: small enough to ship, and no GPU is needed for a few images.
  # PyPI's Linux torch is the CUDA build, so ask for +cpu (a local wheel store or the
  # PyTorch CPU index has it).
  quiet "$env/bin/pip" install "torch==2.13.0+cpu" \
    || quiet "$env/bin/pip" install "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu
  "$python" packaging/bundle.py requirements >"$env/app-requirements.txt"
  quiet "$env/bin/pip" install -r "$env/app-requirements.txt" -r packaging/build-requirements.txt
  touch "$env/.complete"
fi
"$env/bin/python" - <<'EOF'
import importlib.util, sys
import torch
problems = []
if torch.version.cuda is not None or torch.version.hip is not None:
    problems.append(f"torch {torch.__version__} is a GPU build; the package ships the CPU build")
if importlib.util.find_spec("torchvision") is not None:
    problems.append("torchvision is installed in the build environment; it must not be bundled")
if problems:
    sys.exit("build environment: " + "; ".join(problems))
print(f"build environment: Python {sys.version.split()[0]}, torch {torch.__version__} (CPU), no torchvision", file=sys.stderr)
EOF

# ---------------------------------------------------------------- 2. freeze
log "freezing the app with PyInstaller"
freeze_start=$(date +%s)
# PYINSTALLER_ZLIB_COMPRESSION_LEVEL=0: the PYZ (114 MB of compiled modules) is stored, not
# zlib-compressed (43 MB): xz packs the stored bytes to 28 MB in the .deb, but cannot pack
# zlib's output at all. The installed folder grows by ~70 MB; the download shrinks by ~15 MB.
PYINSTALLER_ZLIB_COMPRESSION_LEVEL=0 BAYESCOPE_TRIM_REPORT=$work/trims.json \
  nice -n 19 "$env/bin/pyinstaller" --noconfirm --clean --log-level WARN \
  --distpath "$work/dist" --workpath "$work/pyinstaller" packaging/bayescope.spec 2>"$work/pyinstaller.log" \
  || { tail -40 "$work/pyinstaller.log" >&2; exit 1; }
freeze_s=$(($(date +%s) - freeze_start))
app=$work/dist/bayescope
[[ -x $app/bayescope && -x $app/bayescope-cli ]] || { echo "PyInstaller made no app folder" >&2; exit 1; }
if find "$app" -path '*torchvision*' | grep -q .; then echo "torchvision ended up in the app folder" >&2; exit 1; fi

# Static symbol tables out of every shared library but auditwheel's (packaging/strip_libraries.py:
# each stripped library is checked to load, and put back if it does not).
log "stripping symbol tables from the shared libraries"
"$env/bin/python" "$src/packaging/strip_libraries.py" "$app" "$work/trims.json"

# ---------------------------------------------------------------- 3. self-test of the folder
log "self-test of the built folder"
scratch_home=$(mktemp -d)
HOME=$scratch_home QT_QPA_PLATFORM=offscreen "$app/bayescope" --self-test | tee "$out/selftest-folder.txt"
# The command line too: it finds its reproduce targets by name (importlib), which only a run shows.
HOME=$scratch_home "$app/bayescope-cli" reproduce --help >/dev/null \
  || { echo "bayescope-cli reproduce --help failed in the built folder" >&2; exit 1; }
# ... and the figure export, whose SVG and PDF writers matplotlib loads by the file's suffix.
HOME=$scratch_home "$app/bayescope-cli" compare --format png svg --out "$scratch_home/compare" \
  resources/examples/digit-3.png >/dev/null 2>&1 && ls "$scratch_home"/compare/*.svg >/dev/null 2>&1 \
  || { echo "bayescope-cli compare (PNG and SVG export) failed in the built folder" >&2; exit 1; }
rm -rf "$scratch_home"

# ---------------------------------------------------------------- 4. packages
log "portable archive"
tarball=$out/bayescope-$version-linux-x86_64.tar.gz
tar_start=$(date +%s)
tar -C "$work/dist" --transform "s,^bayescope,bayescope-$version," --owner=0 --group=0 -cf - bayescope \
  | nice -n 19 gzip -6 >"$tarball"
tar_s=$(($(date +%s) - tar_start))

log "Debian package"
stage=$work/deb
mkdir -p "$stage/DEBIAN" "$stage/opt" "$stage/usr/bin" "$stage/usr/share/applications" \
  "$stage/usr/share/doc/bayescope" "$stage/usr/share/icons/hicolor/scalable/apps"
cp -a "$app" "$stage/opt/bayescope"
for program in bayescope bayescope-cli; do
  printf '#!/bin/sh\nexec /opt/bayescope/%s "$@"\n' "$program" >"$stage/usr/bin/$program"
  chmod 755 "$stage/usr/bin/$program"
done
install -m 644 packaging/linux/bayescope.desktop "$stage/usr/share/applications/bayescope.desktop"
for size in 16 24 32 48 64 128 256 512; do
  install -D -m 644 "resources/icons/bayescope-$size.png" "$stage/usr/share/icons/hicolor/${size}x${size}/apps/bayescope.png"
done
install -m 644 resources/icons/bayescope.svg "$stage/usr/share/icons/hicolor/scalable/apps/bayescope.svg"
install -m 644 packaging/linux/copyright "$stage/usr/share/doc/bayescope/copyright"
find "$stage" -type d -exec chmod 755 {} +
installed_kb=$(du -sk --apparent-size "$stage" --exclude=DEBIAN | cut -f1)
glibc=$(find "$app" -name '*.so*' -type f -print0 | xargs -0 objdump -T 2>/dev/null \
  | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1 | cut -d_ -f2)
sed -e "s/@VERSION@/$version/" -e "s/@INSTALLED_SIZE@/$installed_kb/" -e "s/@GLIBC@/$glibc/" \
  packaging/linux/control.in >"$stage/DEBIAN/control"
deb=$out/bayescope_${version}_amd64.deb
deb_start=$(date +%s)
deb_level=${BAYESCOPE_DEB_XZ:-9}
deb_strategy=${BAYESCOPE_DEB_XZ_STRATEGY:-extreme}
nice -n 19 dpkg-deb --root-owner-group -Zxz -z"$deb_level" -S"$deb_strategy" --threads-max="$(nproc)" \
  --build "$stage" "$deb" >/dev/null
deb_s=$(($(date +%s) - deb_start))
deb_bytes=$(stat -c %s "$deb")
deb_mb=$(awk "BEGIN {printf \"%.1f\", $deb_bytes / 1e6}")
# The target, in MB of 10^6 bytes (as browsers and file managers show a download).
(( deb_bytes <= 200000000 )) || { echo "the .deb is $deb_mb MB, over the 200 MB target" >&2; exit 1; }

# ---------------------------------------------------------------- 5. install, self-test, remove
installed_result="not run"
if (( install_test )) && [[ $(id -u) == 0 ]] && command -v dpkg >/dev/null; then
  log "installing the .deb, self-test from /usr/bin/bayescope, removing it"
  if dpkg -s bayescope >/dev/null 2>&1; then dpkg -r bayescope >/dev/null; fi
  dpkg -i "$deb" >/dev/null 2>"$work/dpkg.log" \
    || { apt-get install -f -y -qq >/dev/null 2>>"$work/dpkg.log" && dpkg -s bayescope | grep -q 'ok installed'; } \
    || { cat "$work/dpkg.log" >&2; exit 1; }
  scratch_home=$(mktemp -d)
  no_network=()
  if unshare -n true 2>/dev/null; then no_network=(unshare -n); fi
  set +e
  env -i PATH=/usr/bin:/bin HOME="$scratch_home" QT_QPA_PLATFORM=offscreen LANG=C.UTF-8 \
    "${no_network[@]}" /usr/bin/bayescope --self-test | tee "$out/selftest-installed.txt"
  status=${PIPESTATUS[0]}
  env -i PATH=/usr/bin:/bin HOME="$scratch_home" LANG=C.UTF-8 "${no_network[@]}" /usr/bin/bayescope-cli methods >/dev/null \
    || status=1
  set -e
  rm -rf "$scratch_home"
  dpkg -r bayescope >/dev/null
  left=$(ls -d /opt/bayescope /usr/bin/bayescope /usr/bin/bayescope-cli /usr/share/applications/bayescope.desktop 2>/dev/null || true)
  [[ -z $left ]] || { echo "dpkg -r left behind: $left" >&2; exit 1; }
  (( status == 0 )) || { echo "the installed app failed its self-test" >&2; exit 1; }
  installed_result="passed (${no_network[*]:-with network}, empty HOME), removed cleanly"
fi

# ---------------------------------------------------------------- 6. report
log "report"
wall_s=$(($(date +%s) - start_s))
"$env/bin/python" packaging/size_report.py "$app" "$work/trims.json" >"$work/sizes.md"
tar_mb=$(awk "BEGIN {printf \"%.1f\", $(stat -c %s "$tarball") / 1e6}")
{
  echo "# bayescope $version, Linux build"
  echo
  echo "| | |"
  echo "| --- | --- |"
  echo "| built on | $(date -u +%Y-%m-%d), $(nproc) CPU cores, $(. /etc/os-release && echo "$PRETTY_NAME"), Python $("$env/bin/python" -c 'import platform; print(platform.python_version())') |"
  echo "| wall time | ${wall_s} s in all: PyInstaller ${freeze_s} s, tar.gz ${tar_s} s, .deb (xz -${deb_level} ${deb_strategy}) ${deb_s} s |"
  echo "| .deb | ${deb_mb} MB ($(basename "$deb")) |"
  echo "| installed size | $(awk "BEGIN {printf \"%.0f\", $installed_kb * 1024 / 1e6}") MB |"
  echo "| portable .tar.gz | ${tar_mb} MB |"
  echo "| needs | glibc ≥ $glibc |"
  echo "| installed self-test | $installed_result |"
  echo
  cat "$work/sizes.md"
} >"$out/build-report.md"
cat "$out/build-report.md"
log "done: $deb and $tarball"
exit 0
}
