"""Ray is an optional extra: only `gymhub.launch.ray(...)` imports it, and says what to install."""

from __future__ import annotations

import subprocess
import sys


def loaded_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"import sys; {code}; "
                          "print(','.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True)
    return set(out.stdout.strip().rsplit("\n", 1)[-1].split(","))


def test_importing_gymhub_or_its_launchers_does_not_import_ray():
    for code in ("import gymhub", "import gymhub.launch", "import gymhub.launch.cli",
                 "import gymhub.launch.k8s", "import gymhub.cli"):
        loaded = loaded_after(code)
        assert "ray" not in loaded, f"{code} imported ray"
        assert "gymhub.client" not in loaded or code == "import gymhub.cli", code


def test_gymhub_launch_ray_is_the_function():
    import gymhub.launch

    assert callable(gymhub.launch.ray) and gymhub.launch.ray.__module__ == "gymhub.launch.ray_launch"


def test_without_the_extra_the_error_names_it():
    code = ("import sys; sys.modules['ray'] = None\n"  # what a missing package looks like
            "import gymhub.launch\n"
            "from gymhub.errors import ConfigError\n"
            "try:\n"
            "    gymhub.launch.ray(['echo-v0'], servers=1)\n"
            "except ConfigError as exc:\n"
            "    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'gymhub[ray]'" in out.stdout


def test_the_cli_says_it_in_one_line():
    code = ("import sys; sys.modules['ray'] = None\n"
            "from gymhub.launch.cli import main\n"
            "sys.exit(main(['ray', 'echo-v0', '--servers', '1']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip() == ("gymhub: error: launching servers on Ray needs 'ray': "
                                   "pip install 'gymhub[ray]'")
