"""The synthetic arithmetic world: seeded problems whose solutions are chains of steps, the
structural oracle of which tokens the answer reads, its reward and answer parser, the world's
character tokenizer and held-out evaluation of a model on it.

Nothing in the attribution pipeline depends on this package: it is the test bed that knows
which tokens are causal (see `problems` for the sets).
"""
from .problems import (ANSWER_FORMATS, FILLERS, KNOWN_SETS, NAMES, PRESETS, STEP_RE, Operand, Oracle, Problem,
                       Step, WorldConfig, extract_answer, format_answer, generate_problems, get_config,
                       oracle_spans, reward, split_of)

__all__ = ["ANSWER_FORMATS", "FILLERS", "KNOWN_SETS", "NAMES", "PRESETS", "STEP_RE", "Operand", "Oracle",
           "Problem", "Step", "WorldConfig", "extract_answer", "format_answer", "generate_problems",
           "get_config", "oracle_spans", "reward", "split_of"]
