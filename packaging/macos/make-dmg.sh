#!/usr/bin/env bash
# Wrap the PyInstaller-built bayescope.app into a disk image (macOS only).
#
#   bash packaging/macos/make-dmg.sh build/macos/dist/bayescope.app dist/macos/bayescope-0.1.0-macos-arm64.dmg
#
# The image holds the app and a link to /Applications, so installing is one drag.
set -euo pipefail
app=${1:?usage: make-dmg.sh APP OUT.dmg}
dmg=${2:?usage: make-dmg.sh APP OUT.dmg}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -R "$app" "$stage/"
ln -s /Applications "$stage/Applications"
mkdir -p "$(dirname "$dmg")"
hdiutil create -volname bayescope -srcfolder "$stage" -fs HFS+ -format UDZO -ov "$dmg"
