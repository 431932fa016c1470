#!/usr/bin/env bash
# The Blender-facing tests on every supported Blender, each in its own venv (make test-matrix).
#
#   tools/test_matrix.sh [VERSION ...]        (default: 4.2 4.5 5.0 5.3)
#   PY311=/path/to/python3.11 PY313=/path/to/python3.13 tools/test_matrix.sh
#
# Venvs: .venv-4.2, .venv-4.5, .venv-5.0 from requirements/requirements-bpy<V>.txt; 5.3 reuses .venv
# (requirements.txt, the `make test` venv). Each is (re)installed only when its requirements change;
# wheels come from pip's cache (PIP_CACHE_DIR, default ~/.cache/pip: cache it in CI).
# Every version runs the same Blender-facing selection (rolling-shutter camera, LiDAR OSL camera, flow,
# EXR reading, the version differences, extension install); LiDAR renders are skipped on 4.2, which
# has no custom cameras (refused there by name, tested in tests/blender/compat/test_blender_compat.py).
# Writes out/test-matrix/<V>.log and summary.txt (install s, passed/failed/skipped, wall s per version);
# exits 1 when any version fails, 2 when a Python it needs is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSIONS=("$@")
[ ${#VERSIONS[@]} -gt 0 ] || VERSIONS=(4.2 4.5 5.0 5.3)
OUT=out/test-matrix
mkdir -p "$OUT"

# Blender-facing tests (a slimmer subset than `make test`, still touching every Blender-facing path).
SELECTION=(
  tests/blender/compat/test_blender_compat.py                       # every version difference, against the real API
  tests/blender/compat/test_cycles_facts.py                         # Cycles behaviour the design rests on (EXR passes)
  tests/blender/sensors/test_calibration_exports.py                  # rolling-shutter camera exports vs closed form
  tests/model/test_timing.py                               # Cycles shutter timing per row / per firing
  tests/sensors/test_lidar.py                                # spinning LiDAR through the OSL custom camera
  "tests/sensors/test_radar.py::test_wall_approaching_radial_velocity_is_minus_v_cos_theta"   # radar, same OSL camera
  "tests/model/test_lenses.py::test_marker_board_through_lens"       # distorted cameras: OSL lens camera vs OpenCV
  "tests/model/test_lenses.py::test_custom_camera_blender_refused"   # lens refused on 4.2 by name
  tests/blender/flow/test_flow.py                                 # optical / scene flow, adapters, EXR reading
  tests/check/test_checker.py                              # checker on exported EXR/npy payloads
  tests/addon/test_extension.py                            # zip build, install, UI export + check, uninstall
  "tests/blender/export/test_exporter_cli.py::test_python_entry_exports_and_resumes"
)
[ -z "${MATRIX_TESTS:-}" ] || read -ra SELECTION <<< "$MATRIX_TESTS"     # override: MATRIX_TESTS="tests/x.py ..."

find_python() { tools/find_python.sh "$1"; }

python_for() { case $1 in 5.3) echo "${PY313:-$(find_python 3.13)}";; *) echo "${PY311:-$(find_python 3.11)}";; esac; }
venv_for() { case $1 in 5.3) echo .venv;; *) echo ".venv-$1";; esac; }
requirements_for() { case $1 in 5.3) echo requirements.txt;; *) echo "requirements/requirements-bpy$1.txt";; esac; }

for v in "${VERSIONS[@]}"; do
  req=$(requirements_for "$v")
  [ -f "$req" ] || { echo "test-matrix: error: Blender $v is not in the matrix (supported: 4.2 4.5 5.0 5.3)" >&2; exit 2; }
  py=$(python_for "$v")
  want=$([ "$v" = 5.3 ] && echo 3.13 || echo 3.11)
  [ -n "$py" ] || { echo "test-matrix: error: Python $want not found (Blender $v needs it); set PY${want/./}=/path/to/python$want" >&2; exit 2; }
done

printf '%-7s %-10s %-8s %-7s %-8s %-7s %-7s %s\n' blender install_s passed failed skipped wall_s cpu_s log > "$OUT/summary.txt"
status=0
for v in "${VERSIONS[@]}"; do
  venv=$(venv_for "$v"); req=$(requirements_for "$v"); py=$(python_for "$v")
  stamp="$venv/.installed-$(cksum < "$req" | cut -d' ' -f1)"
  t0=$(date +%s)
  if [ "$v" = 5.3 ]; then
    make --no-print-directory venv PY="$py"          # .venv exactly as `make test` installs it
  elif [ ! -f "$stamp" ]; then
    echo "test-matrix: Blender $v: installing $venv from $req ($py)"
    [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet -r "$req"
    rm -f "$venv"/.installed-*
    touch "$stamp"
  fi
  t1=$(date +%s)
  echo "test-matrix: Blender $v: pytest (${#SELECTION[@]} selections)"
  set +e
  # cpu_s (user + system, pytest and its children) is what the run costs whatever else shares the machine
  TIMEFORMAT='%U %S'
  { time "$venv/bin/python" -m pytest -q -p no:cacheprovider -rfEs "${SELECTION[@]}" > "$OUT/$v.log" 2>&1; } \
    2> "$OUT/$v.time"
  rc=$?
  set -e
  t2=$(date +%s)
  last=$(grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|error)' "$OUT/$v.log" | tail -1)
  count() { local n; n=$(echo "$last" | grep -oE "[0-9]+ $1" | cut -d' ' -f1 | head -1 || true); echo "${n:-0}"; }
  passed=$(count passed); failed=$(( $(count failed) + $(count error) )); skipped=$(count skipped)
  cpu=$(awk '{printf "%d", $1 + $2}' "$OUT/$v.time")
  printf '%-7s %-10s %-8s %-7s %-8s %-7s %-7s %s\n' "$v" $((t1 - t0)) "$passed" "$failed" "$skipped" \
    $((t2 - t1)) "$cpu" "$OUT/$v.log" >> "$OUT/summary.txt"
  echo "test-matrix: Blender $v: ${last:-no result} (exit $rc, $((t2 - t1)) s)"
  [ "$rc" -eq 0 ] || { status=1; grep -E '^(FAILED|ERROR) ' "$OUT/$v.log" || tail -20 "$OUT/$v.log"; }
done
cat "$OUT/summary.txt"
exit $status
