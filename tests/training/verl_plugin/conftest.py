"""The verl plugin's tests that need verl. verl caps transformers below the versions the default
environment holds, so it is not in `dev`: these files run in an environment of their own,
which the heavy tier builds (tests/training/test_verl_environment.py) and where they are all
collected; in any environment without verl installed they are not collected (the default tier
covers the plugin's verl-free parts in tests/training/test_verl_step.py). Installed is asked of
the distributions, not the import path, where a folder named like a package could answer."""
from importlib.metadata import PackageNotFoundError, distribution


def _installed(name: str) -> bool:
    try:
        distribution(name)
    except PackageNotFoundError:
        return False
    return True


collect_ignore_glob = [] if _installed("verl") else ["test_*.py"]
