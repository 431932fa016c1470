# rowbeam — `make demo`, `make test`, `make bench`. Everything runs from .venv (Python 3.11).
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat requirements.txt | cksum | cut -d' ' -f1)
DEMO := out/demo

.PHONY: demo test bench clean venv

venv: $(STAMP)

$(STAMP): requirements.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	rm -f $(VENV)/.installed-*
	touch $@

$(DEMO)/dusk_shuttle.blend: $(STAMP) scenes/*.py
	rm -rf $(DEMO)
	$(BIN)/python -m scenes.build running_example $@ --rgb-samples 16

demo: $(DEMO)/dusk_shuttle.blend
	$(BIN)/python render_export.py $(DEMO)/dusk_shuttle.blend --rig $(DEMO)/dusk_shuttle.rig.json \
		--out $(DEMO)/bundle --sensors camera_front --first-event 30 --count 3
	$(BIN)/python render_export.py $(DEMO)/dusk_shuttle.blend --rig $(DEMO)/dusk_shuttle.rig.json \
		--out $(DEMO)/bundle --sensors lidar_top --first-event 10 --count 1
	$(BIN)/python -m contracts check $(DEMO)/bundle --report $(DEMO)/qa_report.json
	@echo "demo bundle:  $(abspath $(DEMO)/bundle)"
	@echo "QA report:    $(abspath $(DEMO)/qa_report.json)"

test: $(STAMP)
	$(BIN)/python -m pytest -q tests

bench: $(STAMP)
	$(BIN)/python bench/bench.py

clean:
	rm -rf out build dist .pytest_cache
