"""The verl plugin's tests that need verl. verl caps transformers below the versions the default
environment holds, so it is not in `dev`: these files run in an environment of their own,
which the heavy tier builds (tests/training/test_verl_environment.py) and where they are all
collected; in any environment without verl they are not collected (the default tier covers
the plugin's verl-free parts in tests/training/test_verl_step.py)."""
import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("verl") else ["test_*.py"]
