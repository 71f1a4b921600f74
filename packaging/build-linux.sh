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
# 3. dist/linux/bayescope-<version>-linux-x86_64.tar.gz (the portable folder,
#    packaging/pack-portable.sh), then the archive as shipped: extracted into a scratch folder,
#    every link checked to resolve, `bayescope-cli --help`, `bayescope --self-test` (with its
#    two face-descriptor worker processes), `bayescope-cli reproduce --help` and a PNG + SVG
#    export run from there with no network, and a person's settings checked to be untouched;
# 4. dist/linux/bayescope_<version>_amd64.deb (app in /opt/bayescope, /usr/bin launchers,
#    desktop entry, hicolor icons; control, md5sums and changelog from packaging/debian.py;
#    Depends: libc6 (>= the glibc the bundled ELF files need, packaging/elf_needs.py); xz -9
#    extreme), then lintian's findings when lintian is installed;
# 5. unless --no-install-test (or not root): `dpkg -i` the .deb, run `bayescope --self-test`
#    from /usr/bin with no network and a HOME holding only a person's settings, check them
#    untouched, then `dpkg -r` and check nothing is left. It refuses to start while a
#    bayescope is installed here (it would remove it);
# 6. dist/linux/build-report.md: wall time, sizes, what takes the space, what each trim saved.
#
# The .deb's Maintainer is BAYESCOPE_MAINTAINER ("name <address>"); a release build
# (BAYESCOPE_RELEASE=1) stops at once without a real one, a local build says it is unreleased.
set -euo pipefail
# The whole script is one block, read before it runs: editing the checkout during a build
# cannot change the running build.
{
start_s=$(date +%s)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
install_test=1
[[ ${1:-} == --no-install-test ]] && install_test=0
# The install test replaces and then removes the installed bayescope: with one installed here
# (a person's, or another build's under test), stop now rather than take it away.
installed_here() { dpkg-query -W -f='${Status} ${Version}' bayescope 2>/dev/null | grep -o 'ok installed.*' || true; }
if (( install_test )) && [[ $(id -u) == 0 ]] && command -v dpkg-query >/dev/null && [[ -n $(installed_here) ]]; then
  echo "bayescope $(installed_here | cut -d' ' -f3) is installed on this machine, and the install test would remove it." >&2
  echo "Remove it first (sudo apt remove bayescope) and reinstall it after the build, or build with --no-install-test." >&2
  exit 1
fi

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
for tool in dpkg-deb strip readelf objdump tar unshare; do
  command -v "$tool" >/dev/null || { echo "build-linux.sh needs $tool (apt-get install binutils dpkg tar util-linux)" >&2; exit 1; }
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
# The .deb's Maintainer, checked now: a release build without a real one stops before the work.
maintainer=$("$python" "$src/packaging/debian.py" maintainer) || exit 1

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
# A link to a trimmed file would point at nothing in every package made from the folder.
dangling=$(find "$app" -xtype l -printf '  %P -> %l\n')
[[ -z $dangling ]] || { printf 'the app folder holds links to nothing:\n%s\n' "$dangling" >&2; exit 1; }

# Static symbol tables out of every shared library but auditwheel's (packaging/strip_libraries.py:
# each stripped library is checked to load, and put back if it does not).
log "stripping symbol tables from the shared libraries"
"$env/bin/python" "$src/packaging/strip_libraries.py" "$app" "$work/trims.json"

# The programs run as a person would start them: a clean environment, no network (unshare -n
# where the kernel allows it), and a HOME that holds only a person's settings, which no check
# may change (the self-test opens its window with settings of its own).
no_network=()
if unshare -n true 2>/dev/null; then no_network=(unshare -n); fi
as_person() {  # HOME COMMAND...: run COMMAND as a person would, with HOME as their home
  local home=$1; shift
  env -i PATH=/usr/bin:/bin HOME="$home" LANG=C.UTF-8 QT_QPA_PLATFORM=offscreen "${no_network[@]}" "$@"
}
person_home() {  # a scratch HOME with a person's saved settings; prints its path
  local home
  home=$(mktemp -d)
  mkdir -p "$home/.config/bayescope"
  printf '[draw]\nbrush=7\n\n[sampling]\nsamples=17\n\n[workspace]\nmode=0\n' >"$home/.config/bayescope/bayescope.conf"
  (cd "$home/.config/bayescope" && find . -type f -exec sha256sum {} + | sort) >"$home.settings"
  echo "$home"
}
settings_untouched() {  # HOME WHERE: stop if the checks changed the person's settings
  if ! (cd "$1/.config/bayescope" && find . -type f -exec sha256sum {} + | sort) | cmp -s - "$1.settings"; then
    echo "the checks of $2 changed the person's settings in ~/.config/bayescope (the self-test must keep its own)" >&2
    exit 1
  fi
  rm -rf "$1" "$1.settings"
}

# ---------------------------------------------------------------- 3. the portable archive, as shipped
log "portable archive"
tarball=$out/bayescope-$version-linux-x86_64.tar.gz
tar_start=$(date +%s)
bash packaging/pack-portable.sh "$app" "bayescope-$version" "$tarball"
tar_s=$(($(date +%s) - tar_start))

log "self-test of the extracted archive"
archive_start=$(date +%s)
unpacked=$(mktemp -d)
tar -xzf "$tarball" -C "$unpacked"
shipped=$unpacked/bayescope-$version
[[ $(ls "$unpacked") == "bayescope-$version" ]] || { echo "the archive does not hold one folder bayescope-$version" >&2; exit 1; }
dangling=$(find "$unpacked" -xtype l -printf '  %P -> %l\n')
[[ -z $dangling ]] || { printf 'the archive holds links to nothing:\n%s\n' "$dangling" >&2; exit 1; }
home=$(person_home)
as_person "$home" "$shipped/bayescope-cli" --help >/dev/null \
  || { echo "bayescope-cli --help failed in the extracted archive" >&2; exit 1; }
set +e
as_person "$home" "$shipped/bayescope" --self-test | tee "$out/selftest-archive.txt"
status=${PIPESTATUS[0]}
set -e
(( status == 0 )) || { echo "the extracted archive failed its self-test" >&2; exit 1; }
# The command line finds its reproduce targets by name (importlib), which only a run shows ...
as_person "$home" "$shipped/bayescope-cli" reproduce --help >/dev/null \
  || { echo "bayescope-cli reproduce --help failed in the extracted archive" >&2; exit 1; }
# ... and matplotlib loads the SVG and PDF writers by the file's suffix.
as_person "$home" "$shipped/bayescope-cli" compare --format png svg --out "$home/compare" \
  "$src/resources/examples/digit-3.png" >/dev/null 2>&1 && ls "$home"/compare/*.svg >/dev/null 2>&1 \
  || { echo "bayescope-cli compare (PNG and SVG export) failed in the extracted archive" >&2; exit 1; }
settings_untouched "$home" "the extracted archive"
rm -rf "$unpacked"
archive_s=$(($(date +%s) - archive_start))

# ---------------------------------------------------------------- 4. the Debian package

log "Debian package"
stage=$work/deb
mkdir -p "$stage/DEBIAN" "$stage/opt" "$stage/usr/bin" "$stage/usr/share/applications" \
  "$stage/usr/share/doc/bayescope" "$stage/usr/share/icons/hicolor/scalable/apps" "$stage/usr/share/lintian/overrides"
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
install -m 644 packaging/linux/lintian-overrides "$stage/usr/share/lintian/overrides/bayescope"
find "$stage" -type d -exec chmod 755 {} +
# The oldest glibc (and C++ runtime) the app runs on: the highest symbol versions any bundled
# ELF file (the program, libraries, extension modules, helper programs) needs from the system.
"$env/bin/python" packaging/elf_needs.py "$app" >"$work/elf-needs.tsv"
glibc=$(awk -F'\t' '$1 == "GLIBC" {print $2}' "$work/elf-needs.tsv")
[[ -n $glibc ]] || { echo "packaging/elf_needs.py found no glibc version the app needs" >&2; exit 1; }
# control (Installed-Size, Depends: libc6 (>= $glibc), Maintainer), md5sums and the changelog.
"$env/bin/python" packaging/debian.py write "$stage" "$version" "$commit" \
  "$(git_ log -1 --format=%ct "$commit")" "$glibc"
installed_kb=$(awk '/^Installed-Size:/ {print $2}' "$stage/DEBIAN/control")
deb=$out/bayescope_${version}_amd64.deb
deb_start=$(date +%s)
deb_level=${BAYESCOPE_DEB_XZ:-9}
deb_strategy=${BAYESCOPE_DEB_XZ_STRATEGY:-extreme}
nice -n 19 dpkg-deb --root-owner-group -Zxz -z"$deb_level" -S"$deb_strategy" --threads-max="$(nproc)" \
  --build "$stage" "$deb" >/dev/null
deb_s=$(($(date +%s) - deb_start))
deb_bytes=$(stat -c %s "$deb")
deb_mb=$(awk "BEGIN {printf \"%.1f\", $deb_bytes / 1e6}")
# The gate: the size measured for the last release plus a stated margin (packaging/bundle.py
# says why); the download target (DEB_SIZE_TARGET) is reported. MB of 10^6 bytes, as browsers show a download.
read -r deb_gate deb_target deb_measured deb_measured_at < <("$python" packaging/bundle.py deb-gate)
mb() { awk "BEGIN {printf \"%.1f\", $1 / 1e6}"; }
if (( deb_bytes > deb_gate )); then
  echo "the .deb is $deb_mb MB: more than $(mb "$deb_gate") MB, the $(mb "$deb_measured") MB measured at $deb_measured_at plus the margin in packaging/bundle.py." >&2
  echo "Find what grew (dist/linux/build-report.md lists what takes the space); if the growth is meant, record the new size there." >&2
  exit 1
fi
deb_verdict="within the $(mb "$deb_target") MB target"
(( deb_bytes <= deb_target )) || deb_verdict="OVER the $(mb "$deb_target") MB target"
deb_verdict="$deb_verdict; gate $(mb "$deb_gate") MB = $(mb "$deb_measured") MB measured at $deb_measured_at + margin"

lintian_result="not run (lintian is not installed)"
if command -v lintian >/dev/null; then
  log "lintian"
  lintian --tag-display-limit 0 "$deb" >"$out/lintian.txt" 2>&1 || true
  lintian_result="$(grep -c '^[EW]: ' "$out/lintian.txt" || true) errors and warnings left ($(grep -o '^[EW]: [^ ]* [^ ]*' "$out/lintian.txt" | cut -d' ' -f1,3 | sort | uniq -c | awk '{printf "%s%s %s ×%s", sep, $2, $3, $1; sep="; "}')); lintian.txt"
fi

# ---------------------------------------------------------------- 5. install, self-test, remove
installed_result="not run"
if (( install_test )) && [[ $(id -u) == 0 ]] && command -v dpkg >/dev/null; then
  log "installing the .deb, self-test from /usr/bin/bayescope, removing it"
  # Checked at the start too; another build may have installed one since.
  [[ -z $(installed_here) ]] || { echo "a bayescope was installed here during the build; the install test would remove it" >&2; exit 1; }
  dpkg -i "$deb" >/dev/null 2>"$work/dpkg.log" \
    || { apt-get install -f -y -qq >/dev/null 2>>"$work/dpkg.log" && dpkg -s bayescope | grep -q 'ok installed'; } \
    || { cat "$work/dpkg.log" >&2; exit 1; }
  home=$(person_home)
  set +e
  as_person "$home" /usr/bin/bayescope --self-test | tee "$out/selftest-installed.txt"
  status=${PIPESTATUS[0]}
  as_person "$home" /usr/bin/bayescope-cli methods >/dev/null || status=1
  set -e
  dpkg -r bayescope >/dev/null
  left=$(ls -d /opt/bayescope /usr/bin/bayescope /usr/bin/bayescope-cli /usr/share/applications/bayescope.desktop 2>/dev/null || true)
  [[ -z $left ]] || { echo "dpkg -r left behind: $left" >&2; exit 1; }
  (( status == 0 )) || { echo "the installed app failed its self-test" >&2; exit 1; }
  settings_untouched "$home" "the installed package"
  installed_result="passed (${no_network[*]:-with network}; a person's settings left as they were), removed cleanly"
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
  echo "| wall time | ${wall_s} s in all: PyInstaller ${freeze_s} s, tar.gz ${tar_s} s, archive's checks ${archive_s} s, .deb (xz -${deb_level} ${deb_strategy}) ${deb_s} s |"
  echo "| .deb | ${deb_mb} MB, $deb_bytes bytes ($(basename "$deb")): $deb_verdict |"
  echo "| installed size | $(awk "BEGIN {printf \"%.0f\", $installed_kb * 1024 / 1e6}") MB |"
  echo "| portable .tar.gz | ${tar_mb} MB |"
  others=$(awk -F'\t' '$1 != "GLIBC" {printf "%s%s %s (%s)", sep, $1, $2, $3; sep=", "}' "$work/elf-needs.tsv")
  echo "| needs | glibc ≥ $glibc (the highest need: $(awk -F'\t' '$1 == "GLIBC" {print $4}' "$work/elf-needs.tsv")); from the system's C++ runtime: ${others:-nothing (libstdc++ and libgcc_s are bundled)} |"
  echo "| Maintainer | $maintainer |"
  echo "| extracted .tar.gz | bayescope-cli --help, self-test ($(grep -c '^ok ' "$out/selftest-archive.txt") checks), reproduce --help, PNG + SVG export: passed (${no_network[*]:-with network}); a person's settings left as they were |"
  echo "| installed self-test | $installed_result |"
  echo "| lintian | $lintian_result |"
  echo
  cat "$work/sizes.md"
} >"$out/build-report.md"
cat "$out/build-report.md"
log "done: $deb and $tarball"
exit 0
}
