# Two commands matter: `make run` and `make test`. Everything else is a step of them.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
JS_STAMP := tests/js/node_modules/.installed

.PHONY: setup proto run test test-scale soak lint typecheck bench clean dist docs

$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

# The JS langgraph-sdk that tests/e2e/test_js_sdk_contract.py drives, as the lock pins it.
$(JS_STAMP): tests/js/package.json tests/js/package-lock.json
	cd tests/js && npm ci --no-audit --no-fund
	touch $(JS_STAMP)

setup: $(STAMP) $(JS_STAMP)

# Regenerate the gRPC stubs from protos/ (never edit waybill/v1 by hand).
proto: $(STAMP)
	$(BIN)/python -m waybill.common.contracts

# The generated tables of docs/configuration.md, from common/settings.py (never edit
# them by hand); tests/repo/test_docs.py fails if they are stale.
docs: $(STAMP)
	$(BIN)/python -m waybill.cli config reference --write docs/configuration.md

run: setup proto
	$(BIN)/python -m waybill.common.launch

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	$(BIN)/mypy waybill

# The stubs are committed; tests/repo/test_contracts.py fails if they are stale.
# Two workers (each test file whole on one of them: its stacks are shared), then the
# multi-replica profile and the soak alone, so that nothing competes with their timings.
test: setup lint typecheck
	$(BIN)/pytest -q -n 2 --dist loadfile -m "not scale and not soak" --durations=25
	$(BIN)/pytest -q -m "scale or soak"

# The multi-replica profile (2 gateways, 2 admission, 2 runners, 2 journals, 1 delivery
# on Postgres + Redis) end to end, then the 60-second soak (both also in `make test`).
test-scale: setup
	$(BIN)/pytest -q -s -m "scale or soak"

# The 10-minute soak: mixed traffic, runners SIGKILLed and restarted; prints its figures.
soak: setup
	WAYBILL_SOAK_SECONDS=600 $(BIN)/pytest -q -s -m soak

bench: setup proto
	$(BIN)/python -m bench.run

clean:
	rm -rf $(VENV) .waybill tests/js/node_modules

# The wheel and sdist (dist/): what `pip install waybill-*.whl` installs into a project's venv.
dist: setup
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
