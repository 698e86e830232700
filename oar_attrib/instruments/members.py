"""The built-in instruments, imported so that each registers itself, in the order `oar recall
--help` lists them (`MEMBERS`: whichever module another import loaded first, the listing keeps
this order)."""
from . import world, steps, data, graded, advantage, intervention  # noqa: F401  (registration)

MEMBERS = (world, steps, data, graded, advantage, intervention)
