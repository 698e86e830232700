"""The built-in instruments, imported so that each registers itself, in the order `oar recall
--help` lists them."""
from . import world, steps, data, graded, advantage, intervention  # noqa: F401  (registration)
