#!/usr/bin/env bash
# As ../shared/device/pack.sh, with gymnasium pinned to 1.2.2 (pack.sh fetches the newest, 1.4.0, beside it)
set -euo pipefail
root=$(git rev-parse --show-toplevel)
out=$root/.devpack
mkdir -p "$out"
grep -qx '/.devpack/' "$root/.git/info/exclude" 2>/dev/null || echo '/.devpack/' >>"$root/.git/info/exclude"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
      --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux1_x86_64)
fetch() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" -d "$tmp/whl" "$@" 2>&1 | grep -v "is ignored" || true; }
fetch ray==2.60.0 gymnasium==1.2.2 farama-notifications==0.0.6 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 \
  referencing==0.37.0 rpds-py==2026.9.1 dm-tree==0.1.10 lz4==4.4.5 ormsgpack==1.13.1 tensorboardX==2.6.5 \
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
  pettingzoo==1.27.0 mpe2==1.1.1 pygame-ce==2.5.8
ls -la "$tmp/whl"
mkdir -p "$tmp/site"
for w in "$tmp"/whl/*.whl; do python3 -m zipfile -e "$w" "$tmp/site"; done
chmod -R a+x "$tmp/site/ray/core/src"
rm -rf "$tmp/site/ray/jars"
tar -C "$tmp/site" -cf - . | xz -T0 -6 >"$out/site.tar.xz"
ls -la "$out/site.tar.xz"
