#!/usr/bin/env bash
# The portable archive: the app folder APP packed as NAME/ into OUT (.tar.gz, gzip -6).
#
#   bash packaging/pack-portable.sh APP NAME OUT.tar.gz
#
# The folder is given its final name by hard links in a scratch folder beside APP, not by
# tar's --transform: a transform rewrites the targets of symbolic links too, unless told not
# to, and turned the link bayescope-cli -> bayescope into bayescope-cli -> bayescope-0.1.0,
# which points at nothing inside the extracted folder. Here every link is packed as it is.
# Entries are owned by root and sorted by name, so that two packs of one folder are alike.
set -euo pipefail
app=${1:?usage: pack-portable.sh APP NAME OUT.tar.gz}
name=${2:?usage: pack-portable.sh APP NAME OUT.tar.gz}
out=${3:?usage: pack-portable.sh APP NAME OUT.tar.gz}
[[ -d $app ]] || { echo "pack-portable.sh: $app is not a folder" >&2; exit 1; }
[[ $name != */* && -n $name ]] || { echo "pack-portable.sh: NAME is one folder name, not $name" >&2; exit 1; }

scratch=$(mktemp -d "$(dirname "$app")/.pack-portable.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
# Hard links cost no space and no time; a copy only where they cannot be made.
cp -al "$app" "$scratch/$name" 2>/dev/null || { rm -rf "${scratch:?}/$name"; cp -a "$app" "$scratch/$name"; }
tar -C "$scratch" --owner=0 --group=0 --numeric-owner --sort=name -cf - "$name" | nice -n 19 gzip -6 >"$out"
