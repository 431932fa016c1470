# rowbeam — `make demo`, `make test`, `make bench`. Everything runs from .venv: Python 3.13 + bpy 5.3.0 (the
# newest Blender). `make test-matrix` also needs Python 3.11 (Blender 4.2, 4.5, 5.0).
PY ?= $(shell tools/find_python.sh 3.13)
PY311 ?= $(shell tools/find_python.sh 3.11)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat requirements.txt | cksum | cut -d' ' -f1)
# The torch loader's tests run in their own venv: Python 3.11 + CPU torch (no CPU torch wheel for 3.13 here).
TORCH_VENV := .venv-torch
TORCH_STAMP := $(TORCH_VENV)/.installed-$(shell cat requirements/requirements-torch.txt | cksum | cut -d' ' -f1)
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
DEMO := out/demo

.PHONY: demo test bench bench-gpu clean venv venv-torch extension test-blender test-matrix mutation

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@test -n "$(PY)" || { echo "make: error: Python 3.13 not found (PATH, ~/.pyenv, /usr); give PY=/path/to/python3.13" >&2; exit 2; }
	$(BIN)/python -c 'import sys; sys.exit(sys.version_info[:2] != (3, 13))' 2>/dev/null || rm -rf $(VENV)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .     # the `rowbeam` command, editable
	rm -f $(VENV)/.installed-*
	touch $@

# .venv-torch: rowbeam's no-Blender part + CPU torch (requirements/requirements-torch.txt), where tests/torch_loader
# runs (started by tests/bundle/test_torch_loader_venv.py). PyTorch's CPU index TORCH_INDEX is added when it answers
# within 5 s (PyPI's Linux torch is the CUDA build); else only the configured indexes are used.
venv-torch: $(TORCH_STAMP)

$(TORCH_STAMP): requirements/requirements-torch.txt
	@test -n "$(PY311)" || { echo "make: error: Python 3.11 not found (the torch loader's venv); give PY311=/path/to/python3.11" >&2; exit 2; }
	test -x $(TORCH_VENV)/bin/python || $(PY311) -m venv $(TORCH_VENV)
	idx=$$($(TORCH_VENV)/bin/python -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' \
		"$(TORCH_INDEX)/" 2>/dev/null && echo "--extra-index-url $(TORCH_INDEX)"); \
	$(TORCH_VENV)/bin/python -m pip install --quiet $$idx -r requirements/requirements-torch.txt
	rm -f $(TORCH_VENV)/.installed-*
	touch $@

# The demo runs at 640x360 with 8 rgb samples per pixel so a newcomer waits about 3 minutes on 2 cores;
# DEMO_SCALE=1 DEMO_SPP=16 gives the full 1280x720 running example.
DEMO_SCALE ?= 2
DEMO_SPP ?= 8
$(DEMO)/dusk_shuttle.blend: $(STAMP) $(shell find rowbeam/blender/scenes -name "*.py")
	rm -rf $(DEMO)
	$(BIN)/python -m rowbeam scenes running_example $@ --scale $(DEMO_SCALE) --rgb-samples $(DEMO_SPP)

demo: $(DEMO)/dusk_shuttle.blend
	rm -rf $(DEMO)/bundle $(DEMO)/report $(DEMO)/adapted $(DEMO)/qa_report.json $(DEMO)/dusk.mcap $(DEMO)/dusk.mcap.json \
		$(DEMO)/dusk.rrd
	$(BIN)/python render_export.py $(DEMO)/dusk_shuttle.blend --rig $(DEMO)/dusk_shuttle.rig.json \
		--out $(DEMO)/bundle --sensors camera_front --first-event 30 --count 2 --flow
	$(BIN)/python render_export.py $(DEMO)/dusk_shuttle.blend --rig $(DEMO)/dusk_shuttle.rig.json \
		--out $(DEMO)/bundle --sensors lidar_top --first-event 10 --count 1
	$(BIN)/python render_export.py $(DEMO)/dusk_shuttle.blend --rig $(DEMO)/dusk_shuttle.rig.json \
		--out $(DEMO)/bundle --sensors radar_front --first-event 20 --count 1
	$(BIN)/python render_export.py $(DEMO)/dusk_shuttle.blend --rig $(DEMO)/dusk_shuttle.rig.json \
		--out $(DEMO)/bundle --sensors imu_shuttle --first-event 10 --count 2
	$(BIN)/python -m rowbeam associate $(DEMO)/bundle --max-skew-us 100
	$(BIN)/python -m rowbeam check $(DEMO)/bundle --report $(DEMO)/qa_report.json
	$(BIN)/python -m rowbeam report $(DEMO)/bundle --out $(DEMO)/report
	mkdir -p $(DEMO)/adapted
	$(BIN)/python -m rowbeam adapt coco $(DEMO)/bundle $(DEMO)/adapted/coco.json
	$(BIN)/python -m rowbeam adapt bop $(DEMO)/bundle $(DEMO)/adapted/bop
	$(BIN)/python -m rowbeam adapt kitti-lidar $(DEMO)/bundle $(DEMO)/adapted/kitti_lidar
	$(BIN)/python -m rowbeam adapt euroc-imu $(DEMO)/bundle $(DEMO)/adapted/imu
	$(BIN)/python -m rowbeam adapt flo $(DEMO)/bundle/flows/camera_front/000030-000031 $(DEMO)/adapted/flow_30_31.flo
	$(BIN)/python -m rowbeam adapt mcap $(DEMO)/bundle $(DEMO)/dusk.mcap
	$(BIN)/python -m rowbeam view $(DEMO)/bundle $(DEMO)/dusk.rrd
	@echo
	@echo "demo bundle:   $(abspath $(DEMO)/bundle)     (camera rows, LiDAR sweep, radar frame, IMU, flow, state log)"
	@echo "QA report:     $(abspath $(DEMO)/qa_report.json)"
	@echo "visual QA:     $(abspath $(DEMO)/report/index.html)   <- open this first"
	@echo "adapted views: $(abspath $(DEMO)/adapted)     (COCO, BOP, KITTI velodyne, EuRoC IMU, Middlebury .flo)"
	@echo "ROS 2 MCAP:    $(abspath $(DEMO)/dusk.mcap)     (Foxglove / ros2 bag play; docs/mcap.md)"
	@echo "rerun view:    $(abspath $(DEMO)/dusk.rrd)      (rerun $(DEMO)/dusk.rrd; timeline acquisition_time)"

# -rs: every skip with its reason; under CI=true a skip not in tests/skip_allowlist.txt fails (tests/conftest.py)
# The torch loader's venv is built first; without Python 3.11 its test is skipped (under CI=true it fails).
test: $(STAMP)
	@$(MAKE) --no-print-directory venv-torch || test "$$CI" != true
	$(BIN)/python -m pytest -q -rfEs tests

# The mutation run (tools/mutation_run.py): each mutant is one plausible bug planted in a copy of the tree, run
# against the tests chosen for it; prints the score and every survivor, writes tools/mutation_results.md.
# ONLY=id,id or AREA=timing picks a subset (results then printed, the table left alone).
mutation: $(STAMP)
	$(BIN)/python tools/mutation_run.py $(if $(ONLY),--only $(ONLY)) $(if $(AREA),--area $(AREA)) $(MUTATION_ARGS)

# The Blender-facing tests on every supported Blender (4.2, 4.5, 5.0, 5.3), each in its own venv
# (.venv-<V>; 5.3 reuses .venv). Needs Python 3.11 (PY311) and 3.13 (PY), found on PATH or under ~/.pyenv
# when not given; MATRIX="4.2 5.0" picks versions. Per-version results: out/test-matrix/summary.txt.
test-matrix:
	PY311="$(PY311)" PY313="$(PY)" tools/test_matrix.sh $(MATRIX)

bench: $(STAMP)
	$(BIN)/python bench/bench.py $(if $(ONLY),--only $(ONLY)) $(BENCH_ARGS)

# The bench's labels on a CUDA/OptiX GPU vs the CPU (ids bitwise, floats within declared tolerances, GPU/CPU
# time ratios); exits 2 with one line when no GPU is found (never falls back to the CPU)
bench-gpu: $(STAMP)
	$(BIN)/python bench/bench_gpu.py

# dist/rowbeam-<version>.zip for every platform Blender ships, validated by Blender's own CLI
extension: $(STAMP)
	$(BIN)/python tools/build_extension.py

# The same suite inside a real Blender (pytest-blender): make test-blender BLENDER=/path/to/blender
test-blender:
	@test -n "$(BLENDER)" || { echo "usage: make test-blender BLENDER=/path/to/blender"; exit 2; }
	test -x .venv-blender/bin/python || $(PY) -m venv .venv-blender
	.venv-blender/bin/python -m pip install --quiet pytest==9.2.0 pytest-blender==3.0.8
	BPY="$$(.venv-blender/bin/pytest-blender --blender-executable $(BLENDER))" && "$$BPY" -m ensurepip --upgrade \
		&& "$$BPY" -m pip install --quiet OpenEXR==3.5.3 jsonschema==4.26.0 pytest==9.2.0
	.venv-blender/bin/python -m pytest --blender-executable $(BLENDER) -q tests

clean:
	rm -rf out build dist .pytest_cache .venv-blender
