# make serve   - serve the default policy (embedded Redis unless REDIS_URL is set)
# make test    - install what is missing, then ruff and every test
# make test-fast - the same without the tests marked slow (vLLM, server processes, ALFWorld games, browser, bench)
VENV ?= .venv
PY := $(VENV)/bin/python
export HF_HUB_OFFLINE := 1
export ALFWORLD_DATA ?= $(CURDIR)/data/alfworld-home

.PHONY: install serve test test-fast model policy clean system-deps-serve system-deps-test

install:
	scripts/setup_venv.sh $(VENV) cpu,train,dev

# dev mode (auth off, loudly announced) unless EVOHARNESS_AUTH=on and keys are configured
serve: system-deps-serve install
	EVOHARNESS_AUTH=$${EVOHARNESS_AUTH:-off} $(PY) -m service.cli serve $(ARGS)

test: system-deps-test install
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

# the edit-test loop: `slow` is set in tests/conftest.py
test-fast: system-deps-test install
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -p no:cacheprovider -m "not slow" $(PYTEST_ARGS)

# reproduce models/default-policy end to end (generate -> teacher -> LM+SFT -> GRPO -> export -> evaluate);
# finished stages are reused, FORCE=--force reruns them; POLICY_ARGS adds pipeline settings, e.g.
# POLICY_ARGS="--grpo-updates 7 --grpo-games 64" (the GRPO stage, docs/training.md)
policy: install
	OMP_NUM_THREADS=1 $(PY) -m training.pipeline --out models/default-policy --work runs/policy $(FORCE) $(POLICY_ARGS)

model: install
	$(PY) -m service.policy.bootstrap_model --out models/untrained-tiny

# system tools first (redis-server, chromium, ...): installed as root with apt, else stop with one line
system-deps-serve:
	scripts/system_deps.sh serve
system-deps-test:
	scripts/system_deps.sh test

clean:
	rm -rf models/untrained-tiny .pytest_cache
