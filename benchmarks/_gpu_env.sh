# Sourced by the GPU check scripts: $OUT made, the wheels in folder $1 (the
# GPU machine has no msgspec) installed into /tmp/ctmon-site, and this
# checkout and those wheels on PYTHONPATH.
set -u
OUT="${OUT:-./gpu-results}"
mkdir -p "$OUT"
if [ -n "${1:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/ctmon-site "$1"/*.whl \
    && export PYTHONPATH=/tmp/ctmon-site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
